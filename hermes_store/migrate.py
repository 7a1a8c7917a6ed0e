"""Schema management for a state.db file: upgrade, downgrade, current, adopt.

    from hermes_store import migrate

    migrate.upgrade()                      # $HERMES_HOME/state.db (else ~/.hermes) to head
    migrate.upgrade("state.db", "0022")    # to schema version 22
    migrate.current("state.db")            # "0022"
    migrate.downgrade("state.db", "0021")

Revision ``00NN`` is upstream schema version N (decision D2). Everything runs the
Alembic scripts shipped with the package (``migrations/``, installed as
``hermes_store.migrations``) through an
in-memory :class:`alembic.config.Config`, so no ``alembic.ini`` is needed on disk; the
repository's ``alembic.ini`` runs the very same ``env.py`` for ``alembic -x db=PATH …``.

A file that upstream Hermes wrote has a ``schema_version`` row but no
``alembic_version`` table. Upgrading it *adopts* it first (decision D5): the file is
healed to the shape revision ``00NN`` gives an empty database (upstream files stamped N
sometimes lack objects of version N), stamped ``00NN``, then upgraded. See
:func:`adopt` and ``docs/migrations.md``.

Before anything touches a file it is probed read-only: a file that is not SQLite, is
damaged, or was written by a newer version (schema version above :func:`head`) is
refused with an error from :mod:`hermes_store.errors` and left byte-for-byte as it was.

Every public function also takes a SQLAlchemy URL (decision D11, resolved by
:mod:`hermes_store.location`): ``sqlite:///PATH`` is that file, and a PostgreSQL URL is
handed to :mod:`hermes_store.migrate_pg` (one baseline at ``0030``, advisory lock).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sqlite3
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.script import ScriptDirectory
from sqlalchemy.pool import StaticPool

from . import errors, location, telegram_schema
from .engine import translate_error
from .revisions import migrations_dir

#: the packaged Alembic scripts (env.py, versions/)
MIGRATIONS_DIR = migrations_dir()

#: ``progress(revision, description)`` is called after each applied step
Progress = Callable[[str, str], None]

__all__ = [
    "FileState",
    "CheckResult",
    "upgrade",
    "downgrade",
    "stamp",
    "current",
    "head",
    "history",
    "check",
    "schema_version_of",
    "inspect_file",
    "adopt",
    "TopicsState",
    "TopicsCheck",
    "telegram_topics_head",
    "telegram_topics_history",
    "telegram_topics_current",
    "inspect_telegram_topics",
    "upgrade_telegram_topics",
    "downgrade_telegram_topics",
    "check_telegram_topics",
    "adopt_telegram_topics",
]


# --------------------------------------------------------------------------- config


def config(
    path: str | os.PathLike | None = None,
    *,
    connection: sa.Connection | None = None,
    progress: Progress | None = None,
    target: location.Target | None = None,
) -> Config:
    """An Alembic Config on the packaged scripts, bound to a file, a resolved target
    (a PostgreSQL URL) or a live connection."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if connection is not None:
        cfg.attributes["connection"] = connection
    if path is not None:
        cfg.attributes["db_path"] = str(path)
    if target is not None:
        cfg.attributes["db_target"] = target
    if progress is not None:
        cfg.attributes["progress"] = progress
    return cfg


