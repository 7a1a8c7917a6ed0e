"""The PostgreSQL backend: the shared engine for deployments that outgrow one file (D11–D14).

Imported only when a PostgreSQL URL is used (a default install never imports psycopg).
Its modules, the same names as SQLite's for the same concerns (``docs/architecture.md``,
"The two engines as one table"):

    engine.py         the pooled engine, the checkout check, the begin hook, the driver check
    errors.py         psycopg's errors as the package's; what a write unit re-runs
    constructs.py     how the portable SQL constructs (``sql.constructs``) compile here
    display_order.py  the display-order triggers as PL/pgSQL
    copying.py        a PostgreSQL side of ``db copy`` (COPY, suspended keys, sequences)
    fts/              the tsvector + pg_trgm layout (ddl), its route (search), its upkeep
                      (maintenance)
    migrate/          the baseline at 0030 (create), where a database stands (inspect),
                      upgrades (commands), the Alembic env, drift (check), the topic
                      tables (topics), "at head?" (head)

and PostgreSQL's own:

    codec.py          the NUL-safe text codec every connection carries
    locks.py          the write units' advisory lock, the migration lock
    outcome.py        what became of a unit whose COMMIT was in flight
    server.py         what the server must offer; VACUUM
    storage.py        how the long text of messages is compressed (lz4)
    roles.py          the ``roles`` facet: grants for a runtime role

Nothing here imports the SQLite backend.
"""

from __future__ import annotations

import sqlalchemy as sa

from ..base import Backend, OpenedStore
from . import engine as _engine
from . import constructs as _constructs  # noqa: F401  (registers the PostgreSQL compilations)
from . import errors as _errors

#: Whether a store keeps one connection per thread (``connections.KeptConnections``) on
#: PostgreSQL as it does on SQLite. It does not: see docs/postgres.md, "Connections".
KEEP_CONNECTIONS = False


