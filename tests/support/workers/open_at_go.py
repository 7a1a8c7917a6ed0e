"""Open a store the moment a file appears, then write one message (issue 31, row 8:
two processes starting on the same blank file at once).

    python3 open_at_go.py PATH GO_FILE NAME

Prints "ready", waits until GO_FILE exists, opens the store at PATH, creates session
NAME with one message and prints {"id", "session", "content"}.
"""

from __future__ import annotations

import os
import sys
import time

from _common import say, signal_line

from hermes_store import SessionDB


def main() -> None:
    path, go, name = sys.argv[1], sys.argv[2], sys.argv[3]
    signal_line("ready")
    while not os.path.exists(go):
        time.sleep(0.0005)
    with SessionDB(path) as db:
        db.create_session(name, "cli")
        content = f"written by {name}"
        say(id=db.append_message(name, "user", content), session=name, content=content)


if __name__ == "__main__":
    main()
