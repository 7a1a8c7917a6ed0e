"""Head full-text search layout on SQLite (decision D7, "layout 3") as FTS5 DDL text.

Objects (all on ``messages``; the head reference file describes them exactly):

* view ``messages_fts_src`` — the indexed projection of every message: a tool row's
  content is cut to ``TOOL_CONTENT_PREFIX_CHARS`` characters (tool output is huge and
  rarely searched past its start);
* ``messages_fts`` — FTS5 (unicode61) over ``content, tool_name, tool_calls`` of that view;
* view ``messages_fts_trigram_src`` — non-tool messages of sessions that pass
  ``trigram_session_predicate`` (not ``cron``/``subagent``, not a delegate child);
* ``messages_fts_trigram`` — FTS5 trigram index (substring / CJK search) over
  ``content, tool_name`` of that view;
* optional ``messages_fts_cjk`` over ``messages_fts_cjk_src`` (non-tool rows), created
  only where a ``cjk_unicode61`` tokenizer is registered on the connection;
* six gated triggers (three per index; the cjk index has its own three).

Every index is *external content*: FTS5 stores no copy of the text, so a trigger must
hand FTS5 exactly the values it indexed when it deletes a row. Hence the **rebuild gate**
in every trigger: while a rebuild/backfill is pending, ``state_meta`` holds
``fts_rebuild_high_water`` = H (``MAX(id)`` when the index was emptied) and
``fts_rebuild_progress`` = P (highest id backfilled so far); rows with P < id <= H are not
in the index, so the triggers neither insert nor delete them. With both keys absent the
gate is always open. The cjk index uses its own pair of keys.

Limits: there is no trigger on ``sessions`` (as upstream), so a change of a session's
``source`` or its ``model_config._delegate_from`` after it has messages moves its rows
in the trigram index only when the store makes it (``scope.py``, in the same unit);
another program's change leaves the index out of step until ``maintenance.rebuild``;
and ``create_fts`` does not
repair an index that fell behind while its triggers were missing
(``maintenance.integrity_check`` reports both).

Public API (``conn`` is a SQLAlchemy ``Connection``; nothing here commits):

``create_fts(conn, *, cjk=None, fill=True, cjk_tokenizer=CJK_TOKENIZER) -> list[str]``
    Create the head layout (idempotent, ``IF NOT EXISTS``); returns the FTS tables it
    created. ``cjk=None`` probes for the tokenizer, ``True``/``False`` force the choice.
    A new index over a non-empty ``messages`` is filled at once (``fill=True``) or
    gated for a later ``hermes_store.fts.maintenance.rebuild`` (``fill=False``).
    Where the cjk tokenizer is missing but a cjk index with triggers exists (a file
    from another machine), the cjk triggers are detached and ``fts_cjk_stale`` set,
    so that writing messages keeps working. A stale index gets no triggers here.
``detach(conn, key, value) -> list[str]``, ``attach(conn, key)``, ``recreate(conn, table)``
    Take the triggers of the indexes a stale key names (``STALE``) out and set the key;
    put them back and clear it; drop an index (by hand where FTS5 cannot open it) and
    create it empty — for ``maintenance.detach_damaged`` and ``maintenance.rebuild``.
``drop_fts(conn)``
    Drop every FTS trigger, view and virtual table (also a cjk table whose tokenizer
    cannot be loaded) and the rebuild-gate keys.
``stamp_storage_version(conn)``
    Record ``fts_storage_version`` = ``FTS_STORAGE_VERSION`` in ``state_meta``.
``fts5_available(conn)``, ``cjk_tokenizer_available(conn, tokenizer=CJK_TOKENIZER)``
    Safe probes (a temporary table, created and dropped); ``table_usable(conn, table)``
    tells whether an existing FTS table can be opened (its tokenizer loads).
``is_fts_object(name)``
    True for FTS tables, their shadow tables, their source views and FTS triggers —
    what the Alembic env must leave out of autogenerate (``include_name``).
Names and DDL: ``FTS_TABLE``, ``TRIGRAM_TABLE``, ``CJK_TABLE``, ``FTS_TABLES``,
``FTS_VIEWS``, ``FTS_TRIGGERS``, ``VIEWS``, ``VIRTUAL_TABLES``, ``TRIGGERS`` (dicts
name → DDL of the always-created objects), ``cjk_ddl(tokenizer)``, the ``state_meta``
keys (``*_KEY``), ``TOOL_CONTENT_PREFIX_CHARS``, ``TRIGRAM_EXCLUDED_SOURCES``.
"""