@functools.lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision id (``"0030"`` = upstream schema version 30)."""
    return _scripts().get_current_head()


def history() -> list[tuple[str, str]]:
    """``(revision, one-line description)`` for every revision, oldest first."""
    revisions = list(_scripts().walk_revisions())
    revisions.reverse()
    return [(r.revision, (r.doc or "").strip().splitlines()[0] if r.doc else "") for r in revisions]


# --------------------------------------------------------------------------- probing


@dataclass(frozen=True)
class FileState:
    """What a read-only probe found in a file.

    ``kind`` is one of ``"missing"``, ``"empty"`` (no tables: a fresh file),
    ``"alembic"`` (already managed: ``revision`` from ``alembic_version``) or
    ``"upstream"`` (written by upstream Hermes: ``revision`` derived from
    ``schema_version``, ``"0001"`` for a ``sessions`` table without one).
    """

    path: Path
    kind: str
    revision: str | None
    schema_version: int | None
    writable: bool

    @property
    def needs_adoption(self) -> bool:
        return self.kind == "upstream"


def _head_number(scripts: ScriptDirectory) -> int:
    return int(scripts.get_current_head())


def _classify(run: Callable[[str], list[tuple]], scripts: ScriptDirectory, where: object):
    """Shared by the path probe and the in-transaction check: (kind, revision, version)."""
    newest = _head_number(scripts)
    tables = {
        name
        for (name,) in run("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    }
    version = None
    if "schema_version" in tables:
        rows = run("SELECT version FROM schema_version LIMIT 1")
        if rows:
            version = rows[0][0]
            if not isinstance(version, int) or version < 1:
                raise errors.DatabaseDamagedError(
                    f"{where}: schema_version holds {version!r}, which is not a schema "
                    f"version; {errors.RECOVER_HINT}"
                )
            if version > newest:
                raise _too_new(where, f"schema version {version}", newest)
    rows = run("SELECT version_num FROM alembic_version") if "alembic_version" in tables else []
    tables.discard("alembic_version")  # with no row left it just means "at base"
    if rows:
        if len(rows) != 1:
            raise errors.DatabaseDamagedError(
                f"{where}: alembic_version holds {len(rows)} rows instead of one; "
                f"{errors.RECOVER_HINT}"
            )
        revision = rows[0][0]
        try:
            scripts.get_revision(revision)
        except Exception:
            if revision.isdigit() and int(revision) > newest:
                raise _too_new(where, f"revision {revision}", newest) from None
            raise errors.SchemaError(
                f"{where}: stamped with revision {revision!r}, which this package does not "
                "know; it was migrated by a different tool"
            ) from None
        return "alembic", revision, version
    if version is not None:
        return "upstream", f"{version:04d}", version
    if "sessions" in tables:  # upstream v1 kept no version row
        return "upstream", "0001", None
    if not tables:
        return "empty", None, None
    raise errors.NotADatabaseError(
        f"{where} is a SQLite database but not a Hermes state.db (tables: "
        f"{', '.join(sorted(tables)[:5])}…); point hermes_store at the right file"
    )


def _too_new(where: object, found: str, newest: int) -> errors.SchemaTooNewError:
    return errors.SchemaTooNewError(
        f"{where} has {found}, newer than this hermes_store understands (up to schema "
        f"version {newest}); it was written by a newer Hermes — upgrade hermes_store. "
        "The file was not changed."
    )


def inspect_file(path: str | os.PathLike) -> FileState:
    """Probe a file without writing to it (not even its journal mode).

    Raises NotADatabaseError, DatabaseDamagedError, SchemaTooNewError,
    StoreBusyError or DatabaseAccessError; never changes the file.
    """
    p = _file_path(path)
    if not p.exists():
        return FileState(p, "missing", None, None, os.access(_existing_parent(p), os.W_OK))
    if p.is_dir():
        raise errors.NotADatabaseError(f"{p} is a directory, not a database file")
    # Never open() the file ourselves: closing a descriptor drops the POSIX locks every
    # SQLite connection of this process holds on it. SQLite reads the header instead.
    if not os.access(p, os.R_OK):
        raise errors.DatabaseAccessError(
            f"cannot read {p} (permission denied); fix its permissions or run as its owner"
        )
    writable = os.access(p, os.W_OK) and os.access(p.parent, os.W_OK)
    if p.stat().st_size == 0:
        return FileState(p, "empty", None, None, writable)
    with sqlite_errors(p):
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=1.0)
        try:
            kind, revision, version = _classify(
                lambda sql: conn.execute(sql).fetchall(), _scripts(), p
            )
        finally:
            conn.close()
    return FileState(p, kind, revision, version, writable)


def verify_sound(path: str | os.PathLike) -> None:
    """Refuse to migrate a damaged file: ``PRAGMA quick_check`` through a read-only
    connection. A migration rewrites tables and indexes, so running it over damage
    would spread the damage and write to a file that ``recover`` should read."""
    p = Path(path)
    with sqlite_errors(p):
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=1.0)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
        finally:
            conn.close()
    if problems != ["ok"]:
        raise errors.DatabaseDamagedError(
            f"{p} is damaged ({'; '.join(problems)}); it was not migrated. {errors.RECOVER_HINT}"
        )


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def schema_version_of(path: str | os.PathLike | None) -> int | None:
    """The upstream ``schema_version`` recorded in a file (None when absent)."""
    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().schema_version_of(target)
    return inspect_file(target.path).schema_version


def current(path: str | os.PathLike | None = None) -> str | None:
    """The file's (or PostgreSQL database's) revision, without writing to it.

    For a file upstream Hermes wrote (not yet adopted) this is the revision its
    ``schema_version`` corresponds to; None for a missing or empty file.
    """
    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().current(target)
    return inspect_file(target.path).revision


# --------------------------------------------------------------------------- errors


@contextlib.contextmanager
def sqlite_errors(path: object) -> Iterator[None]:
    """Turn SQLite's error codes into the package's errors (which say what to do)."""
    try:
        yield
    except (sqlite3.Error, sa.exc.DBAPIError) as exc:
        translated = translate_error(exc, path)
        if translated is None:
            raise
        raise translated from exc


# --------------------------------------------------------------------------- commands


def _resolve(path: str | os.PathLike | None) -> Path:
    """A SQLite file's path: ``path`` (a path or a ``sqlite:///`` URL) or the default
    database; a PostgreSQL target is refused (callers of this handle files only)."""
    return _file_path(path) if path is not None else _file_path(location.resolve(None))


def _file_path(path) -> Path:
    """``path`` as a file path: a ``sqlite:///`` URL is its file; a PostgreSQL URL is
    refused (it is never a file name)."""
    if isinstance(path, location.Target) or (
        isinstance(path, str) and location.looks_like_url(path)
    ):
        target = location.resolve(path)
        if not target.is_sqlite:
            raise errors.UnsupportedBackendError(
                f"{target.display} is not a SQLite file; this operation reads files only"
            )
        return target.path
    return Path(path).expanduser().absolute()


def _postgres():
    """The PostgreSQL side, imported on first use (it needs psycopg)."""
    from . import migrate_pg

    return migrate_pg


def upgrade(
    path: str | os.PathLike | None = None,
    revision: str = "head",
    *,
    progress: Progress | None = None,
) -> str | None:
    """Upgrade (adopting first if needed) a file to ``revision``; returns the new revision.

    A missing file is created, owner-only (with its directory). A file already at the target is
    left alone, even when it is read-only.
    """
    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().upgrade(target, revision, progress=progress)
    p = target.path
    state = inspect_file(p)
    if state.kind == "alembic" and _is_at(state.revision, revision):
        return state.revision
    with sqlite_errors(p):
        command.upgrade(config(p, progress=progress), revision)
    return inspect_file(p).revision


def _is_at(current_rev: str | None, target: str) -> bool:
    scripts = _scripts()
    try:
        wanted = scripts.get_revision(target)
    except Exception:
        return False
    return wanted is not None and wanted.revision == current_rev


def downgrade(path: str | os.PathLike | None, revision: str) -> str | None:
    """Downgrade a file to ``revision`` (``"base"`` removes every table; a PostgreSQL
    database cannot go below its baseline ``0030``)."""
    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().downgrade(target, revision)
    p = target.path
    inspect_file(p)
    with sqlite_errors(p):
        command.downgrade(config(p), revision)
    return inspect_file(p).revision


def stamp(path: str | os.PathLike | None, revision: str) -> None:
    """Record ``revision`` (and its schema_version) without running migrations."""
    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().stamp(target, revision)
    p = target.path
    inspect_file(p)
    with sqlite_errors(p):
        command.stamp(config(p), revision)


@dataclass(frozen=True)
class CheckResult:
    revision: str | None
    head: str
    drift: list[str]
    #: the Telegram DM topic branch (absent until a user opts in)
    telegram_topics: "TopicsCheck | None" = None

    @property
    def at_head(self) -> bool:
        return self.revision == self.head

    @property
    def ok(self) -> bool:
        topics_ok = self.telegram_topics is None or self.telegram_topics.ok
        return self.at_head and not self.drift and topics_ok


def check(path: str | os.PathLike | None = None) -> CheckResult:
    """Is the file at head, and do its ordinary tables match ``hermes_store.schema``?

    ``drift`` lists Alembic autogenerate's differences (FTS objects excluded);
    ``telegram_topics`` reports the opt-in Telegram topic branch (absent, or its
    revision and its own drift). Read-only: the file is not changed.
    """
    from alembic.autogenerate import compare_metadata

    from .engine import create_engine
    from .schema import metadata

    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().check(target)
    p = target.path
    state = inspect_file(p)
    drift: list[str] = []
    if state.kind in ("alembic", "upstream"):
        engine = create_engine(p, read_only=True, journal_mode=None, poolclass=sa.pool.NullPool)
        try:
            with sqlite_errors(p), engine.connect() as conn:
                ctx = MigrationContext.configure(
                    conn, opts={"include_name": include_name, "compare_type": True}
                )
                with warnings.catch_warnings():
                    # SQLite can't reflect expression indexes; the golden sqlite_master
                    # test covers them instead.
                    warnings.filterwarnings("ignore", message=".*expression-based index")
                    diffs = compare_metadata(ctx, metadata)
                drift = [_describe(d) for d in _without_fk_artefacts(conn, diffs)]
                topics = check_telegram_topics(conn, p)
        finally:
            engine.dispose()
    else:
        topics = TopicsCheck("absent", None, telegram_topics_head(), None, [])
    return CheckResult(state.revision, head(), drift, topics)


# --------------------------------------------------------------------------- autogenerate


def _fk_key(fk) -> tuple:
    return (
        fk.parent.name,
        tuple(c.name for c in fk.columns),
        fk.referred_table.name,
        tuple(e.column.name for e in fk.elements),
    )


def _without_fk_artefacts(conn, diffs: list) -> list:
    """Drop remove_fk/add_fk pairs that describe the same key.

    SQLAlchemy's SQLite reflection loses ``ON DELETE`` of a key declared inline
    (``session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE``, as upstream
    writes it), so every adopted file would show a false difference. SQLite's own
    ``PRAGMA foreign_key_list`` is the authority: when it agrees with the metadata,
    the pair is not drift.
    """
    removed = {_fk_key(d[1]): d for d in diffs if d[0] == "remove_fk"}
    artefacts = []
    for d in diffs:
        if d[0] != "add_fk" or _fk_key(d[1]) not in removed:
            continue
        fk = d[1]
        table, cols, ref, ref_cols = _fk_key(fk)
        actual = {
            (tuple([r[3]]), r[2], tuple([r[4]]), (r[6] or "NO ACTION").upper())
            for r in conn.exec_driver_sql(f'PRAGMA foreign_key_list("{table}")')
        }
        if (cols, ref, ref_cols, (fk.ondelete or "NO ACTION").upper()) in actual:
            artefacts += [d, removed[_fk_key(fk)]]
    return [d for d in diffs if not any(d is a for a in artefacts)]


def _describe(diff) -> str:
    """One readable line per autogenerate difference."""
    if isinstance(diff, list):  # column modifications come as a list of tuples
        return "; ".join(_describe(d) for d in diff)
    kind, *rest = diff
    if kind in ("add_table", "remove_table"):
        return f"{kind} {rest[0].name}"
    if kind in ("add_column", "remove_column"):
        return f"{kind} {rest[1]}.{rest[2].name}"
    if kind in ("add_index", "remove_index"):
        ix = rest[0]
        return f"{kind} {ix.name} on {ix.table.name}({', '.join(c.name for c in ix.columns)})"
    if kind in ("add_fk", "remove_fk"):
        table, cols, ref, ref_cols = _fk_key(rest[0])
        on_delete = f" ON DELETE {rest[0].ondelete}" if rest[0].ondelete else ""
        return f"{kind} {table}({', '.join(cols)}) -> {ref}({', '.join(ref_cols)}){on_delete}"
    if kind.startswith("modify_"):
        _, table, column, _info, old, new = rest
        return f"{kind} {table}.{column}: {old!r} -> {new!r}"
    return f"{kind} {rest!r}"



def _is_fts_object(name: str) -> bool:
    try:
        from .fts.ddl import is_fts_object
    except ImportError:  # the FTS layer not installed yet: its objects share a prefix
        return name.startswith(("messages_fts", "fts_v22_trash_"))
    return is_fts_object(name)


def read_only_command(context) -> bool:
    """Whether the Alembic command running an env.py only reads: ``alembic current`` and
    ``history`` pass ``dont_mutate=True``, and must not adopt or create anything."""
    env = getattr(context, "_proxy", None)
    return bool(env is not None and env.context_opts.get("dont_mutate"))


def include_name(name: str | None, type_: str, parent_names) -> bool:
    """Autogenerate filter of the main chain: FTS tables/shadows/views are checked by the
    golden sqlite_master test, the Telegram topic branch's tables by its own check
    (:func:`check_telegram_topics`)."""
    from .telegram_schema import owns

    if type_ == "table" and name is not None:
        return not (_is_fts_object(name) or owns(name))
    return True


# --------------------------------------------------------------------------- locking


@contextlib.contextmanager
def migration_lock(path: Path) -> Iterator[None]:
    """Serialize migrations of one file across processes.

    Alembic decides which steps to run from the version it read before the first
    step's transaction, so two processes upgrading at once would both try to apply
    the same step. An advisory lock on ``<db>.migrate.lock`` makes the second wait,
    then find the work done. (The database file itself cannot be flock()ed safely:
    closing any descriptor of it drops SQLite's own POSIX locks.)
    """
    try:
        import fcntl
    except ImportError:  # Windows: SQLite's BEGIN IMMEDIATE is the only guard
        yield
        return
    lock_path = Path(f"{path}.migrate.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # read-only directory: nothing will be written anyway
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- adoption


@dataclass
class _Shape:
    """The objects of one database, by kind (FTS shadow tables and sqlite_* left out)."""

    tables: dict[str, tuple[str, list[tuple]]]  # name -> (CREATE sql, table_info rows)
    indexes: dict[str, str]
    triggers: dict[str, str]
    views: dict[str, str]
    virtual_tables: dict[str, str]


def _shape_of(conn: sa.Connection) -> _Shape:
    shadow = {
        name
        for (name,) in conn.exec_driver_sql(
            "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'"
        )
    }
    shape = _Shape({}, {}, {}, {}, {})
    rows = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
    ).fetchall()
    for kind, name, sql in rows:
        if name.startswith("sqlite_") or name == "alembic_version" or name in shadow:
            continue
        if kind == "table" and sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            shape.virtual_tables[name] = sql
        elif kind == "table":
            info = conn.exec_driver_sql(f'PRAGMA table_info("{name}")').fetchall()
            shape.tables[name] = (sql, [tuple(r) for r in info])
        elif kind == "index":
            shape.indexes[name] = sql
        elif kind == "trigger":
            shape.triggers[name] = sql
        elif kind == "view":
            shape.views[name] = sql
    return shape


_QUOTED = re.compile(r"('(?:[^']|'')*')")


def _normalized(sql: str) -> str:
    """DDL text compared loosely: case, spacing, IF NOT EXISTS and identifier quotes."""
    parts = _QUOTED.split(sql)
    for i in range(0, len(parts), 2):  # code between string literals
        code = re.sub(r"\s+", " ", parts[i].lower())
        code = re.sub(r'"(\w+)"', r"\1", code)
        code = re.sub(r"\s*([(),;=|<>+*/-])\s*", r"\1", code)
        parts[i] = code.replace("if not exists ", "")
    return "".join(parts).strip()


def _memory_engine() -> sa.Engine:
    engine = sa.create_engine("sqlite://", poolclass=StaticPool)

    @sa.event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_conn, _record):
        dbapi_conn.isolation_level = None

    return engine


_shape_cache: dict[tuple[str, str], _Shape] = {}


def revision_shape(scripts: ScriptDirectory, revision: str) -> _Shape:
    """The objects an empty database has after upgrading to ``revision``.

    Built by running the same revision scripts on an in-memory database, so the
    reference can never disagree with the migrations themselves.
    """
    key = (str(scripts.dir), revision)
    if key not in _shape_cache:
        engine = _memory_engine()
        try:
            with engine.connect() as conn:
                ctx = MigrationContext.configure(
                    conn,
                    opts={
                        "script": scripts,
                        "fn": lambda heads, _ctx: scripts._upgrade_revs(revision, heads),
                        "transactional_ddl": True,
                    },
                )
                with Operations.context(ctx):
                    ctx.run_migrations()
                _shape_cache[key] = _shape_of(conn)
        finally:
            engine.dispose()
    return _shape_cache[key]


@contextlib.contextmanager
def _unit(conn: sa.Connection) -> Iterator[None]:
    if conn.in_transaction():  # the caller's transaction: join it
        yield
    else:
        with conn.begin():
            yield


def adopt(conn: sa.Connection, scripts: ScriptDirectory, where: object = "database") -> str | None:
    """Bring a file upstream Hermes wrote under Alembic; returns the stamped revision.

    In one transaction: read its schema version N (a ``sessions`` table without a
    version table is v1); add what revision ``00NN``'s shape has and the file lacks
    (tables, columns with their type/NOT NULL/default, indexes, and FTS objects —
    re-deriving the full-text index when any of those was missing or different);
    make sure ``schema_version`` holds N; stamp ``00NN``. Nothing else changes and no
    row is lost. Returns None when there is nothing to adopt (already managed, or
    empty).
    """
    with _unit(conn):
        kind, revision, version = _classify(
            lambda sql: conn.exec_driver_sql(sql).fetchall(), scripts, where
        )
        if kind != "upstream":
            return None
        target = revision_shape(scripts, revision)
        _heal(conn, target, scripts, revision)
        if version is None:
            has_row = conn.exec_driver_sql("SELECT 1 FROM schema_version LIMIT 1").first()
            if not has_row:
                conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (?)", (int(revision),))
        MigrationContext.configure(conn).stamp(scripts, revision)
        return revision


def _heal(conn: sa.Connection, target: _Shape, scripts: ScriptDirectory, revision: str) -> None:
    live = _shape_of(conn)
    for name, (sql, columns) in target.tables.items():
        if name not in live.tables:
            conn.exec_driver_sql(sql)
            continue
        present = {row[1] for row in live.tables[name][1]}
        for _cid, column, type_, notnull, default, pk in columns:
            if column in present:
                continue
            if pk or (notnull and default is None):
                raise errors.SchemaError(
                    f"{name}.{column} is missing and cannot be added to an existing table "
                    f"(primary key or NOT NULL without default); {errors.RECOVER_HINT}"
                )
            ddl = f'ALTER TABLE "{name}" ADD COLUMN "{column}" {type_}'
            ddl += " NOT NULL" if notnull else ""
            ddl += f" DEFAULT {default}" if default is not None else ""
            conn.exec_driver_sql(ddl)
    for name, sql in target.indexes.items():
        if name not in live.indexes:
            try:
                conn.exec_driver_sql(sql)
            except sa.exc.IntegrityError as exc:
                raise errors.SchemaError(
                    f"cannot create unique index {name}: the file holds duplicate values "
                    f"({exc.orig}); fix them and retry"
                ) from exc
    _heal_fts(conn, live, target, scripts, revision)


def _heal_fts(conn, live: _Shape, target: _Shape, scripts, revision: str) -> None:
    def differs(ours: dict[str, str], theirs: dict[str, str], name: str) -> bool:
        return name not in theirs or _normalized(theirs[name]) != _normalized(ours[name])

    stale_tables = [n for n in target.virtual_tables if differs(target.virtual_tables, live.virtual_tables, n)]
    stale_views = [n for n in target.views if differs(target.views, live.views, n)]
    stale_triggers = [n for n in target.triggers if differs(target.triggers, live.triggers, n)]
    fts_names = tuple(target.virtual_tables)
    # Triggers feeding an index that this version does not have (e.g. a later layout).
    foreign_triggers = [
        n for n, sql in live.triggers.items()
        if n not in target.triggers and any(t in sql for t in fts_names)
    ]
    if not (stale_tables or stale_views or stale_triggers or foreign_triggers):
        return
    for name in stale_triggers + foreign_triggers:
        conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}"')
    for name in stale_views:
        conn.exec_driver_sql(f'DROP VIEW IF EXISTS "{name}"')
    for name in stale_tables:
        conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}"')
        conn.exec_driver_sql(target.virtual_tables[name])
    for name in stale_views:
        conn.exec_driver_sql(target.views[name])
    for name in stale_triggers:
        conn.exec_driver_sql(target.triggers[name])
    index_touched = stale_tables or foreign_triggers or any(
        any(t in target.triggers[n] for t in fts_names) for n in stale_triggers
    )
    if index_touched:
        _rebuild_fts(conn, target, scripts, revision)


def _is_external_content(vtable_sql: str) -> bool:
    options = re.search(r"content\s*=\s*'?([^,')\s]*)", vtable_sql, re.IGNORECASE)
    return bool(options and options.group(1))


def _rebuild_fts(conn, target: _Shape, scripts: ScriptDirectory, revision: str) -> None:
    """Re-derive every full-text index of the shape from ``messages``.

    The revision that defined the layout knows best: the newest ``rebuild_fts(bind)``
    at or below ``revision`` does it. Without one, an external-content index is rebuilt
    by FTS5's own ``'rebuild'`` command; an inline index (it holds its own copy of
    the text) cannot be rebuilt without knowing what went into it.
    """
    for script in scripts.walk_revisions(base="base", head=revision):
        rebuild = getattr(script.module, "rebuild_fts", None)
        if rebuild is not None:
            rebuild(conn)
            return
    for name, sql in target.virtual_tables.items():
        if not _is_external_content(sql):
            raise errors.SchemaError(f"no revision up to {revision} knows how to rebuild {name}")
        conn.exec_driver_sql(f"INSERT INTO \"{name}\"(\"{name}\") VALUES ('rebuild')")


# --------------------------------------------------------------------------- Telegram topic branch
#
# Upstream creates its Telegram DM topic tables only when a user opts in (/topic) and
# versions them with its own state_meta key, outside schema_version. Here they have their
# own Alembic script location (migrations/telegram_topics/: t001, t002 = that key's
# versions 1 and 2) and their own version table, so the main chain keeps its single head
# (plain `alembic upgrade head` still works), upgrade() never creates them, and the
# topic tables stay out of the v30 head schema. See docs/migrations.md.

#: the branch's Alembic scripts (env.py, versions/t00N_….py), named after the branch
TELEGRAM_TOPICS_DIR = MIGRATIONS_DIR / telegram_schema.BRANCH
#: Alembic's `context` is a process-wide proxy: two threads' stores opting in at once
#: (each inside its own write unit, on its own file or after the other) take turns
_ALEMBIC_RUN = threading.RLock()


def telegram_topics_config(
    path: str | os.PathLike | None = None, *, connection: sa.Connection | None = None
) -> Config:
    """An Alembic Config on the Telegram topic branch's scripts (file or live connection)."""
    cfg = config(path, connection=connection)
    cfg.set_main_option("script_location", str(TELEGRAM_TOPICS_DIR))
    return cfg


