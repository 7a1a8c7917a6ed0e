"""PostgreSQL's locks: the write units' advisory lock and the migration lock (D12, D13).

``lock_unit(conn, exclusive=…)`` is the first statement of every write unit (a
transaction-level advisory lock); ``migration_lock(engine)`` holds a session-level one
for the duration of a migration run, so two deploys cannot migrate one database at once.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ...driver import driver_execute, uses_driver

#: key of the session-level advisory lock that serializes migrations of one database
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


@contextlib.contextmanager
def migration_lock(engine: Engine, key: int = MIGRATION_LOCK_KEY) -> Iterator[None]:
    """Hold ``pg_advisory_lock(key)`` on a connection of its own for the block.

    Alembic picks the steps to run from the version it reads first, so two deploys
    migrating at once would both run the same step; the second waits here instead,
    then finds the work done. The lock belongs to the session: if the process dies,
    the server drops it with the connection.
    """
    with engine.connect() as lock_conn:
        lock_conn = lock_conn.execution_options(isolation_level="AUTOCOMMIT")
        lock_conn.exec_driver_sql("SELECT pg_advisory_lock(%(key)s)", {"key": key})
        try:
            yield
        finally:
            lock_conn.exec_driver_sql("SELECT pg_advisory_unlock(%(key)s)", {"key": key})


__all__ = ["MIGRATION_LOCK_KEY", "UNIT_LOCK_KEY", "lock_unit", "migration_lock"]