from __future__ import annotations

import logging

from sqlalchemy.engine import Connection

from ....driver import driver_execute
from ....fts.layout import (
    FTS_STALE_KEY,
    FTS_TABLE,
    TOOL_CONTENT_PREFIX_CHARS,
    TRIGRAM_EXCLUDED_SOURCES,
    TRIGRAM_TABLE,
)
from ..errors import is_index_damage
#: the package's SQLite library (library.py), never `import sqlite3`: one copy of SQLite
#: per process
from ..library import SQLITE as sqlite3

log = logging.getLogger(__name__)

#: FTS layout version written to ``state_meta`` (3 = ``messages_fts`` over ``messages_fts_src``)
FTS_STORAGE_VERSION = "3"
#: the optional tokenizer that backs ``messages_fts_cjk``
CJK_TOKENIZER = "cjk_unicode61"

# state_meta keys
FTS_STORAGE_VERSION_KEY = "fts_storage_version"
REBUILD_HIGH_WATER_KEY = "fts_rebuild_high_water"
REBUILD_PROGRESS_KEY = "fts_rebuild_progress"
CJK_REBUILD_HIGH_WATER_KEY = "fts_cjk_rebuild_high_water"
CJK_REBUILD_PROGRESS_KEY = "fts_cjk_rebuild_progress"
#: set when the cjk triggers were detached; only a full rebuild may re-attach them
CJK_STALE_KEY = "fts_cjk_stale"

CJK_TABLE = "messages_fts_cjk"
#: every FTS5 table of the head layout (the cjk one is optional)
FTS_TABLES = (FTS_TABLE, TRIGRAM_TABLE, CJK_TABLE)

FTS_SRC_VIEW = "messages_fts_src"
TRIGRAM_SRC_VIEW = "messages_fts_trigram_src"
CJK_SRC_VIEW = "messages_fts_cjk_src"
FTS_VIEWS = (FTS_SRC_VIEW, TRIGRAM_SRC_VIEW, CJK_SRC_VIEW)

CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")
FTS_TRIGGERS = (
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
) + CJK_TRIGGERS

#: name suffixes of the shadow tables FTS5 keeps for each index
SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")
#: tables upstream's optimize-storage parks a legacy index in while tearing it down
_UPSTREAM_TRASH_PREFIX = "fts_v22_trash_"


# --------------------------------------------------------------------------- SQL pieces


def _rebuild_gate(row: str, high_water_key: str, progress_key: str) -> str:
    """True when ``row`` is outside the pending-rebuild window (P, H] (see module doc)."""

    def marker(key: str) -> str:
        return f"COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{key}'), -1)"

    return f"({row}.id > {marker(high_water_key)} OR {row}.id <= {marker(progress_key)})"


#: columns whose change re-indexes a row (role decides tool-row and trigram eligibility)
_WORD_WATCHED = ("content", "tool_name", "tool_calls", "role")
_TRIGRAM_WATCHED = ("content", "tool_name", "role")


def _on_change(columns: tuple[str, ...]) -> str:
    """An update trigger's event and WHEN, from one column list: fire only when one
    of the indexed columns really changed (most updates touch counters and flags)."""
    changed = " OR ".join(f"old.{c} IS NOT new.{c}" for c in columns)
    return f"AFTER UPDATE OF {', '.join(columns)} ON messages\nWHEN ({changed})"


