"""The Telegram topic branch on a file: where it stands, the opt-in, adoption.

Upstream Hermes creates the topic tables on opt-in and versions them with a
``state_meta`` key; here the branch ``migrations/telegram_topics/`` (its own version
table) runs them, on the file or inside a caller's write unit. A file whose tables
upstream created is adopted like the main chain (``adopt_telegram_topics``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import sqlalchemy as sa
from alembic import command
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from .... import errors, telegram_schema
from ....migrate.scripts import (
    ALEMBIC_RUN,
    head,
    is_at,
    telegram_topics_config,
    topic_scripts,
    topic_version,
)
from ....migrate.topics import (
    TopicsState,
    topic_stamp,
    topics_too_new,
    write_telegram_topic_meta,
)
from ..errors import sqlite_errors
from .adopt import heal, join_or_begin, revision_shape
from .inspect import inspect_file
#: the package's SQLite library (library.py), never `import sqlite3`: one copy of SQLite
#: per process
from ..library import SQLITE as sqlite3
from ..files.uri import file_uri

log = logging.getLogger(__name__)


def classify_topics(run: Callable[[str], list], where: object) -> TopicsState:
    T = telegram_schema
    names = {row[0] for row in run("SELECT name FROM sqlite_master WHERE type = 'table'")}
    meta = None
    if "state_meta" in names:
        rows = run(f"SELECT value FROM state_meta WHERE key = '{T.META_KEY}'")
        meta = None if not rows or rows[0][0] is None else str(rows[0][0])
    scripts = topic_scripts()
    newest = topic_version(scripts.get_current_head())
    if T.VERSION_TABLE in names:
        revision = topic_stamp(run, where)
        if revision is not None:
            return TopicsState("alembic", revision, meta)
    present = [name for name in T.TABLE_NAMES if name in names]
    if not present:
        return TopicsState("absent", None, meta)
    if meta is not None and meta.strip().isdigit() and int(meta) > newest:
        raise topics_too_new(where, f"{T.META_KEY} {meta}", newest)
    bindings = T.telegram_dm_topic_bindings.name
    if bindings in present:
        # The key's ON DELETE decides, as upstream's own v1 -> v2 check does.
        keys = run(f"PRAGMA foreign_key_list('{bindings}')")
        cascades = any(r[2] == "sessions" and (r[6] or "").upper() == "CASCADE" for r in keys)
        version = 2 if cascades else 1
    else:
        version = int(meta) if meta is not None and meta.strip() in ("1", "2") else newest
    return TopicsState("upstream", f"t{version:03d}", meta)


def inspect_telegram_topics(path: Path) -> TopicsState:
    """Where the file stands on the Telegram topic branch; read-only."""
    if inspect_file(path).kind in ("missing", "empty"):
        return TopicsState("absent", None, None)
    with sqlite_errors(path):
        conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True, timeout=1.0)
        try:
            return classify_topics(lambda sql: conn.execute(sql).fetchall(), path)
        finally:
            conn.close()


def upgrade_on(connection: sa.Connection, revision: str) -> str | None:
    """The opt-in inside the caller's transaction (its write unit)."""
    with ALEMBIC_RUN:
        command.upgrade(telegram_topics_config(connection=connection), revision)
    run = lambda sql: connection.exec_driver_sql(sql).fetchall()  # noqa: E731
    return classify_topics(run, "database").revision


def upgrade_file(path: Path, revision: str, *, only_if_present: bool) -> str | None:
    """Create the topic tables in a file, or bring them to ``revision``."""
    try:
        state = inspect_telegram_topics(path)
    except errors.SchemaTooNewError as exc:
        if not only_if_present:
            raise
        # A newer Hermes' topic tables must not stop the store from opening; the
        # topic calls themselves refuse them (apply_telegram_topic_migration raises).
        log.warning("%s", exc)
        return None
    if only_if_present and state.kind == "absent":
        return None
    if state.kind == "alembic" and is_at(state.revision, revision, topic_scripts()):
        return state.revision
    with sqlite_errors(path):
        command.upgrade(telegram_topics_config(path), revision)
    return inspect_telegram_topics(path).revision


def downgrade_file(path: Path, revision: str) -> str | None:
    """Downgrade the topic tables (``"base"`` drops them and the meta key)."""
    with sqlite_errors(path):
        command.downgrade(telegram_topics_config(path), revision)
    return inspect_telegram_topics(path).revision


def require_head(path: Path) -> None:
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
    VERSION_TABLE = telegram_schema.VERSION_TABLE
    with join_or_begin(conn):
        state = classify_topics(lambda sql: conn.exec_driver_sql(sql).fetchall(), where)
        if state.kind != "upstream":
            return None
        heal(conn, revision_shape(scripts, state.revision), scripts, state.revision)
        MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).stamp(
            scripts, state.revision
        )
        write_telegram_topic_meta(conn, state.revision)
        return state.revision


__all__ = ["adopt_telegram_topics", "classify_topics", "downgrade_file",
           "inspect_telegram_topics", "require_head", "upgrade_file", "upgrade_on"]