@functools.lru_cache(maxsize=1)
def _topic_scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(telegram_topics_config())


def telegram_topics_head() -> str:
    """The branch's newest revision (``"t002"`` = upstream's topic schema version 2)."""
    return _topic_scripts().get_current_head()


def telegram_topics_history() -> list[tuple[str, str]]:
    """``(revision, one-line description)`` of the branch, oldest first."""
    revisions = list(_topic_scripts().walk_revisions())
    revisions.reverse()
    return [(r.revision, (r.doc or "").strip().splitlines()[0] if r.doc else "") for r in revisions]


def _topic_version(revision: str) -> int:
    """Revision ``t00N`` is upstream's ``telegram_dm_topic_schema_version`` N."""
    return int(revision[1:])


@dataclass(frozen=True)
class TopicsState:
    """Where a file stands on the Telegram topic branch.

    ``kind``: ``"absent"`` (nobody opted in: no topic tables), ``"upstream"`` (tables
    upstream Hermes created, not yet under Alembic: ``revision`` is derived from their
    shape), ``"alembic"`` (``revision`` from ``alembic_version_telegram_topics``) or,
    on PostgreSQL, ``"unstamped"`` (the tables without the version table: another
    tool's; ``revision`` None).
    ``meta_version``: ``state_meta.telegram_dm_topic_schema_version`` as stored.
    """

    kind: str
    revision: str | None
    meta_version: str | None