def base_gate(row: str) -> str:
    """The word and trigram triggers' rebuild gate for ``row`` (``new``/``old``/an alias)."""
    return _rebuild_gate(row, REBUILD_HIGH_WATER_KEY, REBUILD_PROGRESS_KEY)


def _cjk_gate(row: str) -> str:
    return _rebuild_gate(row, CJK_REBUILD_HIGH_WATER_KEY, CJK_REBUILD_PROGRESS_KEY)


def indexed_content(prefix: str = "") -> str:
    """The projection ``messages_fts`` indexes as ``content`` (``prefix``: ``new.``/``old.``)."""
    return (
        f"CASE WHEN {prefix}role = 'tool' "
        f"THEN substr(COALESCE({prefix}content, ''), 1, {TOOL_CONTENT_PREFIX_CHARS}) "
        f"ELSE {prefix}content END"
    )


def trigram_session_predicate(prefix: str = "") -> str:
    """SQL true for a ``sessions`` row whose messages belong in the trigram index.

    ``model_config`` is free JSON text written by many versions; ``json_valid`` keeps a
    malformed value from failing the trigger (and with it the message write).
    """
    sources = ", ".join(f"'{s}'" for s in TRIGRAM_EXCLUDED_SOURCES)
    config = (
        f"(CASE WHEN json_valid({prefix}model_config) THEN {prefix}model_config "
        f"ELSE json_object() END)"
    )
    return (
        f"{prefix}source NOT IN ({sources}) "
        f"AND json_extract({config}, '$._delegate_from') IS NULL"
    )


def _trigram_eligible(row: str) -> str:
    return (
        f"{row}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions "
        f"WHERE id = {row}.session_id AND {trigram_session_predicate()})"
    )


# --------------------------------------------------------------------------- head DDL

VIEWS = {
    FTS_SRC_VIEW: f"""
CREATE VIEW IF NOT EXISTS {FTS_SRC_VIEW} AS
SELECT id, {indexed_content()} AS content, tool_name, tool_calls
FROM messages""",
    TRIGRAM_SRC_VIEW: f"""
CREATE VIEW IF NOT EXISTS {TRIGRAM_SRC_VIEW} AS
SELECT m.id, m.role, m.content, m.tool_name
FROM messages AS m
JOIN sessions AS s ON s.id = m.session_id
WHERE m.role <> 'tool' AND {trigram_session_predicate('s.')}""",
}

VIRTUAL_TABLES = {
    FTS_TABLE: f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(
    content, tool_name, tool_calls,
    content='{FTS_SRC_VIEW}', content_rowid='id'
)""",
    TRIGRAM_TABLE: f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {TRIGRAM_TABLE} USING fts5(
    content, tool_name,
    content='{TRIGRAM_SRC_VIEW}', content_rowid='id', tokenize='trigram'
)""",
}

_FTS_COLUMNS = "rowid, content, tool_name, tool_calls"
_TRIGRAM_COLUMNS = "rowid, content, tool_name"


def _fts_values(row: str) -> str:
    return f"{row}.id, {indexed_content(row + '.')}, {row}.tool_name, {row}.tool_calls"


TRIGGERS = {
    "messages_fts_insert": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages
WHEN {base_gate('new')}
BEGIN
    INSERT INTO {FTS_TABLE}({_FTS_COLUMNS}) VALUES ({_fts_values('new')});
END""",
    "messages_fts_delete": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN {base_gate('old')}
BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, {_FTS_COLUMNS}) VALUES ('delete', {_fts_values('old')});
END""",
    # Narrowed to the indexed columns: most updates (counters, flags) skip FTS entirely.
    "messages_fts_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_update
{_on_change(_WORD_WATCHED)}
     AND {base_gate('old')}
BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, {_FTS_COLUMNS}) VALUES ('delete', {_fts_values('old')});
    INSERT INTO {FTS_TABLE}({_FTS_COLUMNS}) VALUES ({_fts_values('new')});
