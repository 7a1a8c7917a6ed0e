"""A writer that keeps going while its PostgreSQL server restarts.

    restart_writer.py URL WRITER_ID SHARED_SESSION [OUTAGE_TIMEOUT]

Opens one SessionDB (never reopened) and loops until its stdin is closed: appends to
its own session (`r<ID>`) and the shared one in turn, accounts tokens every third step
and reads its own transcript every third step. Each call's outcome is one JSON line:
{"op", "ok", "session", "marker"} (for an append, "ok" is the new id) or
{"op", "error", "message", "session", "marker"} when the package raised one of its own
errors (HermesStoreError); the loop goes on after either. OUTAGE_TIMEOUT (seconds) is
the store's ``RetryPolicy.outage_timeout``, else the default. Any other exception ends the
process with a traceback (exit 1): an error the package did not translate. At the end:
{"done", "retries", "in_doubt", "steps"} (in_doubt: units whose COMMIT was on its way
when the connection was lost, asked about afterwards).
"""

from __future__ import annotations

import sys
import threading
import time

from _common import open_store, say, write_units_of

from hermes_store.errors import HermesStoreError


def main() -> None:
    url, writer_id, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    outage = float(sys.argv[4]) if len(sys.argv) > 4 else None
    db = open_store(url, outage_timeout=outage)
    own = f"r{writer_id}"
    db.create_session(own, source="cli")
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    step = 0
    while not stop.is_set():
        session = own if step % 2 == 0 else shared
        marker = f"restartmark r{writer_id}x{step}"
        calls = [("append", lambda: db.append_message(session, role="user", content=marker))]
        if step % 3 == 2:
            calls.append(("usage", lambda: db.update_token_counts(
                session, input_tokens=5, output_tokens=1, api_call_count=1, model="m-load")))
        if step % 3 == 1:
            calls.append(("read", lambda: len(db.get_messages(own, limit=5))))
        for op, call in calls:
            try:
                result = call()
            except HermesStoreError as exc:
                say(op=op, error=type(exc).__name__, message=str(exc), session=session,
                    marker=marker, at=time.time())
                time.sleep(0.02)  # the server is away: do not spin
            else:
                say(op=op, ok=result, session=session, marker=marker, at=time.time())
        step += 1
    units = write_units_of(db)
    say(done=True, retries=units.retries, in_doubt=units.commits_in_doubt, steps=step)
    db.close()


if __name__ == "__main__":
    main()
