"""A writer whose file gets replaced under it.

    replaced_writer.py DB WRITER_ID MARKER AFTER

Appends to its own session in a loop, printing {"ok": n} for every append that
returned. Before each append it looks for the file MARKER (the test creates it once the
rename over DB is done; a write that already finds the file replaced ends this phase
too); from then on it makes AFTER more attempts and prints
{"after": [outcome, ...]} (each "ok" or the exception's class name), the library it ran
on, and exits 0. Anything else raised before the marker is a failure (exit 1).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    path, writer_id, marker, after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    from hermes_store import SessionDB, StoreReplacedError
    from hermes_store.backends.sqlite.library import library

    db = SessionDB(path)
    own = f"w{writer_id}"
    db.create_session(own, source="cli")
    n = 0
    while not os.path.exists(marker):
        try:
            db.append_message(own, role="user", content=f"w{writer_id} before {n}")
        except StoreReplacedError:  # the rename landed before the marker did
            break
        n += 1
        print(json.dumps({"ok": n}), flush=True)
    outcomes = []
    for i in range(after):
        try:
            if i % 2:
                db.set_session_title(own, f"title {writer_id} {i}")
            else:
                db.append_message(own, role="user", content=f"w{writer_id} after {i}")
            outcomes.append("ok")
        except Exception as exc:  # the test checks which
            outcomes.append(type(exc).__name__)
    print(json.dumps({"after": outcomes, "library": library().name}), flush=True)
    db.close()


if __name__ == "__main__":
    main()