END""",
    "messages_fts_trigram_insert": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages
WHEN {_trigram_eligible('new')} AND {base_gate('new')}
BEGIN
    INSERT INTO {TRIGRAM_TABLE}({_TRIGRAM_COLUMNS}) VALUES (new.id, new.content, new.tool_name);
END""",
    "messages_fts_trigram_delete": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages
WHEN {_trigram_eligible('old')} AND {base_gate('old')}
BEGIN
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, {_TRIGRAM_COLUMNS})
    VALUES ('delete', old.id, old.content, old.tool_name);
END""",
    # A role change can move a row into or out of the index, so each half has its own
    # eligibility test instead of one WHEN for both.
    "messages_fts_trigram_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update
{_on_change(_TRIGRAM_WATCHED)}
     AND {base_gate('old')}
BEGIN
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, {_TRIGRAM_COLUMNS})
    SELECT 'delete', old.id, old.content, old.tool_name WHERE {_trigram_eligible('old')};
    INSERT INTO {TRIGRAM_TABLE}({_TRIGRAM_COLUMNS})
    SELECT new.id, new.content, new.tool_name WHERE {_trigram_eligible('new')};
END""",
}


def cjk_ddl(tokenizer: str = CJK_TOKENIZER) -> tuple[str, str, dict[str, str]]:
    """(view DDL, virtual-table DDL, {trigger: DDL}) of the optional cjk index.

    ``tokenizer`` exists so tests can exercise this path with a stock tokenizer on a
    machine that has no ``cjk_unicode61``.
    """
    view = f"""
CREATE VIEW IF NOT EXISTS {CJK_SRC_VIEW} AS
SELECT id, role, content, tool_name, tool_calls FROM messages WHERE role <> 'tool'"""
    table = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {CJK_TABLE} USING fts5(
    content, tool_name, tool_calls,
    content='{CJK_SRC_VIEW}', content_rowid='id', tokenize='{tokenizer}'
)"""
    old_values = "old.id, old.content, old.tool_name, old.tool_calls"
    new_values = "new.id, new.content, new.tool_name, new.tool_calls"
    triggers = {
        "messages_fts_cjk_insert": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_insert AFTER INSERT ON messages
WHEN new.role <> 'tool' AND {_cjk_gate('new')}
BEGIN
    INSERT INTO {CJK_TABLE}({_FTS_COLUMNS}) VALUES ({new_values});
END""",
        "messages_fts_cjk_delete": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_delete AFTER DELETE ON messages
WHEN old.role <> 'tool' AND {_cjk_gate('old')}
BEGIN
    INSERT INTO {CJK_TABLE}({CJK_TABLE}, {_FTS_COLUMNS}) VALUES ('delete', {old_values});
END""",
        "messages_fts_cjk_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_cjk_update
{_on_change(_WORD_WATCHED)}
     AND {_cjk_gate('old')}
BEGIN
    INSERT INTO {CJK_TABLE}({CJK_TABLE}, {_FTS_COLUMNS})
    SELECT 'delete', {old_values} WHERE old.role <> 'tool';
    INSERT INTO {CJK_TABLE}({_FTS_COLUMNS})
    SELECT {new_values} WHERE new.role <> 'tool';
END""",
    }
    return view, table, triggers


#: stale key -> (the FTS tables it covers, their triggers): while the key is set those
#: triggers are detached and the tables behind ``messages``; only a full rebuild
#: (``maintenance.rebuild``) re-attaches them. The word and trigram indexes go stale
#: together when found damaged; the cjk index when damaged or without its tokenizer.
STALE = {
    FTS_STALE_KEY: ((FTS_TABLE, TRIGRAM_TABLE), tuple(TRIGGERS)),
    CJK_STALE_KEY: ((CJK_TABLE,), CJK_TRIGGERS),
}


# --------------------------------------------------------------------------- names


