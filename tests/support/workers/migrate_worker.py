"""Migration victim: runs hermes_store.migrate.upgrade on a file until done or killed.

    migrate_worker.py DB

Prints "ready" after imports (so the parent times the kill from the start of the
upgrade itself), then "done" with the wall time.
"""

from __future__ import annotations

import sys
import time

from _common import say, signal_line


def main() -> None:
    from hermes_store import migrate

    signal_line("ready")
    start = time.perf_counter()
    migrate.upgrade(sys.argv[1])
    say(done=True, elapsed=time.perf_counter() - start)


if __name__ == "__main__":
    main()
