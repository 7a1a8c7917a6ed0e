"""Forks crash victims from one warm process (imports paid once, not twenty times).

    crash_zygote.py DB SESSION

DB is a SQLite file's path or a PostgreSQL URL. Reads "run SEED" lines on stdin. For each it forks a child that opens its own
SessionDB and appends until killed, printing {"run", "id", "marker"} after each
append_message returned (flushed); the zygote prints {"child": pid, "run": SEED} and,
once the child is gone, {"reaped": pid, "signal": n, "exit": n}. The parent test
sends the SIGKILL itself.
"""

from __future__ import annotations

import os
import random
import sys

from _common import say


def victim(path: str, session: str, seed: int) -> None:
    from hermes_store import SessionDB

    rng = random.Random(seed)
    db = SessionDB(path)
    say(run=seed, ready=True)
    i = 0
    while True:
        i += 1
        marker = f"crashmark s{seed}n{i}"
        body = marker + " " + ("lorem ipsum dolor " * rng.randint(0, 400))
        if i % 2:
            calls = [{"id": f"t{seed}_{i}_{k}", "type": "function",
                      "function": {"name": "read_file", "arguments": "{}"}}
                     for k in range(rng.randint(1, 3))]
            msg_id = db.append_message(session, role="assistant", content=body, tool_calls=calls)
        else:
            msg_id = db.append_message(session, role="user", content=body)
        say(run=seed, id=msg_id, marker=marker)


def main() -> None:
    path, session = sys.argv[1], sys.argv[2]
    import hermes_store.store  # noqa: F401 - warm the imports the children will use
    import hermes_store.migrate  # noqa: F401
    if "://" in path:
        import psycopg  # noqa: F401
        import hermes_store.backends.postgresql.engine  # noqa: F401

    say(zygote="ready")
    for line in sys.stdin:
        seed = int(line.split()[1])
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                victim(path, session, seed)
            finally:
                os._exit(1)  # only reached on an error: the parent sees exit 1, not a kill
        say(child=pid, run=seed)
        _, status = os.waitpid(pid, 0)
        say(reaped=pid, signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
            exit=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)


if __name__ == "__main__":
    main()