def is_fts_object(name: str) -> bool:
    """True for anything the FTS layer owns: FTS tables, their shadow tables, source
    views and triggers (and upstream's ``fts_v22_trash_*`` leftovers)."""
    if name in FTS_TABLES or name in FTS_VIEWS or name in FTS_TRIGGERS:
        return True
    if name.startswith(_UPSTREAM_TRASH_PREFIX):
        return True
    return any(name == table + suffix for table in FTS_TABLES for suffix in SHADOW_SUFFIXES)


# --------------------------------------------------------------------------- probes


def _driver(conn: Connection) -> sqlite3.Connection:
    # Probes run on the raw driver connection: an expected failure must not be
    # reported through (or disturb) SQLAlchemy's transaction bookkeeping.
    return conn.connection.driver_connection


def _probe_fts5_table(conn: Connection, options: str) -> str | None:
    """Create and drop a temporary fts5 table; None on success, else SQLite's message."""
    raw = _driver(conn)
    try:
        raw.execute(f"CREATE VIRTUAL TABLE temp.hermes_store_fts_probe USING fts5({options})")
        raw.execute("DROP TABLE temp.hermes_store_fts_probe")
    except sqlite3.Error as exc:
        # A failed CREATE VIRTUAL TABLE can leave the table in the connection's cached
        # temp schema, where any later use of that name fails again; a temp-schema
        # change makes SQLite reload the cache from disk, which never had it.
        raw.execute("CREATE TEMP TABLE hermes_store_fts_probe_reset(x)")
        raw.execute("DROP TABLE temp.hermes_store_fts_probe_reset")
        return str(exc)
    return None


def table_usable(conn: Connection, table: str) -> bool:
    """True when FTS table ``table`` can be opened here (its tokenizer loads).

    A query that tokenizes is needed: since SQLite 3.4x FTS5 loads a table's tokenizer
    only when it first tokenizes, so a plain ``SELECT … WHERE 0`` succeeds without it.
    (One index lookup for a word no message has.)"""
    try:
        _driver(conn).execute(
            f"SELECT count(*) FROM {table} WHERE {table} MATCH '\"hermesstoreprobe\"'"
        ).fetchone()
    except sqlite3.Error as exc:
        log.debug("%s cannot be opened: %s", table, exc)
        return False
    return True


def fts5_available(conn: Connection) -> bool:
    return _probe_fts5_table(conn, "x") is None


def cjk_tokenizer_available(conn: Connection, tokenizer: str = CJK_TOKENIZER) -> bool:
    """True when ``tokenizer`` is registered on this connection ("no such tokenizer" → False)."""
    error = _probe_fts5_table(conn, f"x, tokenize='{tokenizer}'")
    if error is not None:
        log.debug("FTS5 tokenizer %s not available: %s", tokenizer, error)
    return error is None


# --------------------------------------------------------------------------- create / drop


def schema_object_exists(conn: Connection, kind: str, name: str) -> bool:
    # on the driver: a unit that moves a session in the trigram index asks it (scope.py)
    return bool(driver_execute(conn, "SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?",
                               (kind, name), fetch_all=True))


def _meta(conn: Connection, key: str) -> str | None:
    return conn.exec_driver_sql("SELECT value FROM state_meta WHERE key = ?", (key,)).scalar()


def _set_meta(conn: Connection, key: str, value) -> None:
    conn.exec_driver_sql(
        "INSERT INTO state_meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, str(value)),
    )


def _delete_meta(conn: Connection, *keys: str) -> None:
    for key in keys:
        conn.exec_driver_sql("DELETE FROM state_meta WHERE key = ?", (key,))


def _max_message_id(conn: Connection) -> int | None:
    return conn.exec_driver_sql("SELECT MAX(id) FROM messages").scalar()


def _fts_command(conn: Connection, table: str, command: str) -> None:
    conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('{command}')")