def _classify_topics(run: Callable[[str], list], where: object) -> TopicsState:
    from . import telegram_schema as T

    names = {row[0] for row in run("SELECT name FROM sqlite_master WHERE type = 'table'")}
    meta = None
    if "state_meta" in names:
        rows = run(f"SELECT value FROM state_meta WHERE key = '{T.META_KEY}'")
        meta = None if not rows or rows[0][0] is None else str(rows[0][0])
    scripts = _topic_scripts()
    newest = _topic_version(scripts.get_current_head())
    if T.VERSION_TABLE in names:
        revision = _topic_stamp(run, where)
        if revision is not None:
            return TopicsState("alembic", revision, meta)
    present = [name for name in T.TABLE_NAMES if name in names]
    if not present:
        return TopicsState("absent", None, meta)
    if meta is not None and meta.strip().isdigit() and int(meta) > newest:
        raise _topics_too_new(where, f"{T.META_KEY} {meta}", newest)
    bindings = T.telegram_dm_topic_bindings.name
    if bindings in present:
        # The key's ON DELETE decides, as upstream's own v1 -> v2 check does.
        keys = run(f"PRAGMA foreign_key_list('{bindings}')")
        cascades = any(r[2] == "sessions" and (r[6] or "").upper() == "CASCADE" for r in keys)
        version = 2 if cascades else 1
    else:
        version = int(meta) if meta is not None and meta.strip() in ("1", "2") else newest
    return TopicsState("upstream", f"t{version:03d}", meta)


