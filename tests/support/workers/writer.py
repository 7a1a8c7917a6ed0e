"""Load/retry writer: appends a fixed number of messages through its own SessionDB.

    writer.py DB WRITER_ID COUNT SHARED_SESSION [BUSY_TIMEOUT ATTEMPTS JITTER_MAX [GO_FILE]]

DB is a SQLite file's path or a PostgreSQL URL. Alternates between its own session
(`w<ID>`) and the shared one; assistant rows carry 0-3 tool calls, and every fourth
step also accounts an API call's tokens on that session (`update_token_counts`).
After each append returns it prints {"id", "session", "marker", "tools"}, after each
accounted call {"usage", "input"}; at the end {"done", "retries", "elapsed", "writes"}.
With GO_FILE, it opens the store and creates its session, prints "ready", and starts
appending only once GO_FILE exists, so that writers started one by one write at the
same time. Any exception propagates: a non-zero exit code is an error that reached
the caller.
"""

from __future__ import annotations

import os
import random
import sys
import time

from _common import open_store, say, signal_line, write_units_of


def main() -> None:
    path, writer_id, count, shared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    policy = [float(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])] if len(sys.argv) > 5 else [None] * 3
    rng = random.Random(writer_id)
    db = open_store(path, *policy)
    own = f"w{writer_id}"
    db.create_session(own, source="cli")
    if len(sys.argv) > 8:
        signal_line("ready")
        while not os.path.exists(sys.argv[8]):
            time.sleep(0.0005)
    start = time.perf_counter()
    for i in range(count):
        session = own if i % 2 == 0 else shared
        marker = f"loadmark w{writer_id}x{i}"
        if i % 3 == 2:
            tools = rng.randint(0, 3)
            calls = [
                {"id": f"c{writer_id}_{i}_{k}", "type": "function",
                 "function": {"name": "terminal", "arguments": '{"cmd": "ls"}'}}
                for k in range(tools)
            ]
            msg_id = db.append_message(session, role="assistant", content=marker, tool_calls=calls)
        else:
            tools = 0
            msg_id = db.append_message(session, role="user", content=marker)
        say(id=msg_id, session=session, marker=marker, tools=tools)
        if i % 4 == 3:
            tokens = 10 + writer_id
            db.update_token_counts(session, input_tokens=tokens, output_tokens=3,
                                   api_call_count=1, model="m-load")
            say(usage=session, input=tokens)
    elapsed = time.perf_counter() - start
    say(done=True, retries=write_units_of(db).retries, elapsed=elapsed, writes=count)
    db.close()


if __name__ == "__main__":
    main()
