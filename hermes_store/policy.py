"""How the store rides out contention and outages: the one statement of it (decisions
D8, D13, D16), engine-neutral. ``units`` runs write units by it; a backend reads the
busy budget from it (SQLite's busy handler, PostgreSQL's ``lock_timeout``).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if not 0 <= self.jitter_min <= self.jitter_max:
            raise ValueError("RetryPolicy needs 0 <= jitter_min <= jitter_max")
        if self.outage_timeout < 0:
            raise ValueError("RetryPolicy.outage_timeout must be 0 or more (seconds)")


__all__ = ["DEFAULT_BUSY_TIMEOUT", "DEFAULT_OUTAGE_TIMEOUT", "OUTAGE_PAUSE_MAX", "RetryPolicy"]
