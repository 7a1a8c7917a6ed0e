"""Write units: a callable run as one transaction, re-run whole on contention (any engine).

``WriteUnits`` runs units by the ``RetryPolicy`` (``policy.py``, decision D8). What differs between engines — how a unit begins
and what it locks, which failures are worth a re-run, what happens after a commit — is
the backend's (``hermes_store.backends``): this module never asks which engine it has.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Callable, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from .connections import (
    autocommit,
    connections_for,
    end_failed_transaction,
    transaction,
    writer,
)
from .backends.base import ABORTED, COMMITTED, Backend
from .errors import CommitOutcomeUnknownError, ServerUnreachableError, StoreBusyError
from .policy import OUTAGE_PAUSE_MAX, RetryPolicy
from .unit_locks import STORE, HeldLocks, Locks

T = TypeVar("T")

#: per thread: the locks held by each unit running on it, by its connection's id
#: (``hold`` is called with a connection only)
_running = threading.local()


class _ThreadUnits(threading.local):
    """Per thread: the running unit's connection and how many units it committed.
    Class-level defaults, because a missing thread-local attribute costs a raised and
    caught AttributeError on every read on every thread that has not written yet."""

    conn: sa.Connection | None = None
    commits = 0


def _running_units() -> dict:
    units = getattr(_running, "units", None)
    if units is None:
        units = _running.units = {}
    return units


def hold(conn: sa.Connection, locks: Locks) -> None:
    """Inside a running write unit: take ``locks`` as well (what the unit does not hold
    yet), before the statements that change what they name — the delegate runs of a
    session being deleted, the ancestor a title is handed over from (decision D16,
    ``unit_locks``). Nothing where the backend does not lock units (SQLite: the unit
    runs alone already), nor outside a unit."""
    entry = _running_units().get(id(conn))
    if entry is not None:
        backend, held = entry
        backend.lock_unit(conn, locks, held)


class Outage:
    """One call's time budget across lost connections (``RetryPolicy.outage_timeout``),
    counted from the first loss: :meth:`wait` sleeps before the next try — a random
    pause that doubles each time, from ``jitter_max`` up to ``OUTAGE_PAUSE_MAX`` — or
    says the budget is spent (contention keeps its own budget, ``attempts``)."""

    __slots__ = ("policy", "deadline", "waits")

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.deadline = time.monotonic() + policy.outage_timeout
        self.waits = 0

    def wait(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        step = min(OUTAGE_PAUSE_MAX, max(self.policy.jitter_max, 0.01) * 2 ** self.waits)
        self.waits += 1
        time.sleep(min(left, random.uniform(step / 2, step)))
        return True

    def error(self, exc: BaseException, where: object, backend: "Backend") -> BaseException:
        """What to raise once the budget is spent: the package's error (it names the
        database), saying how long it tried and which setting gives it longer."""
        mapped = backend.translate_error(exc, where)
        if isinstance(mapped, ServerUnreachableError):
            return ServerUnreachableError(
                f"{mapped}; tried for {self.policy.outage_timeout:g} s "
                "(RetryPolicy(outage_timeout=…) sets how long)")
        return mapped if mapped is not None else exc


class WriteUnits:
    """Runs callables as write units, re-running a unit whole when it failed on
    contention (decisions D8, D13).

    A unit is retried only when it failed *before* its COMMIT returned, so a unit that
    committed is never applied twice. When the connection is lost while COMMIT is on
    its way (PostgreSQL), the backend is asked on a fresh connection what became of it
    (``Backend.commit_outcome``, within the outage budget): committed — the unit's
    result is returned; aborted — it is re-run; otherwise it is an unknown outcome,
    raised as ``CommitOutcomeUnknownError`` and never retried.

    The backend decides the rest. SQLite (``backend.keeps_connections`` and
    ``serializes_units``): each thread runs its units on its own kept writer connection,
    one unit at a time per instance (threads of one process queue on a lock instead of
    spinning in SQLite's busy handler); every unit begins with ``BEGIN IMMEDIATE``, and
    every ``checkpoint_every`` commits a checkpoint runs (under the writer lock). PostgreSQL: each unit
    checks a connection out of the pool, begins READ COMMITTED and first takes the locks
    of what the unit decides on (``backend.lock_unit``; ``unit_locks``: its sessions, a
    title …, or the whole store); serialization failures, deadlocks and lock timeouts
    re-run the unit (up to ``attempts``), and so does a connection lost before COMMIT, on
    a fresh connection, for up to ``outage_timeout`` seconds (:class:`Outage`).

    A unit that failed on a damaged full-text index (``backend.detach_damaged_index``)
    is re-run once, the index detached and marked stale first in the same transaction:
    the transcript write goes on without it (D20, issue 31 row 1).
    """

    def __init__(self, engine: Engine, policy: RetryPolicy, *, label: object,
                 backend: "Backend", guard=None) -> None:
        self.backend = backend
        self._engine = engine
        #: ``OpenedStore.guard``: checked before every attempt and checkpoint, so nothing
        #: is written to a database that is no longer the one opened (a replaced file),
        #: and ``check_before_commit`` inside every unit (its log lost meanwhile)
        self.guard = guard
        # past the connection budget, writing threads share one: units run one at a time
        self._writers = connections_for(writer(engine), backend.keeps_connections, label,
                                        shared_past_cap=backend.serializes_units)
        self._maintenance = autocommit(engine)
        self.policy = policy
        self.label = label
        self._lock = threading.RLock() if backend.serializes_units else None
        self._local = _ThreadUnits()
        self.committed = 0
        #: units committed since the last checkpoint, and whether that one left a backlog
        self._since_checkpoint = 0
        self._log_backlog = False
        #: busy retries seen since creation (load tests and benchmarks report it)
        self.retries = 0
        #: units whose COMMIT was on its way when the connection was lost, and whose
        #: outcome the server was asked about (``_settle``)
        self.commits_in_doubt = 0

    def active_connection(self) -> sa.Connection | None:
        """The connection of the unit running on this thread, if any."""
        return self._local.conn

    def run(self, fn: Callable[[sa.Connection], T], *, locks: Locks = STORE) -> T:
        """Run ``fn(conn)`` as one unit and return its result. ``locks`` names what the
        unit decides on (``unit_locks``; the default ``STORE``: the whole store), so
        where the backend locks units (PostgreSQL) it runs beside units that decide on
        other things; SQLite runs every unit alone either way."""
        joined = self.active_connection()
        if joined is not None:
            # A unit started inside a unit joins it (a second BEGIN IMMEDIATE on another
            # connection would wait for the lock this thread already holds), taking its
            # own locks at this point.
            hold(joined, locks)
            return fn(joined)
        if self._lock is None:
            return self._run(fn, locks)
        with self._lock:
            return self._run(fn, locks)

    def _run(self, fn, locks: Locks):
        policy, writers, backend, guard = self.policy, self._writers, self.backend, self.guard
        busy, outage, detached = 0, None, False
        while True:
            if guard is not None:
                guard.check()  # the database is still the one opened (a replaced file)
            try:
                if writers.kept:
                    result = self._attempt(writers.get(), fn, locks)
                else:
                    with writers.checkout() as conn:
                        result = self._attempt(conn, fn, locks)
            except CommitOutcomeUnknownError:
                raise
            except _CommitInDoubt as doubt:
                if outage is None:
                    outage = Outage(policy)
                if self._settle(doubt, outage) == ABORTED:
                    # nothing of it was stored: re-run it, as one lost before COMMIT
                    if not outage.wait():
                        raise outage.error(doubt.lost, self.label, backend) from doubt.lost
                    self.retries += 1
                    continue
                result = doubt.result  # it committed: the unit's result stands
            except BaseException as exc:
                if not isinstance(exc, sa.exc.DBAPIError):
                    raise
                if backend.is_transient(exc):  # contention: a number of attempts
                    busy += 1
                    if busy >= policy.attempts:
                        raise StoreBusyError(self.label, busy, exc.orig) from exc
                    self.retries += 1
                    time.sleep(random.uniform(policy.jitter_min, policy.jitter_max))
                    continue
                if not backend.is_connection_lost(exc):
                    detach = None if detached else backend.detach_damaged_index(exc)
                    if detach is None:
                        backend.raise_translated(exc, self.label)
                    # a damaged search index (derived data): the re-run detaches it and
                    # marks it stale first, in the write's own transaction (D20)
                    fn, detached = _after(detach, fn), True
                    continue
                # lost before COMMIT was sent (the server rolled it back): a time budget
                if outage is None:
                    outage = Outage(policy)
                if not outage.wait():
                    raise outage.error(exc, self.label, backend) from exc  # it stayed away
                self.retries += 1
                continue
            self.committed += 1
            self._local.commits += 1
            if backend.checkpoints and policy.checkpoint_every:
                self._since_checkpoint += 1
                if self._log_backlog or self._since_checkpoint >= policy.checkpoint_every:
                    self._since_checkpoint = 0
                    done = self.checkpoint()
                    if done is not None:  # (busy, frames in the log, frames copied back)
                        self._log_backlog = done[1] >= policy.checkpoint_backlog
            return result

    def _settle(self, doubt: "_CommitInDoubt", outage: Outage) -> str:
        """COMMITTED or ABORTED for a unit whose COMMIT was on its way when its
        connection was lost, asked again while the answer is pending or the server away
        (within ``outage``); raises ``CommitOutcomeUnknownError`` when it cannot be told."""
        self.commits_in_doubt += 1
        backend, why = self.backend, "the server cannot tell"
        while doubt.ticket is not None:
            try:
                status = backend.commit_outcome(self._engine, doubt.ticket)
            except sa.exc.DBAPIError as exc:
                if not backend.is_connection_lost(exc):
                    why = f"asking the server failed: {getattr(exc, 'orig', exc)}"
                    break
                why = "the server stayed away"
            else:
                if status in (COMMITTED, ABORTED):
                    return status
                if status is None:
                    why = "the server cannot tell"
                    break
                why = "it was still being committed"
            if not outage.wait():
                break
        raise CommitOutcomeUnknownError(
            f"{self.label}: the connection was lost while the write was being committed "
            f"({getattr(doubt.lost, 'orig', doubt.lost)}), and whether the server stored it "
            f"is not known ({why}). It was not retried (that could store it twice): read "
            "the data back before writing it again."
        ) from doubt.lost

    def commits_on_this_thread(self) -> int:
        """How many units this thread has committed (the API boundary asks whether a
        call wrote anything before its read lost its connection)."""
        return self._local.commits

    def _attempt(self, conn: sa.Connection, fn, locks: Locks):
        """One try of a unit on ``conn``: begin, (lock,) run, commit."""
        local, backend, guard = self._local, self.backend, self.guard
        if backend.driver_transactions(conn.dialect):
            with transaction(conn, driver=True):  # BEGIN IMMEDIATE: a writer connection
                local.conn = conn
                try:
                    result = fn(conn)
                finally:
                    local.conn = None
                if guard is not None:
                    guard.check_before_commit()  # the lock is held: nothing changes now
                return result
        running = _running_units()
        ticket = None
        try:
            trans = conn.begin()  # the begin hook picks the engine's mode
            if backend.locks_units:
                held = HeldLocks()
                ticket = backend.start_unit(conn, locks, held)
                running[id(conn)] = (backend, held)
            local.conn = conn
            try:
                result = fn(conn)
            finally:
                local.conn = None
                running.pop(id(conn), None)
            if guard is not None:
                guard.check_before_commit()
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
                raise _CommitInDoubt(exc, ticket, result) from exc
            raise
        return result

    def close(self) -> None:
        """Release every thread's writer connection, once a running unit has finished."""
        if self._lock is None:
            self._writers.close()
            return
        with self._lock:
            self._writers.close()

    def check(self) -> None:
        """Raise when the database may not be written any more (``guard``)."""
        if self.guard is not None:
            self.guard.check()

    def checkpoint(self) -> tuple | None:
        """The backend's checkpoint (SQLite: copy WAL frames back into the database
        under the writer lock, without waiting for readers); None where it was skipped,
        the engine checkpoints on its own, or the database is no longer the one opened."""
        if self.guard is not None and self.guard.replaced():
            return None
        return self.backend.checkpoint(self._maintenance, self.label)


def _after(first: Callable[[sa.Connection], object], fn: Callable[[sa.Connection], T]
           ) -> Callable[[sa.Connection], T]:
    """``fn`` run in the same transaction after ``first``."""
    def unit(conn: sa.Connection) -> T:
        first(conn)
        return fn(conn)
    return unit


class _CommitInDoubt(Exception):
    """A unit's connection was lost while its COMMIT was on its way (``_settle``)."""

    def __init__(self, lost: BaseException, ticket: object, result: object) -> None:
        super().__init__(str(lost))
        self.lost, self.ticket, self.result = lost, ticket, result


__all__ = ["Outage", "WriteUnits", "hold"]