def stamp_storage_version(conn: Connection) -> None:
    _set_meta(conn, FTS_STORAGE_VERSION_KEY, FTS_STORAGE_VERSION)


def create_fts(
    conn: Connection,
    *,
    cjk: bool | None = None,
    fill: bool = True,
    cjk_tokenizer: str = CJK_TOKENIZER,
) -> list[str]:
    """Create the head FTS layout where missing; return the FTS tables created now.

    An index created over existing messages is empty; left so, its delete triggers
    would hand FTS5 rows it never indexed and corrupt it. So it is filled right away
    (``fill=True``) or the rebuild gate is closed over the existing ids (``fill=False``)
    for ``maintenance.rebuild`` to fill later.
    """
    if cjk is None:
        cjk = cjk_tokenizer_available(conn, cjk_tokenizer)
    has_rows = _max_message_id(conn) is not None

    created = [t for t in (FTS_TABLE, TRIGRAM_TABLE) if not schema_object_exists(conn, "table", t)]
    for ddl in VIEWS.values():
        conn.exec_driver_sql(ddl)
    for ddl in VIRTUAL_TABLES.values():
        conn.exec_driver_sql(ddl)
    if created and has_rows:
        if fill:
            for table in created:
                _fts_command(conn, table, "rebuild")
        else:
            _set_meta(conn, REBUILD_HIGH_WATER_KEY, _max_message_id(conn))
            _set_meta(conn, REBUILD_PROGRESS_KEY, 0)
    if _meta(conn, FTS_STALE_KEY) is None:  # a stale index is re-attached by a rebuild only
        for ddl in TRIGGERS.values():
            conn.exec_driver_sql(ddl)

    if cjk:
        if _create_cjk(conn, cjk_tokenizer, fill=fill, has_rows=has_rows):
            created.append(CJK_TABLE)
    else:
        _detach_cjk_triggers(conn)
    return created


def _create_cjk(conn: Connection, tokenizer: str, *, fill: bool, has_rows: bool) -> bool:
    if _meta(conn, CJK_STALE_KEY) is not None:
        # Rows were written while the triggers were detached: the index is behind, and
        # attaching the triggers now would 'delete' rows it never saw. Only a full
        # rebuild (maintenance.rebuild) may re-attach them.
        return False
    view, table, triggers = cjk_ddl(tokenizer)
    is_new = not schema_object_exists(conn, "table", CJK_TABLE)
    conn.exec_driver_sql(view)
    conn.exec_driver_sql(table)
    if is_new and has_rows:
        if fill:
            _fts_command(conn, CJK_TABLE, "rebuild")
        else:
            _set_meta(conn, CJK_REBUILD_HIGH_WATER_KEY, _max_message_id(conn))
            _set_meta(conn, CJK_REBUILD_PROGRESS_KEY, 0)
    for ddl in triggers.values():
        conn.exec_driver_sql(ddl)
    return is_new


def _detach_cjk_triggers(conn: Connection) -> None:
    """Without the tokenizer, a live cjk trigger makes every message write fail."""
    if detach(conn, CJK_STALE_KEY, 1):
        log.warning(
            "FTS5 tokenizer %s is not available: detaching the %s index (marked stale; "
            "a full FTS rebuild on a machine with the tokenizer restores it)",
            CJK_TOKENIZER, CJK_TABLE,
        )


def detach(conn: Connection, key: str, value) -> list[str]:
    """Drop the triggers of the indexes stale key ``key`` covers (``STALE``) and set the
    key to ``value``, in the caller's transaction; returns the triggers dropped (none:
    none was attached, and the key is left as it was)."""
    present = [t for t in STALE[key][1] if schema_object_exists(conn, "trigger", t)]
    if present:
        _set_meta(conn, key, value)
        for trigger in present:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    return present