def _topic_stamp(run: Callable[[str], list], where: object) -> str | None:
    """The branch's revision in its version table (None: no row), refusing a revision
    this package does not know. Shared by both engines."""
    from . import telegram_schema as T

    rows = run(f"SELECT version_num FROM {T.VERSION_TABLE}")
    if len(rows) > 1:
        raise errors.DatabaseDamagedError(
            f"{where}: {T.VERSION_TABLE} holds {len(rows)} rows instead of one; "
            f"{errors.RECOVER_HINT}"
        )
    if not rows:
        return None
    revision = rows[0][0]
    scripts = _topic_scripts()
    try:
        scripts.get_revision(revision)
    except Exception:
        newest = _topic_version(scripts.get_current_head())
        if re.fullmatch(r"t\d+", revision) and _topic_version(revision) > newest:
            raise _topics_too_new(where, f"Telegram topic revision {revision}", newest) from None
        raise errors.SchemaError(
            f"{where}: the Telegram topic tables are stamped {revision!r}, which this "
            "package does not know; they were migrated by a different tool"
        ) from None
    return revision


def _topics_too_new(where: object, found: str, newest: int) -> errors.SchemaTooNewError:
    return errors.SchemaTooNewError(
        f"{where} has {found}, newer than this hermes_store understands (Telegram topic "
        f"schema up to version {newest}); it was written by a newer Hermes — upgrade "
        "hermes_store. The file was not changed."
    )


