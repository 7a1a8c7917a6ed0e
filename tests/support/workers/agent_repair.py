"""What the agent does with its store at start (``hermes_cli``'s doctor and console):
ask whether it opens cleanly, and repair it when not (issue 31, row 7).

    python3 agent_repair.py PATH

Prints one JSON line: {"reason": why it does not open cleanly (None when it does),
"report": the repair's report (None when none was asked for)}.
"""

from __future__ import annotations

import sys

from _common import say

from hermes_store.agent import hermes_state


def main() -> None:
    path = sys.argv[1]
    reason = hermes_state._db_opens_cleanly(path)
    report = hermes_state.repair_state_db_schema(path) if reason is not None else None
    say(reason=reason, report=report)


if __name__ == "__main__":
    main()
