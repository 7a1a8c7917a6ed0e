"""How the store rides out contention and outages: the one statement of it (decisions
D8, D13, D16), engine-neutral. ``units`` runs write units by it; a backend reads the
busy budget from it (SQLite's busy handler, PostgreSQL's ``lock_timeout``); a read-only
store's reads ride out a disk I/O error by it (:func:`tried_through_io_errors`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")

#: seconds SQLite's busy handler (PostgreSQL: ``lock_timeout``) waits for a lock
DEFAULT_BUSY_TIMEOUT = 1.0
#: seconds a call rides out a lost server connection: longer than a fast restart
#: (1.6-2.7 s here), about what a managed service's failover takes (decision D16)
DEFAULT_OUTAGE_TIMEOUT = 30.0
#: the longest pause between two tries during an outage
OUTAGE_PAUSE_MAX = 1.0


@dataclass(frozen=True)
class RetryPolicy:
    """How a write unit rides out another process's write lock (decision D8).

    Each attempt first waits up to ``busy_timeout`` for the lock (SQLite's busy handler,
    PostgreSQL's ``lock_timeout``), then sleeps a random 20-150 ms so that writers that
    collided do not collide again.
    """

    attempts: int = 15
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    jitter_min: float = 0.020
    jitter_max: float = 0.150
    #: a WAL checkpoint (under the writer lock) after this many successful write units
    #: (0 = never)
    checkpoint_every: int = 50
    #: while the last checkpoint left the log this long (frames; SQLite's own automatic
    #: threshold), one runs after every unit instead: the log restarts from its start
    #: only at a write that follows a complete checkpoint, so a busy log needs them often
    checkpoint_backlog: int = 1000
    #: seconds a call keeps trying after its connection was lost (a server restart, a
    #: failover, the network; a file has no connection to lose): a read is re-run on a
    #: fresh connection, a write unit lost before COMMIT was sent too (decision D16)
    outage_timeout: float = DEFAULT_OUTAGE_TIMEOUT
    #: a read-only store's tries of a read (and of its open) that fails with a disk I/O
    #: error, on the same connection, ``io_pause`` seconds apart: a ``mode=ro``
    #: connection cannot rebuild the ``-shm`` itself, and upstream's read-only openers
    #: met a passing SQLITE_IOERR while a writer reset the WAL (#100436, #100871; issue
    #: 31, row 5). 3 x 50 ms outlasts such a moment and keeps a real failure quick to
    #: report. A writable store never tries again: its I/O errors are real.
    io_attempts: int = 3
    io_pause: float = 0.050

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if not 0 <= self.jitter_min <= self.jitter_max:
            raise ValueError("RetryPolicy needs 0 <= jitter_min <= jitter_max")
        if self.outage_timeout < 0:
            raise ValueError("RetryPolicy.outage_timeout must be 0 or more (seconds)")
        if self.io_attempts < 1 or self.io_pause < 0:
            raise ValueError("RetryPolicy needs io_attempts >= 1 and io_pause >= 0")


def tried_through_io_errors(read: Callable[[], T], is_io_error: Callable[[BaseException], bool],
                            policy: RetryPolicy, failed: BaseException | None = None) -> T:
    """``read()`` run again on the same connection while it fails with an error that
    ``is_io_error`` accepts, ``policy.io_attempts`` tries in all, ``policy.io_pause``
    apart (a read-only store's reads: ``RetryPolicy.io_attempts``); ``failed`` is the
    error of a first try the caller already made. ``read`` must only read. Any other
    error, and the last one, is raised as it came."""
    tries = 0
    while True:
        if failed is not None:
            tries += 1
            if tries >= policy.io_attempts or not is_io_error(failed):
                raise failed
            time.sleep(policy.io_pause)
        try:
            return read()
        except Exception as exc:
            failed = exc


__all__ = ["DEFAULT_BUSY_TIMEOUT", "DEFAULT_OUTAGE_TIMEOUT", "OUTAGE_PAUSE_MAX", "RetryPolicy",
           "tried_through_io_errors"]
