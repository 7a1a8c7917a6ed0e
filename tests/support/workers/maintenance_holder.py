"""Hold the store's auto-maintenance turn, as a process in the middle of its
auto-maintenance does (issue 31, row 9).

    python3 maintenance_holder.py TARGET

Prints "held" (or "not held") once it asked for the turn, then keeps it until a line
arrives on stdin.
"""

from __future__ import annotations

import sys

from _common import signal_line

from hermes_store import SessionDB


def main() -> None:
    with SessionDB(sys.argv[1]) as db:
        with db._backend.maintenance_turn(db._engine, db.target) as turn:
            signal_line("held" if turn else "not held")
            sys.stdin.readline()


if __name__ == "__main__":
    main()
