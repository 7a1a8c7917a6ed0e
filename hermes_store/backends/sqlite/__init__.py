"""The SQLite backend: a state.db file (the embedded default, decisions D8, D10).

Its modules, the same names as PostgreSQL's for the same concerns (``docs/architecture.md``,
"The two engines as one table"):

    engine.py         the engine factory, pragmas, the begin hook, checkpoints, VACUUM
    errors.py         SQLite's result codes as the package's errors; what is "busy"
    constructs.py     how the portable SQL constructs (``sql.constructs``) compile here
    display_order.py  the display-order triggers
    copying.py        a SQLite side of ``db copy``
    fts/              the FTS5 layout (ddl), its MATCH route (search), its upkeep
                      (maintenance)
    migrate/          a new file at head in one step (create, head_schema), where a file
                      stands (inspect), upgrades (commands), the revisions' env, drift
                      (check), the topic tables (topics), "at head?" (head), and
                      adopting upstream files (adopt)

and SQLite's own:

    library.py        which sqlite3 the store runs on (one per process, D19)
    files/            the ``files`` facet: a file before it is opened (probe), owner-only
                      creation and the schema lock (ops), its filesystem, its identity,
                      its journal mode, its name as a URL/URI (uri), online backup,
                      recovery of a damaged file, repair of duplicated FTS schema rows,
                      the bounds of every repair (repair_limits), an empty or zeroed
                      file set aside (blank)

Only ``backends.get("sqlite")`` creates :data:`BACKEND`; nothing here imports the
PostgreSQL backend.
"""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa

from ..base import Backend, OpenedStore
from . import engine as _engine
from . import constructs as _constructs  # noqa: F401  (registers the SQLite compilations)
from .errors import is_busy_error, translate_error


