"""Frozen full-text-search DDL of every historical layout, and the one routine that
moves a file from whatever FTS layout it holds to a given one (decision D7).

Revisions 0023-0030 import the layout *constants* from here; nothing here imports the
head schema or ``hermes_store.fts`` (decision D3): each layout below is the DDL as it was
at its schema version, and stays that way when head moves on.

Layouts (``state_meta.fts_storage_version`` in brackets; schema-history.md section 2):

* ``LEGACY_INLINE`` (v11-v22) [key absent] - two inline single-column FTS5 tables that
  store ``content || ' ' || tool_name || ' ' || tool_calls``; plain DELETE triggers; the
  update triggers fire on any column.
* ``LAYOUT_1_V23`` (v23) [1] - external content: ``messages_fts`` over ``messages``
  (three columns) and ``messages_fts_trigram`` over the view ``messages_fts_trigram_src``
  (no tool rows); every trigger carries the rebuild gate; the update triggers are still
  ``AFTER UPDATE ON messages`` with a WHEN comparing the indexed columns.
* ``LAYOUT_1_V28`` (v28) [1] - the same tables with the update triggers narrowed to
  ``AFTER UPDATE OF ...``.
* ``LAYOUT_1_V29`` (v29) [1] - the trigram view joins ``sessions`` and leaves ``cron``
  sessions out; the trigram triggers carry the same session predicate.
* ``LAYOUT_3_V30`` (v30, head) [3] - ``messages_fts`` reads the ``messages_fts_src``
  projection (tool rows cut to 8,192 characters); the trigram table has two columns
  (``content, tool_name``) and leaves out ``cron``/``subagent`` sessions and delegate
  children (``$._delegate_from``).

Upstream left upgraded files on the legacy layout until a manual ``optimize-storage``;
we convert and rebuild instead, so every file at revision N has the layout of N. Within
one upgrade run that reaches 0030 the intermediate fills are deferred to 0030's rebuild
through upstream's own rebuild window (``apply_layout(defer=True)``), so the index is
rebuilt once per run, not once per layout.
The optional ``messages_fts_cjk`` index is never touched here.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import sqlalchemy as sa
from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)

#: ``progress(message)`` callbacks receive one line per step
Progress = Optional[Callable[[str], None]]

BASE_TABLE = "messages_fts"
TRIGRAM_TABLE = "messages_fts_trigram"
#: trigger names shared by every layout (the cjk triggers are not ours to touch)
TRIGGER_NAMES = (
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)
#: content views any layout may own
VIEW_NAMES = ("messages_fts_src", "messages_fts_trigram_src")

STORAGE_VERSION_KEY = "fts_storage_version"
#: keys that describe a pending or failed upstream rebuild; meaningless after a full one
REBUILD_STATE_KEYS = (
    "fts_rebuild_high_water",
    "fts_rebuild_progress",
    "fts_stale",
    "fts_rebuild_deferral",
)
#: keys that only make sense while the file is on a given older layout
OPTIMIZE_AVAILABLE_KEY = "fts_optimize_available"
RETIRED_LAYOUT_2_KEY = "fts_tool_full_content_high_water"
#: renamed shadow tables an interrupted upstream optimize-storage leaves behind
TRASH_TABLE_PREFIX = "fts_v22_trash_"

#: characters of a tool row that layout 3 indexes
TOOL_CONTENT_PREFIX_CHARS = 8192


@dataclass(frozen=True)
class FtsIndex:
    """One FTS5 table of a layout."""

    name: str
    create_sql: str
    #: INSERT ... SELECT that fills an inline table; None for external content,
    #: which is filled by the FTS5 'rebuild' command instead
    inline_fill_sql: Optional[str] = None
    #: the view this table reads its content from, if the layout owns that view
    content_view: Optional[str] = None


@dataclass(frozen=True)
class FtsLayout:
    label: str
    #: value of state_meta.fts_storage_version; None = key absent (legacy inline)
    storage_version: Optional[int]
    indexes: tuple[FtsIndex, ...]
    views: tuple[tuple[str, str], ...] = field(default=())
    triggers: tuple[tuple[str, str], ...] = field(default=())


# --------------------------------------------------------------------------- pieces


def _gate(row: str) -> str:
    """The rebuild gate on ``row.id`` (schema-history 2.5): true unless the row lies in
    the (progress, high_water] window an upstream backfill has not indexed yet. With both
    keys absent it is always true."""
    return (
        f"({row}.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
        f"WHERE key = 'fts_rebuild_high_water'), -1) "
        f"OR {row}.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
        f"WHERE key = 'fts_rebuild_progress'), -1))"
    )


def _changed(columns: Iterable[str]) -> str:
    return "(" + " OR ".join(f"old.{c} IS NOT new.{c}" for c in columns) + ")"


def _values(row: str, columns: Iterable[str]) -> str:
    return ", ".join(f"{row}.{c}" for c in columns)


def _guarded_json(column: str) -> str:
    # json_extract raises on malformed JSON; a bad model_config must not break writes.
    return f"(CASE WHEN json_valid({column}) THEN {column} ELSE json_object() END)"


def _session_rule(excluded_sources: tuple[str, ...], *, delegate_rule: bool, alias: str = "") -> str:
    """Which sessions' messages belong in the trigram index (v29: not cron; v30: not
    cron/subagent and not a delegate child)."""
    q = f"{alias}." if alias else ""
    sources = ", ".join(f"'{s}'" for s in excluded_sources)
    rule = f"{q}source NOT IN ({sources})"
    if delegate_rule:
        rule += f" AND json_extract({_guarded_json(q + 'model_config')}, '$._delegate_from') IS NULL"
    return rule


def _session_exists(row: str, rule: str) -> str:
    return f"EXISTS (SELECT 1 FROM sessions WHERE id = {row}.session_id AND {rule})"


def _trigger(name: str, event: str, when: Optional[str], body: Iterable[str]) -> tuple[str, str]:
    head = f"CREATE TRIGGER {name} {event} ON messages"
    if when:
        head += f"\nWHEN {when}"
    statements = "".join(f"\n    {stmt};" for stmt in body)
    return name, f"{head}\nBEGIN{statements}\nEND"


def _fts_insert(table: str, columns: tuple[str, ...], values: str) -> str:
    return f"INSERT INTO {table}(rowid, {', '.join(columns)}) VALUES ({values})"


def _fts_delete(table: str, columns: tuple[str, ...], values: str) -> str:
    return f"INSERT INTO {table}({table}, rowid, {', '.join(columns)}) VALUES ('delete', {values})"


# --------------------------------------------------------------------------- v11-v22

_CONCAT = "COALESCE({r}.content, '') || ' ' || COALESCE({r}.tool_name, '') || ' ' || COALESCE({r}.tool_calls, '')"


def _legacy_triggers(table: str, prefix: str) -> tuple[tuple[str, str], ...]:
    insert = f"INSERT INTO {table}(rowid, content) VALUES (new.id, {_CONCAT.format(r='new')})"
    delete = f"DELETE FROM {table} WHERE rowid = old.id"
    return (
        _trigger(f"{prefix}_insert", "AFTER INSERT", None, [insert]),
        _trigger(f"{prefix}_delete", "AFTER DELETE", None, [delete]),
        _trigger(f"{prefix}_update", "AFTER UPDATE", None, [delete, insert]),
    )


def _legacy_fill(table: str) -> str:
    return (
        f"INSERT INTO {table}(rowid, content) "
        f"SELECT id, {_CONCAT.format(r='messages')} FROM messages"
    )


LEGACY_INLINE = FtsLayout(
    label="legacy inline (v11-v22)",
    storage_version=None,
    indexes=(
        FtsIndex(BASE_TABLE, f"CREATE VIRTUAL TABLE {BASE_TABLE} USING fts5(content)",
                 inline_fill_sql=_legacy_fill(BASE_TABLE)),
        FtsIndex(TRIGRAM_TABLE,
                 f"CREATE VIRTUAL TABLE {TRIGRAM_TABLE} USING fts5(content, tokenize='trigram')",
                 inline_fill_sql=_legacy_fill(TRIGRAM_TABLE)),
    ),
    triggers=_legacy_triggers(BASE_TABLE, "messages_fts")
    + _legacy_triggers(TRIGRAM_TABLE, "messages_fts_trigram"),
)


# --------------------------------------------------------------------------- v23-v29

_BASE_COLUMNS = ("content", "tool_name", "tool_calls")
_TRIGRAM_COLUMNS_V23 = ("content", "tool_name", "tool_calls")

_BASE_TABLE_V23 = FtsIndex(
    BASE_TABLE,
    f"CREATE VIRTUAL TABLE {BASE_TABLE} USING fts5(content, tool_name, tool_calls, "
    "content='messages', content_rowid='id')",
)
_TRIGRAM_TABLE_V23 = FtsIndex(
    TRIGRAM_TABLE,
    f"CREATE VIRTUAL TABLE {TRIGRAM_TABLE} USING fts5(content, tool_name, tool_calls, "
    "content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram')",
    content_view="messages_fts_trigram_src",
)


def _base_triggers_v23(*, narrowed: bool) -> tuple[tuple[str, str], ...]:
    cols = _BASE_COLUMNS
    insert_new = _fts_insert(BASE_TABLE, cols, "new.id, " + _values("new", cols))
    delete_old = _fts_delete(BASE_TABLE, cols, "old.id, " + _values("old", cols))
    update_event = f"AFTER UPDATE OF {', '.join(cols)}" if narrowed else "AFTER UPDATE"
    return (
        _trigger("messages_fts_insert", "AFTER INSERT", _gate("new"), [insert_new]),
        _trigger("messages_fts_delete", "AFTER DELETE", _gate("old"), [delete_old]),
        _trigger("messages_fts_update", update_event,
                 f"{_changed(cols)}\n   AND {_gate('old')}", [delete_old, insert_new]),
    )


def _trigram_triggers_v23(*, narrowed: bool, session_rule: Optional[str]) -> tuple[tuple[str, str], ...]:
    cols = _TRIGRAM_COLUMNS_V23
    old_ok = "old.role <> 'tool'"
    new_ok = "new.role <> 'tool'"
    if session_rule:
        old_ok += f" AND {_session_exists('old', session_rule)}"
        new_ok += f" AND {_session_exists('new', session_rule)}"
    watched = cols + ("role",)
    update_event = f"AFTER UPDATE OF {', '.join(watched)}" if narrowed else "AFTER UPDATE"
    delete_if_old = (
        f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, {', '.join(cols)}) "
        f"SELECT 'delete', old.id, {_values('old', cols)} WHERE {old_ok}"
    )
    insert_if_new = (
        f"INSERT INTO {TRIGRAM_TABLE}(rowid, {', '.join(cols)}) "
        f"SELECT new.id, {_values('new', cols)} WHERE {new_ok}"
    )
    return (
        _trigger("messages_fts_trigram_insert", "AFTER INSERT", f"{new_ok}\n   AND {_gate('new')}",
                 [_fts_insert(TRIGRAM_TABLE, cols, "new.id, " + _values("new", cols))]),
        _trigger("messages_fts_trigram_delete", "AFTER DELETE", f"{old_ok}\n   AND {_gate('old')}",
                 [_fts_delete(TRIGRAM_TABLE, cols, "old.id, " + _values("old", cols))]),
        _trigger("messages_fts_trigram_update", update_event,
                 f"{_changed(watched)}\n   AND {_gate('old')}", [delete_if_old, insert_if_new]),
    )


_TRIGRAM_VIEW_V23 = (
    "messages_fts_trigram_src",
    "CREATE VIEW messages_fts_trigram_src AS\n"
    "    SELECT id, role, content, tool_name, tool_calls\n"
    "    FROM messages\n"
    "    WHERE role <> 'tool'",
)

LAYOUT_1_V23 = FtsLayout(
    label="layout 1 (v23)",
    storage_version=1,
    indexes=(_BASE_TABLE_V23, _TRIGRAM_TABLE_V23),
    views=(_TRIGRAM_VIEW_V23,),
    triggers=_base_triggers_v23(narrowed=False)
    + _trigram_triggers_v23(narrowed=False, session_rule=None),
)

LAYOUT_1_V28 = FtsLayout(
    label="layout 1, narrowed update triggers (v28)",
    storage_version=1,
    indexes=(_BASE_TABLE_V23, _TRIGRAM_TABLE_V23),
    views=(_TRIGRAM_VIEW_V23,),
    triggers=_base_triggers_v23(narrowed=True)
    + _trigram_triggers_v23(narrowed=True, session_rule=None),
)

_V29_RULE = _session_rule(("cron",), delegate_rule=False)

LAYOUT_1_V29 = FtsLayout(
    label="layout 1, trigram without cron sessions (v29)",
    storage_version=1,
    indexes=(_BASE_TABLE_V23, _TRIGRAM_TABLE_V23),
    views=((
        "messages_fts_trigram_src",
        "CREATE VIEW messages_fts_trigram_src AS\n"
        "    SELECT m.id, m.role, m.content, m.tool_name, m.tool_calls\n"
        "    FROM messages AS m\n"
        "    JOIN sessions AS s ON s.id = m.session_id\n"
        f"    WHERE m.role <> 'tool' AND {_session_rule(('cron',), delegate_rule=False, alias='s')}",
    ),),
    triggers=_base_triggers_v23(narrowed=True)
    + _trigram_triggers_v23(narrowed=True, session_rule=_V29_RULE),
)


# --------------------------------------------------------------------------- v30 (layout 3)

_V30_SOURCES = ("cron", "subagent")
_V30_RULE = _session_rule(_V30_SOURCES, delegate_rule=True)


def _projection(row: str) -> str:
    """What messages_fts indexes as ``content``: tool rows only up to the prefix."""
    q = f"{row}." if row else ""
    return (
        f"CASE WHEN {q}role = 'tool' THEN substr(COALESCE({q}content, ''), 1, "
        f"{TOOL_CONTENT_PREFIX_CHARS}) ELSE {q}content END"
    )


def _base_triggers_v30() -> tuple[tuple[str, str], ...]:
    cols = _BASE_COLUMNS
    new_values = f"new.id, {_projection('new')}, new.tool_name, new.tool_calls"
    old_values = f"old.id, {_projection('old')}, old.tool_name, old.tool_calls"
    watched = cols + ("role",)  # the projection depends on role
    return (
        _trigger("messages_fts_insert", "AFTER INSERT", _gate("new"),
                 [_fts_insert(BASE_TABLE, cols, new_values)]),
        _trigger("messages_fts_delete", "AFTER DELETE", _gate("old"),
                 [_fts_delete(BASE_TABLE, cols, old_values)]),
        _trigger("messages_fts_update", f"AFTER UPDATE OF {', '.join(watched)}",
                 f"{_changed(watched)}\n   AND {_gate('old')}",
                 [_fts_delete(BASE_TABLE, cols, old_values), _fts_insert(BASE_TABLE, cols, new_values)]),
    )


def _trigram_triggers_v30() -> tuple[tuple[str, str], ...]:
    cols = ("content", "tool_name")
    old_ok = f"old.role <> 'tool' AND {_session_exists('old', _V30_RULE)}"
    new_ok = f"new.role <> 'tool' AND {_session_exists('new', _V30_RULE)}"
    watched = ("content", "tool_name", "role")
    return (
        _trigger("messages_fts_trigram_insert", "AFTER INSERT", f"{new_ok}\n   AND {_gate('new')}",
                 [_fts_insert(TRIGRAM_TABLE, cols, "new.id, " + _values("new", cols))]),
        _trigger("messages_fts_trigram_delete", "AFTER DELETE", f"{old_ok}\n   AND {_gate('old')}",
                 [_fts_delete(TRIGRAM_TABLE, cols, "old.id, " + _values("old", cols))]),
        _trigger("messages_fts_trigram_update", f"AFTER UPDATE OF {', '.join(watched)}",
                 f"{_changed(watched)}\n   AND {_gate('old')}",
                 [f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, {', '.join(cols)}) "
                  f"SELECT 'delete', old.id, {_values('old', cols)} WHERE {old_ok}",
                  f"INSERT INTO {TRIGRAM_TABLE}(rowid, {', '.join(cols)}) "
                  f"SELECT new.id, {_values('new', cols)} WHERE {new_ok}"]),
    )


LAYOUT_3_V30 = FtsLayout(
    label="layout 3 (v30)",
    storage_version=3,
    indexes=(
        FtsIndex(BASE_TABLE,
                 f"CREATE VIRTUAL TABLE {BASE_TABLE} USING fts5(content, tool_name, tool_calls, "
                 "content='messages_fts_src', content_rowid='id')",
                 content_view="messages_fts_src"),
        FtsIndex(TRIGRAM_TABLE,
                 f"CREATE VIRTUAL TABLE {TRIGRAM_TABLE} USING fts5(content, tool_name, "
                 "content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram')",
                 content_view="messages_fts_trigram_src"),
    ),
    views=(
        ("messages_fts_src",
         "CREATE VIEW messages_fts_src AS\n"
         f"    SELECT id, {_projection('')} AS content, tool_name, tool_calls\n"
         "    FROM messages"),
        ("messages_fts_trigram_src",
         "CREATE VIEW messages_fts_trigram_src AS\n"
         "    SELECT m.id, m.role, m.content, m.tool_name\n"
         "    FROM messages AS m\n"
         "    JOIN sessions AS s ON s.id = m.session_id\n"
         f"    WHERE m.role <> 'tool' AND {_session_rule(_V30_SOURCES, delegate_rule=True, alias='s')}"),
    ),
    triggers=_base_triggers_v30() + _trigram_triggers_v30(),
)


# --------------------------------------------------------------------------- applying


def _normalized(sql: Optional[str]) -> Optional[str]:
    """Enough normalization to tell two CREATE texts apart: case, whitespace, quotes
    and IF NOT EXISTS do not matter (a false "different" only costs a rebuild)."""
    if sql is None:
        return None
    text = re.sub(r"\bif\s+not\s+exists\b", "", sql, flags=re.IGNORECASE)
    return re.sub(r"[\s'\"`\[\]]", "", text).lower()


def _master_sql(conn: Connection, kind: str, name: str) -> Optional[str]:
    return conn.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = :k AND name = :n"), {"k": kind, "n": name}
    ).scalar()


def _meta_keys_present(conn: Connection, keys: Iterable[str]) -> bool:
    keys = list(keys)
    marks = ", ".join(f":k{i}" for i in range(len(keys)))
    return bool(conn.execute(
        sa.text(f"SELECT 1 FROM state_meta WHERE key IN ({marks}) LIMIT 1"),
        {f"k{i}": k for i, k in enumerate(keys)},
    ).scalar())


def _delete_meta(conn: Connection, *keys: str) -> None:
    for key in keys:
        conn.execute(sa.text("DELETE FROM state_meta WHERE key = :k"), {"k": key})


def detect_layout(conn: Connection) -> Optional[FtsLayout]:
    """The known layout whose tables, views and triggers the file holds exactly, if any."""
    for layout in (LEGACY_INLINE, LAYOUT_1_V23, LAYOUT_1_V28, LAYOUT_1_V29, LAYOUT_3_V30):
        wanted = {("table", i.name): i.create_sql for i in layout.indexes}
        wanted.update({("view", n): s for n, s in layout.views})
        wanted.update({("trigger", n): s for n, s in layout.triggers})
        present_views = {n for n in VIEW_NAMES if _master_sql(conn, "view", n) is not None}
        if present_views != {n for n, _ in layout.views}:
            continue
        if all(_normalized(_master_sql(conn, kind, name)) == _normalized(sql)
               for (kind, name), sql in wanted.items()):
            return layout
    return None


def _row_count(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT COUNT(*) FROM messages").scalar() or 0)


def apply_layout(
    conn: Connection,
    layout: FtsLayout,
    *,
    rebuild: Iterable[str] = (),
    defer: bool = False,
    progress: Progress = None,
) -> set[str]:
    """Bring the file's FTS objects to ``layout`` from whatever it holds now.

    Triggers and views are always dropped and re-created (cheap). A table whose CREATE
    text differs from the layout's is dropped and re-created; it is then filled, as is
    every table named in ``rebuild`` and every table whose content view changed. When the
    file carries upstream's pending-rebuild markers (or ``fts_stale``), every table is
    rebuilt, because the gated triggers did not maintain the rows in the marker window.
    Each fill is one statement (FTS5 'rebuild', or INSERT ... SELECT for inline tables),
    so memory stays bounded whatever the table size.

    ``defer=True`` (an upgrade run that goes on to a later layout step which rebuilds
    everything, see :func:`run_reaches`): instead of filling, both tables are emptied
    and upstream's rebuild window is opened over every existing message
    (``fts_rebuild_high_water`` = MAX(id), ``fts_rebuild_progress`` below MIN(id)). The
    gated triggers then keep the file consistent - they index new rows and never touch
    the pending ones - and the last step rebuilds once instead of once per layout.

    Returns the names of the tables that were filled.
    """
    say = progress or (lambda _msg: None)
    # SQLite only: on PostgreSQL no revision below the baseline 0030 ever runs
    # (backends/postgresql/migrate/ refuses such a plan before anything is written)
    recreate = {i.name for i in layout.indexes
                if _normalized(_master_sql(conn, "table", i.name)) != _normalized(i.create_sql)}
    new_views = dict(layout.views)
    view_changed = {
        i.name for i in layout.indexes
        if i.content_view
        and _normalized(_master_sql(conn, "view", i.content_view)) != _normalized(new_views[i.content_view])
    }
    fill = recreate | view_changed | (set(rebuild) & {i.name for i in layout.indexes})
    if _meta_keys_present(conn, REBUILD_STATE_KEYS):
        fill = {i.name for i in layout.indexes}

    # Triggers first: they name the tables and would dangle (or fire) mid-change.
    for name in TRIGGER_NAMES:
        conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}"')
    for name in VIEW_NAMES:
        conn.exec_driver_sql(f'DROP VIEW IF EXISTS "{name}"')
    for name in sorted(recreate):
        conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}"')  # drops its shadow tables too
    if layout.storage_version is not None:
        trash = conn.execute(sa.text(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, :n) = :p"
        ), {"n": len(TRASH_TABLE_PREFIX), "p": TRASH_TABLE_PREFIX}).scalars().all()
        for name in trash:
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}"')

    for _name, sql in layout.views:
        conn.exec_driver_sql(sql)
    for index in layout.indexes:
        if index.name in recreate:
            conn.exec_driver_sql(index.create_sql)

    rows = _row_count(conn) if fill else 0
    if fill and defer and rows:
        _open_rebuild_window(conn, layout, recreate)
        say(f"{layout.label}: index rebuild over {rows} messages left to a later step of this run")
        fill = set()
    if fill:
        for index in layout.indexes:
            if index.name not in fill:
                continue
            say(f"rebuilding {index.name} ({layout.label}) over {rows} messages")
            if index.inline_fill_sql:
                if index.name not in recreate:
                    conn.exec_driver_sql(f'DELETE FROM "{index.name}"')
                conn.exec_driver_sql(index.inline_fill_sql)
            else:
                conn.exec_driver_sql(f"INSERT INTO {index.name}({index.name}) VALUES ('rebuild')")

    # Triggers last: the fills above must not double-index through them.
    for _name, sql in layout.triggers:
        conn.exec_driver_sql(sql)

    if fill == {i.name for i in layout.indexes}:
        _delete_meta(conn, *REBUILD_STATE_KEYS)
    if layout.storage_version is None:
        _delete_meta(conn, STORAGE_VERSION_KEY)
    else:
        _delete_meta(conn, OPTIMIZE_AVAILABLE_KEY)
        if layout.storage_version >= 3:
            _delete_meta(conn, RETIRED_LAYOUT_2_KEY)
        conn.execute(
            sa.text("INSERT OR REPLACE INTO state_meta(key, value) VALUES (:k, :v)"),
            {"k": STORAGE_VERSION_KEY, "v": str(layout.storage_version)},
        )
    if fill:
        say(f"full-text index now {layout.label}")
    return fill


def _open_rebuild_window(conn: Connection, layout: FtsLayout, recreated: set[str]) -> None:
    """Empty every index and mark all current messages as not yet indexed."""
    for index in layout.indexes:
        if index.name in recreated:
            continue  # created empty just now
        if index.inline_fill_sql:
            conn.exec_driver_sql(f'DELETE FROM "{index.name}"')
        else:
            conn.exec_driver_sql(f"INSERT INTO {index.name}({index.name}) VALUES ('delete-all')")
    conn.exec_driver_sql(
        "INSERT OR REPLACE INTO state_meta (key, value) "
        "SELECT 'fts_rebuild_high_water', CAST(MAX(id) AS TEXT) FROM messages"
    )
    conn.exec_driver_sql(
        "INSERT OR REPLACE INTO state_meta (key, value) "
        "SELECT 'fts_rebuild_progress', CAST(MIN(id) - 1 AS TEXT) FROM messages"
    )


def run_reaches(revision: str) -> bool:
    """Whether the running ``alembic upgrade`` goes at least as far as ``revision``.

    False outside an Alembic command (e.g. a migration context built by hand), and for
    destinations it cannot resolve: then nothing is deferred.
    """
    try:
        from alembic import context

        destination = context.get_revision_argument()
        script = context.script
    except Exception:
        return False
    if isinstance(destination, (tuple, list)):
        destination = destination[0] if len(destination) == 1 else None
    try:
        resolved = script.get_revision(destination) if destination else None
    except Exception:
        return False
    from hermes_store.revisions import at_or_after
    return resolved is not None and at_or_after(resolved.revision, revision)


def integrity_problems(conn: Connection, tables: Iterable[str] = (BASE_TABLE, TRIGRAM_TABLE)) -> list[str]:
    """FTS5 integrity-check (rank=1 form: also compares with the content table/view)."""
    problems = []
    for table in tables:
        try:
            conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        except sa.exc.DBAPIError as exc:
            problems.append(f"{table}: {exc.orig}")
    return problems


def migration_progress() -> Progress:
    """Where a revision reports rebuild steps: ``config.attributes["fts_progress"]`` (a
    one-argument callable) when the caller handed one to the migration run, else the log.

    A rebuild is the only long step of the chain (seconds per 100,000 messages for the
    trigram index), so a CLI shows these lines while it runs.
    """
    try:
        from alembic import op

        config = op.get_context().config
        callback = config.attributes.get("fts_progress") if config is not None else None
    except Exception:  # outside a migration run (tests calling apply_layout directly)
        callback = None
    return callback if callable(callback) else log.info
