#!/usr/bin/env python3
"""Reads: the hot single calls an agent makes on every turn, and the big reads.

Hot calls (issue 12's table), in the 10k store and the big store (1M with ``--sizes
full``, 100k with ``small``), each on a 60-message session written through each side's
own ``append_message``: ``get_session``, ``message_count``, ``session_count``,
``resolve_session_id`` (a unique prefix), ``search_messages`` with exactly one hit,
``get_messages`` and ``get_messages_as_conversation`` (60 rows) and
``list_sessions_rich(limit=20)``. Target: p50 ≤ 2× upstream 0.19.0 (stretch ≤ 1.2×).

Big reads, in the 100k store: ``get_messages`` and ``get_messages_as_conversation`` of a
20,000-message session; ``list_sessions_rich`` and ``session_count`` over 10,000 sessions.

The floor replays the SQL ours sent (recorded in an untimed pass) and fetches every row,
so ours ÷ floor is the cost of SQLAlchemy plus our row decoding.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
import _upstream  # noqa: E402
from _common import Samples, human, interleaved, log, main_for, smallest_and_biggest  # noqa: E402
from _floor import Floor, Recorder, engine_of, statements  # noqa: E402
from _workload import Generator  # noqa: E402

NAME = "read"
STORE_SIZE = 100_000
LONG = "bench_0000000"  # the generator's first session holds the 20k messages
ITERATIONS = 3
HOT_ITERATIONS = 100
HOT_TARGET, HOT_STRETCH = 2.0, 1.2

#: the hot calls' session: 60 messages, a unique id prefix and one unique word
HOT_SESSION = "hotread_7c1f0e9a"
HOT_PREFIX = "hotread_7c"
HOT_MESSAGES = 60
HOT_WORD = "quetzalcoatlite"

CASES = (
    ("get_messages, 20k-message session", "get_messages", (LONG,), {}),
    ("get_messages_as_conversation, 20k", "get_messages_as_conversation", (LONG,), {}),
    ("list_sessions_rich limit=20, 10k sessions", "list_sessions_rich", (), {}),
    ("list_sessions_rich limit=500, 10k sessions", "list_sessions_rich", (), {"limit": 500}),
    ("list_sessions_rich by last active, 10k", "list_sessions_rich", (), {"order_by_last_active": True}),
    ("session_count, 10k sessions", "session_count", (), {}),
)

HOT_CASES = (
    ("get_session", "get_session", (HOT_SESSION,), {}),
    ("message_count", "message_count", (HOT_SESSION,), {}),
    ("session_count", "session_count", (), {}),
    ("resolve_session_id (prefix)", "resolve_session_id", (HOT_PREFIX,), {}),
    ("search_messages, one hit", "search_messages", (HOT_WORD,), {}),
    ("get_messages_as_conversation, 60 rows", "get_messages_as_conversation", (HOT_SESSION,), {}),
    ("get_messages, 60 rows", "get_messages", (HOT_SESSION,), {}),
    ("list_sessions_rich(limit=20)", "list_sessions_rich", (), {"limit": 20}),
)


def hot_messages() -> list[dict]:
    """60 realistic messages (a third of the turns call tools), one with HOT_WORD."""
    gen = Generator(10_000, seed=21)
    msgs: list[dict] = []
    while len(msgs) < HOT_MESSAGES:
        msgs.extend(gen.turn())
    msgs = msgs[:HOT_MESSAGES]
    planted = next(i for i in range(HOT_MESSAGES // 2, HOT_MESSAGES) if msgs[i]["role"] == "user")
    msgs[planted] = dict(msgs[planted], content=f"where did the {HOT_WORD} sample go?")
    return msgs


def write_hot_session(db) -> None:
    db.create_session(HOT_SESSION, "cli", model="gpt-5")
    for m in hot_messages():
        db.append_message(HOT_SESSION, **m)


def _size(out):
    return len(out) if isinstance(out, (list, dict)) else out


def measure(report, args, ours, floor, up, cases, iterations, *, case_suffix="", targets=False):
    for case, method, a, kw in cases:
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
        for fn, _ in sides.values():  # warm-up
            for _ in range(min(iterations, 20)):
                fn()
        res = interleaved(sides, args.rounds, iterations)
        scale = 1e6 if targets else 1e3
        g = lambda side: (res[side]["p50"] * scale) if side in res else None  # noqa: E731
        target, met = "", None
        if targets and up is not None:
            target = f"≤{HOT_TARGET:g}× upstream (stretch ≤{HOT_STRETCH:g}×)"
            met = g("ours") <= HOT_TARGET * g("upstream")
        report.add(NAME, case + case_suffix, "p50", "µs" if targets else "ms",
                   g("ours"), g("floor"), g("upstream"), target=target, met=met,
                   rows_ours=_size(ours_out), rows_upstream=_size(up_out),
                   statements=statements(call),
                   summaries=res)


def run_hot(args, report, n: int) -> None:
    from hermes_store import SessionDB

    work = args.workdir / f"read-hot-{human(n)}"
    ours_path = _stores.working_copy(_stores.store("head", n, log=lambda m: log(args, m)), work, "ours.db")
    setup = SessionDB(ours_path)
    write_hot_session(setup)
    setup.close()
    ours = SessionDB(ours_path)
    floor = Floor(ours_path)
    up = None
    if not args.no_upstream:
        hs = _upstream.load(args.workdir / "upstream-home")
        up_path = _stores.working_copy(_stores.store("upstream", n, log=lambda m: log(args, m)),
                                       work, "upstream.db")
        up = hs.SessionDB(up_path)
        write_hot_session(up)
        hits = up.search_messages(HOT_WORD)
        if len(hits) != 1:
            raise RuntimeError(f"upstream finds {len(hits)} hits for {HOT_WORD!r}, expected 1")
    if len(ours.search_messages(HOT_WORD)) != 1:
        raise RuntimeError(f"ours does not find exactly one hit for {HOT_WORD!r}")
    measure(report, args, ours, floor, up, HOT_CASES, HOT_ITERATIONS,
            case_suffix=f", {human(n)}", targets=True)
    ours.close()
    floor.close()
    if up is not None:
        up.close()
    for p in work.glob("*"):
        p.unlink()


def run(args, report) -> None:
    from hermes_store import SessionDB

    for n in smallest_and_biggest(args):
        run_hot(args, report, n)

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
    measure(report, args, ours, floor, up, CASES, ITERATIONS)
    ours.close()
    floor.close()
    if up is not None:
        up.close()
    for p in work.glob("*"):
        p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
