#!/usr/bin/env python3
"""append_message, one message per call (the path a live agent uses).

Two message mixes — plain user/assistant text, and assistant turns with tool calls
followed by their tool rows — appended to a session of a 10k-message store and of the
big store (1M with ``--sizes full``, 100k with ``small``). Per round each side appends
the same 100 messages, call by call in turn (who goes first rotates each call). Reported: the
median over rounds of the per-call median (p50) and mean (the mean carries the periodic
WAL checkpoints and upstream's FTS optimize every 1000 writes), and the calling thread's
CPU time per call (the fsync wait drops out, leaving the cost of the Python layers).

Targets: ours ≤ 1.0× upstream 0.19.0 and ≤ 1.3× the raw floor.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
import _upstream  # noqa: E402
from _common import (  # noqa: E402
    calls_in_turn,
    human,
    log,
    main_for,
    report_per_call,
    smallest_and_biggest,
)
from _floor import Floor, Recorder, engine_of, statements  # noqa: E402
from _workload import Generator  # noqa: E402

NAME = "append"
CALLS_PER_ROUND = 100
WARMUP = 20
SESSION = "bench_append_target"


def message_mix(kind: str, n: int, seed: int) -> list[dict]:
    gen = Generator(10_000, seed=seed)
    out: list[dict] = []
    while len(out) < n:
        turn = gen.turn()
        if kind == "plain":
            out.extend(m for m in turn if m["role"] != "tool" and not m.get("tool_calls"))
        else:
            tool_part = [m for m in turn if m["role"] == "tool" or m.get("tool_calls")]
            out.extend(tool_part)
    return out[:n]


def run(args, report) -> None:
    from hermes_store import SessionDB

    rounds = args.rounds
    n_calls = CALLS_PER_ROUND
    for n in smallest_and_biggest(args):
        work = args.workdir / f"append-{human(n)}"
        head = _stores.store("head", n, log=lambda m: log(args, m))
        ours_path = _stores.working_copy(head, work, "ours.db")
        capture_path = _stores.working_copy(head, work, "capture.db")
        floor_path = _stores.working_copy(head, work, "floor.db")
        up = None
        if not args.no_upstream:
            hs = _upstream.load(args.workdir / "upstream-home")
            up_path = _stores.working_copy(_stores.store("upstream", n, log=lambda m: log(args, m)),
                                           work, "upstream.db")
            up = hs.SessionDB(up_path)
            up.create_session(SESSION, "cli", model="gpt-5")

        for kind in ("plain", "tool calls"):
            total = WARMUP + rounds * n_calls
            msgs = message_mix("plain" if kind == "plain" else "tools", total, seed=11 if kind == "plain" else 12)
            sid = f"{SESSION}_{kind.replace(' ', '_')}"

            # Untimed pass on a scratch copy: record the SQL our append sends, per call.
            cap = SessionDB(capture_path)
            cap.create_session(sid, "cli", model="gpt-5")
            rec = Recorder(engine_of(cap))
            for m in msgs:
                with rec.call():
                    cap.append_message(sid, **m)
            rec.close()
            cap.close()
            per_call = sorted(statements(c) for c in rec.calls)
            floor_setup = SessionDB(floor_path)
            floor_setup.create_session(sid, "cli", model="gpt-5")
            floor_setup.close()

            ours = SessionDB(ours_path)
            ours.create_session(sid, "cli", model="gpt-5")
            floor = Floor(floor_path)
            if up is not None:
                up.create_session(sid, "cli", model="gpt-5")

            def do_ours(i):
                ours.append_message(sid, **msgs[i])

            def do_floor(i):
                floor.replay(rec.calls[i])

            def do_up(i):
                up.append_message(sid, **msgs[i])

            sides = {"ours": do_ours, "floor": do_floor}
            if up is not None:
                sides["upstream"] = do_up
            res, cpu = calls_in_turn(sides, warmup=WARMUP, rounds=rounds, per_round=n_calls)
            ours.close()
            floor.close()
            report_per_call(report, NAME, f"{kind}, {human(n)} store", res, cpu,
                            statements_per_call=[per_call[0], per_call[-1]])
        if up is not None:
            up.close()
        for p in work.glob("*"):
            p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