def inspect_telegram_topics(path: str | os.PathLike | None = None) -> TopicsState:
    """Where the file (or PostgreSQL database) stands on the Telegram topic branch;
    read-only."""
    target = location.resolve(path)
    if target.is_postgresql:
        return _postgres().inspect_telegram_topics(target)
    p = target.path
    if inspect_file(p).kind in ("missing", "empty"):
        return TopicsState("absent", None, None)
    with sqlite_errors(p):
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=1.0)
        try:
            return _classify_topics(lambda sql: conn.execute(sql).fetchall(), p)
        finally:
            conn.close()


def telegram_topics_current(path: str | os.PathLike | None = None) -> str | None:
    """The file's revision on the Telegram topic branch (None: nobody opted in).

    For tables upstream Hermes created this is the revision their shape corresponds
    to (``t001`` without ``ON DELETE CASCADE``, else ``t002``)."""
    return inspect_telegram_topics(path).revision


def upgrade_telegram_topics(
    path: str | os.PathLike | None = None,
    revision: str = "head",
    *,
    connection: sa.Connection | None = None,
    only_if_present: bool = False,
) -> str | None:
    """Opt in: create the Telegram topic tables, or bring them to ``revision``.

    Returns the branch's revision afterwards. With ``connection`` it runs inside the
    caller's transaction (``SessionDB.apply_telegram_topic_migration``); otherwise on the
    file, whose main chain must be at head. ``only_if_present``: upgrade tables the file
    already has (e.g. an upstream file that opted in), never create them.
    """
    if connection is not None and connection.dialect.name == "postgresql":
        from . import migrate_pg

        return migrate_pg.create_telegram_topics(connection, revision)
    if connection is not None:
        with _ALEMBIC_RUN:
            command.upgrade(telegram_topics_config(connection=connection), revision)
        run = lambda sql: connection.exec_driver_sql(sql).fetchall()  # noqa: E731
        return _classify_topics(run, "database").revision
    p = _resolve(path)
    try:
        state = inspect_telegram_topics(p)
    except errors.SchemaTooNewError as exc:
        if not only_if_present:
            raise
        # A newer Hermes' topic tables must not stop the store from opening; the
        # topic calls themselves refuse them (apply_telegram_topic_migration raises).
        logging.getLogger(__name__).warning("%s", exc)
        return None
    if only_if_present and state.kind == "absent":
        return None
    if state.kind == "alembic" and _topic_is_at(state.revision, revision):
        return state.revision
    with sqlite_errors(p):
        command.upgrade(telegram_topics_config(p), revision)
    return inspect_telegram_topics(p).revision


