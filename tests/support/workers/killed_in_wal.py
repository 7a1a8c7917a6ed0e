"""Create a store, append messages, then die by SIGKILL before anything checkpoints
them: every acknowledged write is in the ``-wal`` only (issue 31, row 8).

    python3 killed_in_wal.py PATH COUNT

Prints one JSON line per acknowledged message ({"id", "session", "content"}).
"""

from __future__ import annotations

import os
import signal
import sys

from _common import say

from hermes_store import SessionDB


def main() -> None:
    path, count = sys.argv[1], int(sys.argv[2])
    db = SessionDB(path)
    db.create_session("s", "cli")
    for i in range(count):
        content = f"acknowledged {i}"
        say(id=db.append_message("s", "user", content), session="s", content=content)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