class PostgresqlBackend(Backend):
    name = "postgresql"
    door_drivers = frozenset({"psycopg"})
    keeps_connections = KEEP_CONNECTIONS
    serializes_units = False
    locks_units = True
    checkpoints = False
    stores_files = False

    # ------------------------------------------------------------------ facets

    @property
    def search(self):
        from .fts.search import SEARCH

        return SEARCH

    @property
    def migrations(self):
        from .migrate import MIGRATIONS

        return MIGRATIONS

    @property
    def copying(self):
        from .copying import COPYING

        return COPYING

    @property
    def roles(self):
        from .roles import ROLES

        return ROLES

    # ------------------------------------------------------------------ location

    def require_driver(self, target) -> None:
        from .engine import require_driver

        require_driver(target)

    def same_database(self, a, b) -> bool:
        ua, ub = a.url, b.url
        return (ua.host, ua.port, ua.database, ua.query.get("host")) == (
            ub.host, ub.port, ub.database, ub.query.get("host"))

    # ------------------------------------------------------------------ engines

    def open_store(self, target, *, read_only, auto_upgrade, retry, pool_size=None,
                   max_overflow=None, journal_mode=None, reopening=False) -> OpenedStore:
        from ... import revisions
        from ...connections import autocommit, connections_for, reader
        from .engine import create_engine
        from .migrate.head import stamped_at_head

        engine = create_engine(target, lock_timeout=retry.busy_timeout, read_only=read_only,
                               pool_size=pool_size, max_overflow=max_overflow)
        try:
            with _errors.pg_errors(target):
                at_head = stamped_at_head(engine, revisions.head())
            if not at_head:
                from .migrate.commands import ensure_schema

                ensure_schema(target, auto_upgrade=auto_upgrade, read_only=read_only)
        except BaseException:
            engine.dispose()
            raise
        return OpenedStore(engine, target,
                           connections_for(reader(engine), KEEP_CONNECTIONS),
                           connections_for(autocommit(engine), KEEP_CONNECTIONS))

    def inspection_engine(self, target) -> sa.Engine:
        from .engine import create_engine

        return create_engine(target, read_only=True, poolclass=sa.pool.NullPool)

    def tool_engine(self, target, *, read_only: bool) -> sa.Engine:
        from .engine import create_engine

        return create_engine(target, read_only=read_only)

    def computed_column(self, name: str) -> bool:
        from .fts.ddl import is_fts_object

        return is_fts_object(name)

    switches_to_autocommit = True

    def outside_transaction(self, conn) -> None:
        # psycopg would open a transaction for the next statement: autocommit instead
        # (an attribute, no round trip; the begin hook switches it back)
        dbapi_conn = conn.connection.dbapi_connection
        if not dbapi_conn.autocommit:
            dbapi_conn.autocommit = True

    # ------------------------------------------------------------------ units

    def lock_unit(self, conn, locks, held) -> None:
        from .locks import lock_unit

        lock_unit(conn, locks, held)

    def start_unit(self, conn, locks, held):
        from .locks import lock_unit
        from .outcome import ticket

        return ticket(conn, lock_unit(conn, locks, held, with_xid=True))

    def commit_outcome(self, engine, ticket):
        from .outcome import commit_outcome

        return commit_outcome(engine, ticket)

    def session_ended(self, conn):
        from .engine import session_ended

        return session_ended(conn)

    def vacuum(self, engine, label, *, worthwhile_only: bool = False) -> str | None:
        # VACUUM (ANALYZE) blocks nobody and rewrites nothing: always worth it
        from ...schema import metadata
        from .server import vacuum

        try:
            vacuum(engine, [table.name for table in metadata.sorted_tables])
        except sa.exc.DBAPIError as exc:
            self.raise_translated(exc, label)
        return None

    def maintenance_turn(self, engine, label):
        from .locks import maintenance_turn

        return maintenance_turn(engine)

    # ------------------------------------------------------------------ errors

    def is_transient(self, exc) -> bool:
        return _errors.is_transient(exc)

    def is_connection_lost(self, exc) -> bool:
        return _errors.is_connection_lost(exc)

    def translate_error(self, exc, where):
        return _errors.translate_error(exc, where)

    # ------------------------------------------------------------------ repository SQL

    def insert(self, table):
        from sqlalchemy.dialects.postgresql import insert

        return insert(table)

    def keep_ids_ahead(self, conn, column) -> None:
        # a sequence does not move for explicit values: the next append would be given
        # a taken id. It never moves backwards (``greatest`` with its own next value).
        table, name = column.table.name, column.name
        sequence = sa.func.pg_get_serial_sequence(table, name)
        top = sa.select(sa.func.max(column)).scalar_subquery()
        conn.execute(sa.select(sa.func.setval(
            sequence, sa.func.greatest(top, sa.func.nextval(sequence)))))

    # ------------------------------------------------------------------ schema objects

    def create_display_triggers(self, conn) -> None:
        from .display_order import create_display_triggers

        create_display_triggers(conn)

    def drop_display_triggers(self, conn) -> None:
        from .display_order import drop_display_triggers

        drop_display_triggers(conn)

    # ------------------------------------------------------------------ full-text upkeep

    def usable_fts_indexes(self, conn):
        from ...fts.layout import FTS_TABLE, TRIGRAM_TABLE
        from .fts.search import available_indexes

        found = available_indexes(conn)
        return [t for t in (FTS_TABLE, TRIGRAM_TABLE) if t in found]

    def rebuild_fts(self, conn, *, progress=None):
        from .fts import maintenance

        return maintenance.rebuild(conn, progress=progress)

    def fts_integrity_check(self, conn):
        from .fts import maintenance

        return maintenance.integrity_check(conn)

    def optimize_fts(self, conn):
        from .fts import maintenance

        return maintenance.optimize(conn)

    def fts_sizes(self, conn):
        from .fts import maintenance

        return maintenance.fts_sizes(conn)

    # ------------------------------------------------------------------ reporting

    def size_bytes(self, conn, target):
        if conn is None:
            return None
        return conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()


BACKEND = PostgresqlBackend()
# every engine of this package carries it (``engine.CARRIED``, ``Backend.carry``)
_engine.CARRIED = BACKEND

__all__ = ["BACKEND", "KEEP_CONNECTIONS", "PostgresqlBackend"]
