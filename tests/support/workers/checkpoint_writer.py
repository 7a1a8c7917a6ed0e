"""A writer for the checkpoint soak: appends for SECONDS through its own SessionDB,
which checkpoints every 50 units (the default policy).

    checkpoint_writer.py DB WRITER_ID SECONDS

After each append returns it prints {"id", "session", "marker"}: an acknowledged write.
At the end {"done", "writes", "retries"}. Any exception propagates (non-zero exit).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    path, writer_id, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    from hermes_store import SessionDB

    db = SessionDB(path)
    own = f"w{writer_id}"
    db.create_session(own, source="cli")
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        marker = f"soak w{writer_id} n{n}"
        calls = None
        if n % 3 == 2:
            calls = [{"id": f"c{writer_id}_{n}", "type": "function",
                      "function": {"name": "terminal", "arguments": '{"cmd": "ls"}'}}]
        msg_id = db.append_message(own, role="assistant" if calls else "user",
                                   content=f"{marker} " + "lorem ipsum " * (n % 40),
                                   tool_calls=calls)
        print(json.dumps({"id": msg_id, "session": own, "marker": marker}), flush=True)
        n += 1
    print(json.dumps({"done": True, "writes": n, "retries": db._units.retries}), flush=True)
    db.close()


if __name__ == "__main__":
    main()
