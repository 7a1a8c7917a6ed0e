"""PostgreSQL's locks: the write units' advisory lock and the migration lock (D12, D13).

``lock_unit(conn, exclusive=…)`` is the first statement of every write unit (a
transaction-level advisory lock); ``lock_migrations(conn)`` the first of a migration
run's one transaction, so two deploys cannot migrate one database at once (through a
transaction pooler too: both locks are the transaction's, never the session's).
"""

from __future__ import annotations

import sqlalchemy as sa

from ...driver import driver_execute, uses_driver

#: key of the advisory lock that serializes migrations of one database
#: (the first 8 bytes of sha256("hermes_store.migrate"), as a signed bigint)
MIGRATION_LOCK_KEY = 0x71C0_72E3_634B_4E80


#: key of the transaction-level advisory lock of write units (the first 8 bytes of
#: sha256("hermes_store.write_unit"), as a signed bigint); see :func:`lock_unit`
UNIT_LOCK_KEY = -0x3A9B_5C0E_1D27_64F3
# the key is part of the text: no parameter to bind, the same statement every time
_LOCK_EXCLUSIVE = f"SELECT pg_advisory_xact_lock({UNIT_LOCK_KEY})"
_LOCK_SHARED = f"SELECT pg_advisory_xact_lock_shared({UNIT_LOCK_KEY})"


def lock_unit(conn: sa.Connection, *, exclusive: bool) -> None:
    """The first statement of a write unit on PostgreSQL: the store's unit lock,
    held until the unit commits or rolls back.

    A unit takes it exclusively unless it declared itself ``concurrent``: then every
    unit that reads, decides and writes (a title claim, numbering, a cascade delete, an
    upsert that reads first) runs alone, exactly as every unit does on SQLite, while
    the hot units that only change rows through statements that lock them (appending
    messages) share it and run side by side. The lock queue is fair: a waiting
    exclusive unit is not starved by a stream of shared ones. Sent through the driver
    door (``engine.driver_execute``): it is on every write unit's path.
    """
    statement = _LOCK_EXCLUSIVE if exclusive else _LOCK_SHARED
    if uses_driver(conn.dialect):
        driver_execute(conn, statement, None)
    else:
        conn.exec_driver_sql(statement)


def lock_migrations(conn: sa.Connection, key: int = MIGRATION_LOCK_KEY) -> None:
    """Take ``pg_advisory_xact_lock(key)`` as the first statement of a migration run's
    transaction, held until it commits or rolls back.

    Alembic picks the steps to run from the version it reads first, so two deploys
    migrating at once would both run the same step; the second waits here instead, then
    (READ COMMITTED: each statement sees what committed before it) finds the work done.
    A lock of the transaction, not of the session: behind a transaction pooler the
    session is whichever server connection the pooler lends, and a session lock would
    stay with that connection after the run, held by nobody (decision D16). If the
    process dies the server rolls the transaction back and the lock goes with it.
    """
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": key})


__all__ = ["MIGRATION_LOCK_KEY", "UNIT_LOCK_KEY", "lock_migrations", "lock_unit"]
