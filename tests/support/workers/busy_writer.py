"""A live writer for the close() test: appends in a loop until its stdin closes.

    busy_writer.py DB SESSION

Prints "writing" after its first append, then {"written", "errors"} at the end.
"""

from __future__ import annotations

import sys
import threading

from _common import open_store, say, signal_line


def main() -> None:
    path, session = sys.argv[1], sys.argv[2]
    db = open_store(path)
    db.create_session(session, source="gateway")
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    written = 0
    while not stop.is_set():
        db.append_message(session, role="user", content=f"gateway line {written} " + "x" * 2000)
        written += 1
        if written == 1:
            signal_line("writing")
    db.close()
    say(written=written)


if __name__ == "__main__":
    main()