class SQLiteBackend(Backend):
    name = "sqlite"
    door_drivers = frozenset({"pysqlite"})
    keeps_connections = True
    serializes_units = True
    locks_units = False
    checkpoints = True
    stores_files = True
    # SQLite 3.53 runs the listing 8x slower with its LIMIT bound than written in (a
    # 60-message store: 240 vs 30 us; 3.40: the same either way)
    pages_in_sql = True

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
    def files(self):
        from .files import FILES

        return FILES

    # ------------------------------------------------------------------ location

    def same_database(self, a, b) -> bool:
        return a.path.resolve() == b.path.resolve()

    # ------------------------------------------------------------------ engines

    def open_store(self, target, *, read_only, auto_upgrade, retry, pool_size=None,
                   max_overflow=None, journal_mode=None, reopening=False) -> OpenedStore:
        from .files import journal

        # An explicit journal mode reaches the migration that may create the file, too.
        with journal.requesting(journal_mode):
            return self._open_file(target.path, read_only=read_only,
                                   auto_upgrade=auto_upgrade, retry=retry,
                                   journal_mode=journal_mode, reopening=reopening)

    def _open_file(self, path, *, read_only, auto_upgrade, retry, journal_mode,
                   reopening=False) -> OpenedStore:
        from ...connections import KeptConnections
        from ...errors import (DatabaseDamagedError, NotADatabaseError, SchemaOutOfDateError,
                               StoreNotFoundError)
        from .engine import AUTO, create_engine
        from .files import blank
        from .files.ops import create_private_file
        from .files.probe import check_not_symlink, make_private, probe_database
        from .migrate.commands import ensure_schema, upgrade_hint
        from .files.identity import FileWatch

        check_not_symlink(path)
        created = False
        if reopening and not path.parent.is_dir():  # never brought back (issue 31, row 10)
            from ...errors import StoreDirectoryVanishedError

            raise StoreDirectoryVanishedError(path, path.parent)
        if not path.exists():
            if read_only:
                raise StoreNotFoundError(
                    f"{path} does not exist; a read-only open never creates a database. "
                    "Check the path (or $HERMES_HOME), or open it without read_only=True."
                )
            if not auto_upgrade:
                raise SchemaOutOfDateError(f"{path} does not exist: {upgrade_hint(path)}")
            created = create_private_file(path)
        elif not read_only:
            make_private(path)
        if not read_only and not created:  # before SQLite opens it (issue 31, row 8)
            blank.set_aside_if_empty(path)
        try:  # a read-only open reads again after a disk I/O error (issue 31, row 5)
            probe_database(path, io_retry=retry if read_only else None)
        except NotADatabaseError:
            if read_only or not blank.set_aside_if_zeroed(path):
                raise
            probe_database(path)  # the fresh file in its place
        except DatabaseDamagedError:  # the repair module only for a file that needs it
            from .files.repair import probe_or_heal

            probe_or_heal(path, read_only=read_only)  # heals only duplicated FTS schema rows
        # The file as opened: write units, checkpoints, VACUUM and new connections check
        # it is still the one at the path (a rename over it: StoreReplacedError).
        watch = FileWatch(path, set_aside=not read_only)
        mode = journal_mode or AUTO
        engine = None
        if not read_only and auto_upgrade and path.stat().st_size == 0:
            from .migrate.create import open_new  # a new store: the head schema in one step (D18)

            engine = open_new(path, busy_timeout=retry.busy_timeout, journal_mode=mode,
                              watch=watch)
        if engine is None:
            ensure_schema(path, auto_upgrade=auto_upgrade, read_only=read_only)
            engine = create_engine(path, read_only=read_only, busy_timeout=retry.busy_timeout,
                                   journal_mode=mode, watch=watch)
        if not read_only:  # its identity stamped and watched, its log's generation too
            try:
                watch.arm(engine)
            except BaseException:
                engine.dispose()
                raise
        if not read_only:  # an index found damaged is rebuilt now, once (issue 31, row 1)
            from .fts.maintenance import rebuild_stale

            rebuild_stale(engine, path)
        return OpenedStore(engine, path, KeptConnections(engine, path), guard=watch)

    def inspection_engine(self, target) -> sa.Engine:
        from .engine import create_engine

        return create_engine(target.path, read_only=True, journal_mode=None,
                             poolclass=sa.pool.NullPool)

    def tool_engine(self, target, *, read_only: bool) -> sa.Engine:
        from .engine import create_engine

        return create_engine(target.path, read_only=read_only, journal_mode=None)

    def label(self, engine) -> str:
        from .files.uri import path_of

        return path_of(engine.url)

    def driver_transactions(self, dialect) -> bool:
        return dialect.driver in self.door_drivers

    def end_driver_transaction(self, conn) -> None:
        dbapi_conn = conn.connection.dbapi_connection
        if getattr(dbapi_conn, "in_transaction", False):
            dbapi_conn.rollback()

    def is_disconnect(self, dialect, exc, dbapi_conn, cursor) -> bool:
        return False  # a file has no connection to lose

    # ------------------------------------------------------------------ units

    def checkpoint(self, engine, label):
        from .engine import checkpoint

        return checkpoint(engine, label)

    def vacuum(self, engine, label, *, worthwhile_only: bool = False) -> str | None:
        from .engine import vacuum

        return vacuum(engine, label, worthwhile_only=worthwhile_only)

    def maintenance_turn(self, engine, label):
        from .files.ops import maintenance_lock
        from .files.uri import path_of

        return maintenance_lock(Path(path_of(engine.url)))

    # ------------------------------------------------------------------ errors

    def is_transient(self, exc) -> bool:
        return isinstance(exc, sa.exc.OperationalError) and is_busy_error(exc)

    def translate_error(self, exc, where):
        return translate_error(exc, where)

    # ------------------------------------------------------------------ repository SQL

    def insert(self, table):
        from sqlalchemy.dialects.sqlite import insert

        return insert(table)

    # ------------------------------------------------------------------ schema objects

    def create_display_triggers(self, conn) -> None:
        from .display_order import create_display_triggers

        create_display_triggers(conn)

    def drop_display_triggers(self, conn) -> None:
        from .display_order import drop_display_triggers

        drop_display_triggers(conn)

    # ------------------------------------------------------------------ full-text upkeep

    def usable_fts_indexes(self, conn):
        from .fts import maintenance

        return maintenance.usable_indexes(conn)

    def rebuild_fts(self, conn, *, progress=None):
        from .fts import maintenance

        return maintenance.rebuild(conn, progress=progress)

    def detach_damaged_index(self, exc):
        from .errors import is_index_damage

        if not is_index_damage(exc):
            return None
        from .fts.maintenance import detach_damaged

        return functools.partial(detach_damaged, why=str(getattr(exc, "orig", exc)))

    def substring_scope(self, conn, session_id):
        from .fts import scope

        return scope.in_scope(conn, session_id)

    def rescope_substring_index(self, conn, session_id, before):
        from .fts import scope

        scope.rescope(conn, session_id, before)

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

    def describe(self, target) -> dict:
        from .files.backup import journal_mode
        from .files.filesystem import detect
        from .library import library

        return {"journal_mode": journal_mode(target.path),
                "sqlite_library": library().as_dict(),
                "filesystem": detect(target.path).as_dict()}

    def size_bytes(self, conn, target) -> int | None:
        path = target.path
        return path.stat().st_size if path.exists() else None

    def wal_bytes(self, target) -> int | None:
        wal = Path(f"{target.path}-wal")
        return wal.stat().st_size if wal.exists() else 0



BACKEND = SQLiteBackend()
# every engine of this package carries it (``engine.CARRIED``, ``Backend.carry``)
_engine.CARRIED = BACKEND

__all__ = ["BACKEND", "SQLiteBackend"]
