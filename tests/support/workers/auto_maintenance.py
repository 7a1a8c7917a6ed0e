"""Run the store's auto-maintenance once, starting when a file appears (issue 31, row 9).

    python3 auto_maintenance.py TARGET GO_FILE

Opens the store (a path or a URL), prints "ready", waits until GO_FILE exists (the
parent creates it once every worker is ready, so they start at the same moment), runs
``maybe_auto_prune_and_vacuum(retention_days=30)`` and prints its result as one JSON line.
"""

from __future__ import annotations

import os
import sys
import time

from _common import say, signal_line

from hermes_store import SessionDB


def main() -> None:
    target, go = sys.argv[1], sys.argv[2]
    with SessionDB(target) as db:
        signal_line("ready")
        while not os.path.exists(go):
            time.sleep(0.0005)
        say(**db.maybe_auto_prune_and_vacuum(retention_days=30))


if __name__ == "__main__":
    main()
