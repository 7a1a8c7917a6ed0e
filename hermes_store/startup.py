"""What a new process pays before its first call (every ``hermes`` CLI run, cron job
and worker agent pays it): kept small.

Importing the store creates tens of thousands of long-lived objects (SQLAlchemy's
modules, our tables and prebuilt statements, Typer and Rich for the CLI). Python's
cyclic collector runs every few hundred allocations and rescans all of them each time a
collection reaches the older generations, finding no garbage at all (a third of the
import's time: docs/performance.md, "coldstart"). The collector is paused for the import
only and restored afterwards, as it was.

Leaving costs too: when the interpreter exits it runs one last full collection over
every object still alive. The ``hermes-store`` command
owns its process, so once its command has finished it moves what is left out of the
collector's sight (``gc.freeze``) and the process ends without that scan. A library
cannot do that for its host: the host's own objects may need their finalizers.

What the open path imports stays cheap to define, too: its records are
``typing.NamedTuple`` s rather than dataclasses (creating a dataclass class execs
its generated methods), its regular
expressions are compiled on first use (``hermes_store.patterns``), and what only a
damaged file needs (``backends/sqlite/files/repair.py``) is imported when one is found.
``SessionDB`` itself imports only its ``sessions`` concern; the other fourteen come on
first use (``repository/concerns.py``), with the collector paused as here.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (imports only: nothing
    allocated here is garbage), then restore it as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def skip_final_collection() -> None:
    """For a process that is about to exit and owns everything in it (the CLI's
    ``main``): exempt every live object from the exit-time collection."""
    gc.freeze()