def _topic_is_at(current_rev: str | None, target: str) -> bool:
    try:
        wanted = _topic_scripts().get_revision(target)
    except Exception:
        return False
    return wanted is not None and wanted.revision == current_rev


def downgrade_telegram_topics(path: str | os.PathLike | None, revision: str) -> str | None:
    """Downgrade the Telegram topic tables (``"base"`` drops them and the meta key)."""
    p = _resolve(path)
    with sqlite_errors(p):
        command.downgrade(telegram_topics_config(p), revision)
    return inspect_telegram_topics(p).revision


def require_head_for_telegram_topics(path: Path) -> None:
    """The topic tables extend the head schema (their key points at ``sessions``, their
    version lives in ``state_meta``): the main chain must be at head first."""
    state = inspect_file(path)
    if state.kind == "alembic" and state.revision == head():
        return
    where = {
        "missing": "does not exist",
        "empty": "has no schema yet",
        "upstream": f"was written by upstream Hermes (schema version {state.schema_version}) and not adopted yet",
    }.get(state.kind, f"is at revision {state.revision}, head is {head()}")
    raise errors.SchemaOutOfDateError(
        f"{path} {where}: the Telegram topic tables need the main schema at head first; "
        f"run `hermes-store db upgrade --db {path}` (or `alembic -x db={path} upgrade head`)"
    )