def attach(conn: Connection, key: str, tokenizer: str = CJK_TOKENIZER) -> None:
    """(Re)create the triggers of the indexes ``key`` covers, once a full rebuild filled
    them from ``messages`` in this transaction; clears the stale mark."""
    _delete_meta(conn, key)
    triggers = cjk_ddl(tokenizer)[2] if key == CJK_STALE_KEY else TRIGGERS
    for ddl in triggers.values():
        conn.exec_driver_sql(ddl)


def recreate(conn: Connection, table: str, tokenizer: str = CJK_TOKENIZER) -> None:
    """Drop FTS table ``table`` and create it empty (a stale index, for a rebuild: FTS5
    cannot even open one whose structure record is damaged)."""
    _drop_virtual_table(conn, table)
    conn.exec_driver_sql(cjk_ddl(tokenizer)[1] if table == CJK_TABLE else VIRTUAL_TABLES[table])


def drop_fts(conn: Connection) -> None:
    """Drop the whole FTS layer: triggers, views, virtual tables, rebuild-gate keys."""
    for trigger in FTS_TRIGGERS:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    for table in FTS_TABLES:
        if schema_object_exists(conn, "table", table):
            _drop_virtual_table(conn, table)
    for view in FTS_VIEWS:
        conn.exec_driver_sql(f"DROP VIEW IF EXISTS {view}")
    if schema_object_exists(conn, "table", "state_meta"):
        _delete_meta(
            conn,
            REBUILD_HIGH_WATER_KEY, REBUILD_PROGRESS_KEY,
            CJK_REBUILD_HIGH_WATER_KEY, CJK_REBUILD_PROGRESS_KEY, *STALE,
        )


def _drop_virtual_table(conn: Connection, table: str) -> None:
    raw = _driver(conn)
    try:
        raw.execute(f"DROP TABLE {table}")
        return
    except sqlite3.DatabaseError as exc:
        if "no such tokenizer" not in str(exc) and not is_index_damage(exc):
            raise
        why = str(exc)
    # FTS5 must load the tokenizer and read the index's structure record even to drop
    # the table. Where it cannot, drop the shadow tables (ordinary tables) and remove
    # the table's own schema row by hand.
    log.warning("dropping %s by hand: FTS5 cannot open it here (%s)", table, why)
    for suffix in SHADOW_SUFFIXES:
        raw.execute(f"DROP TABLE IF EXISTS {table}{suffix}")
    raw.execute("PRAGMA writable_schema = ON")
    try:
        raw.execute("DELETE FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        # a new schema cookie: every connection, this one too, forgets the table
        cookie = raw.execute("PRAGMA schema_version").fetchone()[0]
        raw.execute(f"PRAGMA schema_version = {cookie + 1}")
    finally:
        raw.execute("PRAGMA writable_schema = OFF")


__all__ = [
    "CJK_REBUILD_HIGH_WATER_KEY", "CJK_REBUILD_PROGRESS_KEY", "CJK_SRC_VIEW",
    "CJK_STALE_KEY", "CJK_TABLE", "CJK_TOKENIZER", "CJK_TRIGGERS", "FTS_SRC_VIEW",
    "FTS_STALE_KEY", "FTS_STORAGE_VERSION", "FTS_STORAGE_VERSION_KEY", "FTS_TABLE",
    "FTS_TABLES", "FTS_TRIGGERS", "FTS_VIEWS", "REBUILD_HIGH_WATER_KEY",
    "REBUILD_PROGRESS_KEY", "SHADOW_SUFFIXES", "STALE", "TOOL_CONTENT_PREFIX_CHARS",
    "TRIGGERS", "TRIGRAM_EXCLUDED_SOURCES", "TRIGRAM_SRC_VIEW", "TRIGRAM_TABLE", "VIEWS",
    "VIRTUAL_TABLES", "attach", "base_gate", "cjk_ddl", "cjk_tokenizer_available", "create_fts",
    "detach", "drop_fts", "fts5_available", "indexed_content", "is_fts_object", "recreate",
    "schema_object_exists", "stamp_storage_version", "table_usable",
    "trigram_session_predicate"
]
