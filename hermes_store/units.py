"""Write units: a callable run as one transaction, re-run whole on contention (any engine).

``RetryPolicy`` is the one statement of how a unit rides out another writer (decision
D8); ``WriteUnits`` runs units by it. What differs between engines — how a unit begins
and what it locks, which failures are worth a re-run, what happens after a commit — is
the backend's (``hermes_store.backends``): this module never asks which engine it has.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .connections import (
    autocommit,
    connections_for,
    end_failed_transaction,
    transaction,
    writer,
)

if TYPE_CHECKING:  # pragma: no cover
    from .backends.base import Backend

T = TypeVar("T")

#: seconds SQLite's busy handler (PostgreSQL: ``lock_timeout``) waits for a lock
DEFAULT_BUSY_TIMEOUT = 1.0


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
    #: PASSIVE WAL checkpoint after this many successful write units (0 = never)
    checkpoint_every: int = 50

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if not 0 <= self.jitter_min <= self.jitter_max:
            raise ValueError("RetryPolicy needs 0 <= jitter_min <= jitter_max")


class WriteUnits:
    """Runs callables as write units, re-running a unit whole when it failed on
    contention (decisions D8, D13).

    A unit is retried only when it failed *before* its COMMIT returned, so a unit that
    committed is never applied twice; a connection lost while COMMIT was on its way
    (PostgreSQL) is an unknown outcome, raised as ``CommitOutcomeUnknownError`` and
    never retried.

    The backend decides the rest. SQLite (``backend.holds_connections`` and
    ``serializes_units``): each thread runs its units on its own held writer connection,
    one unit at a time per instance (threads of one process queue on a lock instead of
    spinning in SQLite's busy handler); every unit begins with ``BEGIN IMMEDIATE``, and
    every ``checkpoint_every`` commits a PASSIVE checkpoint runs. PostgreSQL: each unit
    checks a connection out of the pool, begins READ COMMITTED and takes the store's
    unit lock first (``backend.lock_unit``): exclusive, or shared for units declared
    ``concurrent``; serialization failures, deadlocks and lock timeouts re-run the unit,
    and so does a connection lost before COMMIT, on a fresh connection.
    """

    def __init__(self, engine: Engine, policy: RetryPolicy, *, label: object,
                 backend: "Backend") -> None:
        self.backend = backend
        self._writers = connections_for(writer(engine), backend.holds_connections)
        self._maintenance = autocommit(engine)
        self.policy = policy
        self.label = label
        self._lock = threading.RLock() if backend.serializes_units else None
        self._local = threading.local()
        self.committed = 0
        #: busy retries seen since creation (load tests and benchmarks report it)
        self.retries = 0

    def active_connection(self) -> sa.Connection | None:
        """The connection of the unit running on this thread, if any."""
        return getattr(self._local, "conn", None)

    def run(self, fn: Callable[[sa.Connection], T], *, concurrent: bool = False) -> T:
        """Run ``fn(conn)`` as one unit and return its result. ``concurrent=True``
        declares that the unit only changes rows through statements that lock them
        (no read-decide-write), so where the backend locks units (PostgreSQL) it may
        run beside other such units; SQLite runs every unit alone either way."""
        joined = self.active_connection()
        if joined is not None:
            # A unit started inside a unit joins it: a second BEGIN IMMEDIATE on another
            # connection would wait for the lock this thread already holds.
            if not concurrent and self._local.concurrent and self.backend.locks_units:
                self.backend.lock_unit(joined, exclusive=True)  # it must run alone after all
                self._local.concurrent = False
            return fn(joined)
        if self._lock is None:
            return self._run(fn, concurrent)
        with self._lock:
            return self._run(fn, concurrent)

    def _run(self, fn, concurrent: bool):
        from .errors import CommitOutcomeUnknownError, StoreBusyError

        policy, writers, backend = self.policy, self._writers, self.backend
        for attempt in range(1, policy.attempts + 1):
            try:
                if writers.held:
                    result = self._attempt(writers.get(), fn, concurrent)
                else:
                    with writers.checkout() as conn:
                        result = self._attempt(conn, fn, concurrent)
            except CommitOutcomeUnknownError:
                raise
            except BaseException as exc:
                if not isinstance(exc, sa.exc.DBAPIError):
                    raise
                transient = backend.is_transient(exc)
                if not transient and not backend.is_connection_lost(exc):
                    backend.raise_translated(exc, self.label)
                if attempt == policy.attempts:
                    if transient:
                        raise StoreBusyError(self.label, attempt, exc.orig) from exc
                    backend.raise_translated(exc, self.label)  # the server stayed away
                self.retries += 1
                time.sleep(random.uniform(policy.jitter_min, policy.jitter_max))
                continue
            self.committed += 1
            if backend.checkpoints and policy.checkpoint_every \
                    and self.committed % policy.checkpoint_every == 0:
                self.checkpoint()
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, conn: sa.Connection, fn, concurrent: bool):
        """One try of a unit on ``conn``: begin, (lock,) run, commit."""
        local, backend = self._local, self.backend
        if backend.driver_transactions(conn.dialect):
            with transaction(conn):  # BEGIN IMMEDIATE: a writer connection
                local.conn, local.concurrent = conn, concurrent
                try:
                    return fn(conn)
                finally:
                    local.conn = None
        try:
            trans = conn.begin()  # the begin hook picks the engine's mode
            if backend.locks_units:
                backend.lock_unit(conn, exclusive=not concurrent)
            local.conn, local.concurrent = conn, concurrent
            try:
                result = fn(conn)
            finally:
                local.conn = None
            # a session the server ended while the unit was idle (a restart) never
            # received COMMIT: re-run the unit rather than report an unknown outcome
            ended = backend.session_ended(conn)
            if ended is not None:
                raise ended
        except BaseException:
            end_failed_transaction(conn)
            raise
        try:
            trans.commit()
        except BaseException as exc:
            end_failed_transaction(conn)
            if isinstance(exc, sa.exc.DBAPIError) and backend.is_connection_lost(exc):
                from .errors import CommitOutcomeUnknownError

                raise CommitOutcomeUnknownError(
                    f"{self.label}: the connection was lost while the write was being "
                    f"committed ({getattr(exc, 'orig', exc)}); the server may or may not "
                    "have stored it. It was not retried (that could store it twice): "
                    "read the data back before writing it again."
                ) from exc
            raise
        return result

    def close(self) -> None:
        """Release every thread's writer connection, once a running unit has finished."""
        if self._lock is None:
            self._writers.close()
            return
        with self._lock:
            self._writers.close()

    def checkpoint(self, mode: str = "PASSIVE") -> tuple | None:
        """The backend's checkpoint (SQLite: copy WAL frames back into the database
        without waiting for readers); None where the engine checkpoints on its own."""
        return self.backend.checkpoint(self._maintenance, mode, self.label)


__all__ = ["DEFAULT_BUSY_TIMEOUT", "RetryPolicy", "WriteUnits"]
