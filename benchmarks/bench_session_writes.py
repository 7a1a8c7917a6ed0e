#!/usr/bin/env python3
"""Session writes besides appends, one per call (what an agent writes on a session).

* ``update_session_meta(session_id, model_config_json)`` — two model_config texts in
  turn, so every call changes the row;
* the same, moving the session into and out of a delegate run (``{"_delegate_from":
  "parent"}`` and ``{}`` in turn): on ours each call moves the session's messages into
  or out of the substring (trigram) index, the expensive case; upstream's index
  triggers are on ``messages`` only, so its call stays one UPDATE;
* ``set_session_title(session_id, title)`` — a fresh, unique title every call;
* ``update_token_counts(session_id, …)`` — one API call's usage added (small
  increments, the arguments the agent's conversation loop passes: tokens, cost, billing
  route, model, ``api_call_count=1``);
* ``end_session(session_id, "user_exit")`` and ``reopen_session(session_id)`` in turn;
* ``update_system_prompt(session_id, prompt)`` — two prompts of ~3 kB in turn;
* ``create_session(new_id, "cli", model=…)`` — a new session every call (the session's
  own start, which every conversation and gateway chat pays once).

Every call exists in upstream 0.19.0 with the same signature; none is left out.
Each case runs on a session of its own holding the same 20 messages (a third of the
turns call tools), written untimed through each side's own ``append_message``, in a
10k-message store and in the big store (1M with ``--sizes full``, 100k with ``small``);
each side works on its own copy of the same store. Per round each side makes the same
100 calls, call by call in turn (who goes first rotates each call). The floor replays
the SQL ours sent, recorded call by call in an untimed pass on a scratch copy (every
call's SQL depends only on the session's state, which runs through the same values on
the floor's copy); after the calls the three sides' session rows must agree. Reported:
the median over rounds of the per-call median (p50), p95 and mean (the mean carries the
periodic WAL checkpoints), and the calling thread's CPU time per call (the fsync wait
drops out, leaving the cost of the Python layers).

Targets: ours ≤ 1.0× upstream 0.19.0 and ≤ 1.3× the raw floor.
"""

from __future__ import annotations

import json
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

NAME = "session_writes"
CALLS_PER_ROUND = 100
WARMUP = 20
SESSION = "bench_session_writes"
SESSION_MESSAGES = 20

META = ('{"note": "a", "n": 1}', '{"note": "b", "n": 2}')
DELEGATE = ('{"_delegate_from": "parent"}', "{}")
#: two system prompts of an agent's size (stored once each, referenced in turn)
PROMPTS = tuple(f"You are Hermes, a helpful agent ({n}). " + "Follow the user's rules. " * 120
                for n in ("a", "b"))


def _tokens(i: int) -> dict:
    return {
        "input_tokens": 800 + i % 13, "output_tokens": 120 + i % 7,
        "cache_read_tokens": 640, "cache_write_tokens": 0, "reasoning_tokens": 16,
        "estimated_cost_usd": 0.0021, "cost_status": "estimated",
        "cost_source": "official_docs_snapshot", "billing_provider": "openai",
        "billing_base_url": "https://api.openai.com/v1", "model": "gpt-5",
        "api_call_count": 1,
    }


def _end_or_reopen(db, sid: str, i: int) -> None:
    if i % 2:
        db.reopen_session(sid)
    else:
        db.end_session(sid, "user_exit")


#: (case, key, call i of a side on the case's session)
CASES = (
    ("update_session_meta", "meta",
     lambda db, sid, i: db.update_session_meta(sid, META[i % 2])),
    ("update_session_meta, in/out of a delegate run", "delegate",
     lambda db, sid, i: db.update_session_meta(sid, DELEGATE[i % 2])),
    ("set_session_title", "title",
     lambda db, sid, i: db.set_session_title(sid, f"Bench session writes title {i:06d}")),
    ("update_token_counts", "tokens", lambda db, sid, i: db.update_token_counts(sid, **_tokens(i))),
    ("end_session and reopen_session in turn", "end", _end_or_reopen),
    ("update_system_prompt (two prompts in turn)", "prompt",
     lambda db, sid, i: db.update_system_prompt(sid, PROMPTS[i % 2])),
    ("create_session (a new session each call)", "create",
     lambda db, sid, i: db.create_session(f"{sid}-{i:06d}", "cli", model="gpt-5")),
)

#: the session row's columns the sides must agree on after the calls
CHECKED = ("model_config", "title", "input_tokens", "output_tokens", "cache_read_tokens",
           "reasoning_tokens", "api_call_count", "billing_provider")


def session_messages() -> list[dict]:
    gen = Generator(10_000, seed=31)
    msgs: list[dict] = []
    while len(msgs) < SESSION_MESSAGES:
        msgs.extend(gen.turn())
    return msgs[:SESSION_MESSAGES]


def write_session(db, sid: str, msgs: list[dict]) -> None:
    db.create_session(sid, "cli", model="gpt-5")
    for m in msgs:
        db.append_message(sid, **m)


def _row(get) -> tuple:
    row = get()
    return tuple(_norm(row[c]) for c in CHECKED)


def _norm(v):
    if isinstance(v, str) and v[:1] in "{[":
        return json.loads(v)  # JSON text: compare the value, not its spacing
    return v


def run(args, report) -> None:
    from hermes_store import SessionDB

    rounds = args.rounds
    n_calls = CALLS_PER_ROUND
    total = WARMUP + rounds * n_calls
    msgs = session_messages()
    for n in smallest_and_biggest(args):
        work = args.workdir / f"session-writes-{human(n)}"
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

        for case_name, key, call in CASES:
            sid = f"{SESSION}_{key}"

            # Untimed pass on a scratch copy: record the SQL our call sends, per call.
            cap = SessionDB(capture_path)
            write_session(cap, sid, msgs)
            rec = Recorder(engine_of(cap))
            for i in range(total):
                with rec.call():
                    call(cap, sid, i)
            rec.close()
            cap.close()
            per_call = sorted(statements(c) for c in rec.calls)
            floor_setup = SessionDB(floor_path)
            write_session(floor_setup, sid, msgs)
            floor_setup.close()

            ours = SessionDB(ours_path)
            write_session(ours, sid, msgs)
            floor = Floor(floor_path)
            if up is not None:
                write_session(up, sid, msgs)

            def do_ours(i):
                call(ours, sid, i)

            def do_floor(i):
                floor.replay(rec.calls[i])

            def do_up(i):
                call(up, sid, i)

            sides = {"ours": do_ours, "floor": do_floor}
            if up is not None:
                sides["upstream"] = do_up
            res, cpu = calls_in_turn(sides, warmup=WARMUP, rounds=rounds, per_round=n_calls)
            # The sides did the same work: the session rows agree after the calls.
            ours_row = _row(lambda: ours.get_session(sid))
            floor.conn.row_factory = _stores.sqlite3.Row
            floor_row = _row(lambda: floor.conn.execute(
                "SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())
            floor.conn.row_factory = None
            if floor_row != ours_row:
                raise RuntimeError(f"{case_name}: the floor's row {floor_row} is not ours {ours_row}")
            if up is not None:
                up_row = _row(lambda: up.get_session(sid))
                if up_row != ours_row:
                    raise RuntimeError(f"{case_name}: upstream's row {up_row} is not ours {ours_row}")
            ours.close()
            floor.close()
            report_per_call(report, NAME, f"{case_name}, {human(n)} store", res, cpu,
                            statements_per_call=[per_call[0], per_call[-1]])
        if up is not None:
            up.close()
        for p in work.glob("*"):
            p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
