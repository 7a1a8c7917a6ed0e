#!/usr/bin/env python3
"""Reads: get_messages of a 20,000-message session, get_messages_as_conversation of it,
and list_sessions_rich over 10,000 sessions (the 100k-message store).

The floor replays the SQL ours sent (recorded in an untimed pass) and fetches every row,
so ours ÷ floor is the cost of SQLAlchemy plus our row decoding.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
import _upstream  # noqa: E402
from _common import Samples, interleaved, log, main_for  # noqa: E402
from _floor import Floor, Recorder, engine_of  # noqa: E402

NAME = "read"
STORE_SIZE = 100_000
LONG = "bench_0000000"  # the generator's first session holds the 20k messages
ITERATIONS = 3

CASES = (
    ("get_messages, 20k-message session", "get_messages", (LONG,), {}),
    ("get_messages_as_conversation, 20k", "get_messages_as_conversation", (LONG,), {}),
    ("list_sessions_rich limit=20, 10k sessions", "list_sessions_rich", (), {}),
    ("list_sessions_rich limit=500, 10k sessions", "list_sessions_rich", (), {"limit": 500}),
    ("list_sessions_rich by last active, 10k", "list_sessions_rich", (), {"order_by_last_active": True}),
    ("session_count, 10k sessions", "session_count", (), {}),
)


def run(args, report) -> None:
    from hermes_store import SessionDB

    work = args.workdir / "read"
    ours_path = _stores.working_copy(_stores.store("head", STORE_SIZE, log=lambda m: log(args, m)), work, "ours.db")
    ours = SessionDB(ours_path)
    floor = Floor(ours_path)
    up = None
    if not args.no_upstream:
        hs = _upstream.load(args.workdir / "upstream-home")
        up_path = _stores.working_copy(_stores.store("upstream", STORE_SIZE, log=lambda m: log(args, m)),
                                       work, "upstream.db")
        up = hs.SessionDB(up_path)

    for case, method, a, kw in CASES:
        rec = Recorder(engine_of(ours))
        with rec.call():
            ours_out = getattr(ours, method)(*a, **kw)
        rec.close()
        call = rec.calls[0]
        sides = {
            "ours": (lambda: getattr(ours, method)(*a, **kw), Samples()),
            "floor": (lambda: floor.replay(call), Samples()),
        }
        up_out = None
        if up is not None:
            up_out = getattr(up, method)(*a, **kw)
            sides["upstream"] = (lambda: getattr(up, method)(*a, **kw), Samples())
        res = interleaved(sides, args.rounds, ITERATIONS)
        g = lambda side: (res[side]["p50"] * 1e3) if side in res else None  # noqa: E731
        size = lambda out: len(out) if isinstance(out, list) else out  # noqa: E731
        report.add(NAME, case, "p50", "ms", g("ours"), g("floor"), g("upstream"),
                   rows_ours=size(ours_out), rows_upstream=size(up_out),
                   statements=sum(1 for k, s, _ in call if k == "exec" and not s.lstrip().upper().startswith("BEGIN")),
                   summaries=res)
    ours.close()
    floor.close()
    if up is not None:
        up.close()
    for p in work.glob("*"):
        p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
