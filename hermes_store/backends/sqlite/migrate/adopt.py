"""Adopting a file upstream Hermes wrote (decision D5): heal it to its version's shape.

A file with ``schema_version`` N but no ``alembic_version`` is brought under Alembic in
one transaction: the objects revision ``00NN`` gives an empty database (its *shape*,
built by running the same revision scripts on an in-memory database, so the reference
can never disagree with the migrations) are added where the file lacks them — tables,
columns with their type/NOT NULL/default, indexes, FTS objects, re-deriving the
full-text index when any of those was missing or different — then ``00NN`` is stamped.
No row is lost. The Telegram topic tables are adopted the same way
(``topics.adopt_telegram_topics``).

What upstream runs on every open, whatever the version, is run here too: a revision may
define ``heal_rows(conn)`` (0004: older duplicate titles cleared when the unique title
index is missing; 0012: ``active`` NULL→1, upstream #51646), and adoption runs it for every
revision up to the file's, between adding columns and adding indexes — upgrading from the
stamp would never run those revisions again.

A file under Alembic whose ``schema_version`` is below its stamp (``inspect.classify``
reports it at that version) has rows upstream's data steps after that version have not
seen, as far as upstream's own bookkeeping goes: its stamp is moved back to that version
(no step runs) and the upgrade replays the revisions above it, which skip the objects that
exist and run their data steps (tag delegates, seed usage, read ``sessions.json``…), as
upstream re-runs its steps above the version it reads. The indexes of its stamp's shape
that it lacks are added back first, after the same row heals (``_behind_its_stamp``); so
are head's on a file stamped at head that another tool took one from (``alembic upgrade
head`` heals it; an open does not yet: ``ensure_schema`` trusts the stamp).
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from typing import Iterator

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.script import ScriptDirectory
from sqlalchemy.pool import StaticPool

from .... import errors
from ....revisions import upstream_version
from .. import library as _library
from . import head_schema
from .head import head_indexes
from .inspect import classify

log = logging.getLogger(__name__)


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
    engine = sa.create_engine("sqlite://", poolclass=StaticPool, module=_library.dbapi())

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
def join_or_begin(conn: sa.Connection) -> Iterator[None]:
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
    row is lost. A managed file whose ``schema_version`` is below its stamp is stamped
    back to it (module docstring). Returns the revision stamped, or None when there is
    nothing to adopt (managed and consistent, or empty).
    """
    with join_or_begin(conn):
        kind, revision, version = classify(
            lambda sql: conn.exec_driver_sql(sql).fetchall(), scripts, where
        )
        if kind == "alembic":
            return _behind_its_stamp(conn, scripts, revision, version, where)
        if kind != "upstream":
            return None
        target = revision_shape(scripts, revision)
        heal(conn, target, scripts, revision)
        if version is None:
            has_row = conn.exec_driver_sql("SELECT 1 FROM schema_version LIMIT 1").first()
            if not has_row:
                conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (?)", (upstream_version(revision),))
        MigrationContext.configure(conn).stamp(scripts, revision)
        return revision


def _behind_its_stamp(conn: sa.Connection, scripts: ScriptDirectory, revision: str | None,
                      version: int | None, where: object) -> str | None:
    """A managed file ``classify`` reports below its stamp (its ``schema_version`` is
    lower): the indexes of the stamp's shape it lacks are added (with the rows healed
    first, as upstream does on every open), then it is stamped back at ``revision``
    without running a step, so the upgrade replays the revisions above (module
    docstring). At head, only a dropped index is put back. Returns the revision
    stamped, or None."""
    stamped = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    if revision is None:
        return None
    if stamped == revision:
        if stamped == head_schema.REVISION and not head_indexes() <= set(_shape_of(conn).indexes):
            _heal_rows(conn, scripts, stamped)  # another tool dropped an index of head
            _add_indexes(conn, revision_shape(scripts, stamped), _shape_of(conn))
        return None
    _heal_rows(conn, scripts, stamped)
    _add_indexes(conn, revision_shape(scripts, stamped), _shape_of(conn))
    log.warning("%s: schema_version says %s while the file is stamped %s; replaying the "
                "revisions above %s", where, version, stamped, revision)
    MigrationContext.configure(conn).stamp(scripts, revision)
    return revision


def heal(conn: sa.Connection, target: _Shape, scripts: ScriptDirectory, revision: str) -> None:
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
    _heal_rows(conn, scripts, revision)
    _add_indexes(conn, target, live)
    _heal_fts(conn, live, target, scripts, revision)


def _add_indexes(conn: sa.Connection, target: _Shape, live: _Shape) -> None:
    for name, sql in target.indexes.items():
        if name not in live.indexes:
            try:
                conn.exec_driver_sql(sql)
            except sa.exc.IntegrityError as exc:
                raise errors.SchemaError(
                    f"cannot create unique index {name}: the file holds duplicate values "
                    f"({exc.orig}); fix them and retry"
                ) from exc


def _heal_rows(conn, scripts: ScriptDirectory, revision: str) -> None:
    """Every ``heal_rows(conn)`` of the revisions up to ``revision``, oldest first: what
    upstream runs on every open of a file at that version (module docstring)."""
    for script in reversed(list(scripts.walk_revisions(base="base", head=revision))):
        heal_rows = getattr(script.module, "heal_rows", None)
        if heal_rows is not None:
            heal_rows(conn)


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


__all__ = ["adopt", "heal", "join_or_begin", "revision_shape"]