def write_telegram_topic_meta(conn: sa.Connection, revision: str | None) -> None:
    """Keep upstream's ``telegram_dm_topic_schema_version`` equal to the branch's revision
    (deleted at the branch base), so upstream Hermes reads the version Alembic records."""
    from .schema import state_meta
    from .telegram_schema import META_KEY

    if revision is None:
        conn.execute(sa.delete(state_meta).where(state_meta.c.key == META_KEY))
        return
    value = str(_topic_version(revision))
    updated = conn.execute(
        sa.update(state_meta).where(state_meta.c.key == META_KEY).values(value=value)
    )
    if not updated.rowcount:
        conn.execute(sa.insert(state_meta).values(key=META_KEY, value=value))


def adopt_telegram_topics(
    conn: sa.Connection, scripts: ScriptDirectory, where: object = "database"
) -> str | None:
    """Bring Telegram topic tables upstream Hermes created under Alembic.

    In one transaction: derive their revision (``t001`` when the bindings key lacks
    ``ON DELETE CASCADE``, else ``t002``), add what that revision's shape has and the
    file lacks (a table, an index), stamp it and write the ``state_meta`` key. No row
    changes; the upgrade that follows rebuilds a ``t001`` table. Returns the stamped
    revision, or None when there is nothing to adopt.
    """
    from .telegram_schema import VERSION_TABLE

    with _unit(conn):
        state = _classify_topics(lambda sql: conn.exec_driver_sql(sql).fetchall(), where)
        if state.kind != "upstream":
            return None
        _heal(conn, revision_shape(scripts, state.revision), scripts, state.revision)
        MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).stamp(
            scripts, state.revision
        )
        write_telegram_topic_meta(conn, state.revision)
        return state.revision


def include_telegram_topics_name(name: str | None, type_: str, parent_names) -> bool:
    """Autogenerate filter of the branch: its two tables only."""
    from .telegram_schema import TABLE_NAMES

    if type_ == "table":
        return name in TABLE_NAMES
    return True


@dataclass(frozen=True)
class TopicsCheck:
    """The drift check's view of the Telegram topic branch."""

    state: str  # TopicsState.kind
    revision: str | None
    head: str
    meta_version: str | None
    drift: list[str]

    @property
    def at_head(self) -> bool:
        return self.revision == self.head

    @property
    def ok(self) -> bool:
        return self.state == "absent" or (self.at_head and not self.drift)

    def describe(self) -> str:
        if self.state == "absent":
            return "absent (nobody opted in; created on opt-in only)"
        if self.state == "unstamped":
            return f"present but not stamped (head is {self.head})"
        where = f"{self.revision} (head)" if self.at_head else f"{self.revision}, behind {self.head}"
        if self.state == "upstream":
            where += ", created by upstream Hermes and not yet stamped"
        return where

    def as_dict(self) -> dict:
        return {
            "state": self.state,
            "revision": self.revision,
            "head": self.head,
            "at_head": self.at_head,
            "meta_version": self.meta_version,
            "drift": list(self.drift),
            "ok": self.ok,
        }


def check_telegram_topics(conn: sa.Connection, where: object = "database") -> TopicsCheck:
    """The branch's state, and when its tables exist, their drift from
    ``telegram_schema`` and a ``state_meta`` key that disagrees with the revision."""
    from alembic.autogenerate import compare_metadata

    from . import telegram_schema as T

    postgresql = conn.dialect.name == "postgresql"
    if postgresql:
        state = _postgres().telegram_topics_state(conn, where)
    else:
        state = _classify_topics(lambda sql: conn.exec_driver_sql(sql).fetchall(), where)
    drift: list[str] = []
    if state.kind != "absent":
        ctx = MigrationContext.configure(
            conn, opts={"include_name": include_telegram_topics_name, "compare_type": True}
        )
        diffs = compare_metadata(ctx, T.metadata)
        if postgresql:
            drift = [_describe(d) for d in _postgres().without_pk_nullability(diffs, T.metadata)]
        else:
            drift = [_describe(d) for d in _without_fk_artefacts(conn, diffs)]
        if state.revision is None:
            drift.append(f"the tables exist without {T.VERSION_TABLE} (created by another "
                         "tool): drop them, or stamp them at the branch's head")
        expected = None if state.revision is None else str(_topic_version(state.revision))
        if expected is not None and state.meta_version != expected:
            drift.append(
                f"state_meta {T.META_KEY} is {state.meta_version!r}, expected {expected!r} "
                "(upstream Hermes reads it)"
            )
    return TopicsCheck(state.kind, state.revision, telegram_topics_head(), state.meta_version, drift)
