"""A reader for the checkpoint soak: searches and lists for SECONDS.

    checkpoint_reader.py DB SECONDS

Prints {"done", "reads"} at the end. Any exception propagates (non-zero exit).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    path, seconds = sys.argv[1], float(sys.argv[2])
    from hermes_store import SessionDB

    db = SessionDB(path, read_only=True)
    deadline = time.monotonic() + seconds
    reads = 0
    while time.monotonic() < deadline:
        db.search_messages("soak", limit=10)
        db.list_sessions_rich(limit=5)
        db.get_messages(f"w{reads % 4}")
        reads += 1
        time.sleep(0.005)
    print(json.dumps({"done": True, "reads": reads}), flush=True)
    db.close()


if __name__ == "__main__":
    main()
