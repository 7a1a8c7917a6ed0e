"""Whether a write unit's COMMIT took effect after its connection was lost while COMMIT
was on its way (decisions D13, D16).

Without an answer such a unit can only be reported as an unknown outcome (re-running it
could store it twice). PostgreSQL keeps the fate of every recent transaction, so the
unit runner asks instead:

* the unit's first statement assigns the transaction its id and returns it
  (``locks.lock_unit(with_xid=True)``: no extra round trip);
* every connection records at connect which server history it reached
  (``engine._introduce``: the cluster's system identifier and the WAL timeline);
* after the loss, on a fresh connection, :func:`commit_outcome` asks
  ``txid_status(id)``: ``committed`` — the unit's result stands; ``aborted`` — nothing
  of it is stored, it is re-run; ``in progress`` — ask again (the old session is still
  finishing).

Only on the same history: another cluster (a restore), or another timeline (a standby
promoted by a failover: it may never have received the commit, and may since have given
the id to a transaction of its own) cannot tell, and the outcome stays unknown.

A restart on the same history needs one more look. A crash (``pg_ctl restart -m
immediate``, a killed server) restarts the id counter from what reached the log: an id
handed out whose transaction never got there is handed out again, and ``txid_status``
then reports the new holder's fate (seen: a unit reported committed that was never
stored). So when the server started after the unit's connection did, the restart's own
checkpoint tells where the recovered log ended (``pg_control_checkpoint()``'s
``next_xid``): an id at or past it never committed (aborted, re-run); below it
``txid_status`` is the unit's; and once a later checkpoint has replaced the restart's
own, where the log ended is no longer known and the outcome stays unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ...connections import autocommit
from ..base import ABORTED, COMMITTED, IN_PROGRESS

#: key of a connection record's ``info``: the server history the connection reached
IDENTITY = "hermes_store.server_identity"

#: the cluster (system identifier), its timeline (the first 8 hex digits of the WAL
#: file being written; a standby has no timeline of its own to write: NULL) and when the
#: server last started (a restart in between may have handed the unit's id out again)
IDENTITY_COLUMNS = (
    "(SELECT system_identifier FROM pg_control_system()), "
    "CASE WHEN pg_is_in_recovery() THEN NULL "
    "ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END, "
    "pg_postmaster_start_time()"
)

#: where the log the server last started from ended: the id counter of its latest
#: checkpoint, and whether that checkpoint is a restart's own. A shutdown or
#: end-of-recovery checkpoint records no oldest running transaction (0); an online one
#: does, except at ``wal_level=minimal``, where the two cannot be told apart
_RESTART_POINT = ("SELECT next_xid, oldest_active_xid::text = '0' "
                  "AND current_setting('wal_level') <> 'minimal' "
                  "FROM pg_control_checkpoint()")

@dataclass(frozen=True)
class CommitTicket:
    """What the runner keeps of a unit while it runs, to ask about its COMMIT later."""

    xid: int
    identity: tuple | None


def ticket(conn: sa.Connection, xid: int) -> CommitTicket:
    return CommitTicket(xid, conn.connection.info.get(IDENTITY))


def commit_outcome(engine: Engine, ticket: CommitTicket) -> str | None:
    """``committed``, ``aborted`` or ``in progress`` for the unit of ``ticket``, asked on
    a fresh connection; None when this server cannot tell (another history, an id it
    no longer knows). A connection that cannot be made raises as usual (the runner's
    outage budget decides how long to keep asking)."""
    if ticket.identity is None:
        return None
    with autocommit(engine).connect() as conn:
        system, timeline, started = conn.exec_driver_sql(f"SELECT {IDENTITY_COLUMNS}").one()
        system_then, timeline_then, started_then = ticket.identity
        if system is None or timeline is None or (int(system), timeline) != (
                system_then, timeline_then):
            return None
        if started != started_then:  # the server restarted while the unit was under way
            logged = _logged_before_restart(conn, ticket.xid)
            if logged is False:
                return ABORTED
            if logged is None:
                return None
        try:
            status = conn.exec_driver_sql("SELECT txid_status(%(xid)s::bigint)",
                                          {"xid": ticket.xid}).scalar()
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise
            if _in_the_future(exc):
                # On the same history an id beyond the next one was never written to the
                # WAL, so no commit of it was either: a crash (restart -m immediate) took
                # the transaction with the server's unflushed state. Nothing is stored.
                return ABORTED
            return None
    return status if status in (COMMITTED, ABORTED, IN_PROGRESS) else None


def _logged_before_restart(conn: sa.Connection, xid: int) -> bool | None:
    """Whether the id ``xid`` reached the log the server restarted from: True (its
    ``txid_status`` is its own), False (its transaction never committed; the id may have
    been handed out again), None (cannot be told: a checkpoint since the restart, or no
    right to read the control file). An id past the latest checkpoint's counter is past
    the restart's too, whichever checkpoint that is."""
    try:
        next_xid, restart_own = conn.exec_driver_sql(_RESTART_POINT).one()
    except sa.exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise
        return None  # e.g. a role not allowed to read pg_control_checkpoint()
    epoch, _, low = str(next_xid).partition(":")
    if xid >= (int(epoch) << 32) + int(low):
        return False
    return True if restart_own else None


def _in_the_future(exc: sa.exc.DBAPIError) -> bool:
    """``txid_status``'s "transaction ID … is in the future" (invalid_parameter_value)."""
    return (getattr(exc.orig, "sqlstate", None) == "22023"
            and "in the future" in str(exc.orig))

__all__ = ["IDENTITY", "IDENTITY_COLUMNS", "CommitTicket", "commit_outcome", "ticket"]
