"""Full-text search on PostgreSQL: the head layout beside the SQLite one (decision D12).

The two indexes keep the names and the scope of SQLite's layout 3
(``hermes_store.fts.layout``; SQLite's FTS5 DDL is ``backends/sqlite/fts/ddl.py``):

``messages_fts`` — the word index
    A GIN index on ``messages.fts_document``, a ``tsvector`` column PostgreSQL computes
    itself (``GENERATED ALWAYS AS … STORED``) from the row: ``content`` (a tool row's
    first ``TOOL_CONTENT_PREFIX_CHARS`` characters only), ``tool_name`` and
    ``tool_calls``. Configuration ``simple``: lower-casing, no stemming, no stop words,
    as FTS5's unicode61. Before parsing, every run of characters that is not a letter
    or a digit becomes one space, so a document splits into the tokens unicode61 makes
    (``snake_case``, ``my-app.config.ts`` and ``P2.2`` are several words, not one host
    or version token as PostgreSQL's parser would make them).
``messages_fts_trigram`` — the substring / CJK index
    A ``pg_trgm`` GIN index on ``content`` and ``tool_name`` (the expression
    ``hermes_trigram_document(content, tool_name)``), partial: only rows whose
    ``messages.fts_trigram_scope`` is true — not a tool row, and the session is not
    ``cron``/``subagent`` and not a delegate run (``model_config._delegate_from``).
    Triggers keep that flag right: on every message insert (or change of role or
    session) and when a session's ``source`` or ``model_config`` changes (SQLite has no
    trigger on ``sessions``; here the flag never goes stale).

Compacted and rewound rows stay in both indexes: visibility is a query filter.

Why a maintained column for the words and an expression for the trigrams (the
measurements: docs/postgres.md): a ranked or phrase query must read the ``tsvector``
of the candidates it ranks (``ts_rank``, and the word order of ``<->``), which an
expression index recomputes for each; a stored generated column is recomputed only when
one of its source columns changes (flag and counter updates do not pay). A trigram
recheck only evaluates ``ILIKE`` on the row's text, so an expression index costs nothing
extra there. The session rule needs another table, which neither an index predicate nor
a generated column may read: hence the trigger-kept flag.

A ``tsvector`` holds at most 1 MiB: ``hermes_fts_vector`` indexes a document that would
exceed it by its longest prefix that fits (such a message is still stored whole). Word
positions above 16,383 are clamped by PostgreSQL, so a phrase deep inside a huge
message can match loosely.

Functions the layout creates (``public`` schema, or the connection's ``search_path``):
``hermes_fts_vector(text)``, ``hermes_fts_document(role, content, tool_name, tool_calls)``,
``hermes_trigram_document(content, tool_name)``, ``hermes_json_text(doc, key)`` (a
top-level JSON key as text, NULL for malformed JSON — SQLite's ``json_valid``-guarded
``json_extract``; the repository's ``json_text`` compiles to it),
``hermes_trigram_session_ok(source, model_config)`` and the two trigger functions.

Public API (``conn`` is a SQLAlchemy ``Connection`` on PostgreSQL; nothing commits):
``create_fts(conn)``, ``drop_fts(conn)``, ``is_fts_object(name)``, and the names below.
Upkeep (``rebuild``, ``integrity_check``, ``optimize``, ``fts_sizes``) is the
PostgreSQL backend's ``*_fts`` (``hermes_store.fts.maintenance`` on this engine).
"""

from __future__ import annotations


from sqlalchemy.engine import Connection

from ....fts.layout import (
    FTS_TABLE,
    TOOL_CONTENT_PREFIX_CHARS,
    TRIGRAM_EXCLUDED_SOURCES,
    TRIGRAM_TABLE,
)
from ..codec import sql_c_string_head, sql_json_as_sqlite_reads_it


#: text search configuration of the word index (no stemming, like unicode61)
TS_CONFIG = "simple"
#: the generated tsvector column and the trigram-scope flag on ``messages``
DOCUMENT_COLUMN = "fts_document"
TRIGRAM_SCOPE_COLUMN = "fts_trigram_scope"
FTS_COLUMNS = (DOCUMENT_COLUMN, TRIGRAM_SCOPE_COLUMN)
#: index names: the SQLite FTS5 table names, so both heads name their indexes alike
WORD_INDEX = FTS_TABLE
TRIGRAM_INDEX = TRIGRAM_TABLE
FTS_INDEXES = (WORD_INDEX, TRIGRAM_INDEX)
#: the extension the trigram index needs
EXTENSION = "pg_trgm"

VECTOR_FUNCTION = "hermes_fts_vector"
DOCUMENT_FUNCTION = "hermes_fts_document"
TRIGRAM_DOCUMENT_FUNCTION = "hermes_trigram_document"
JSON_TEXT_FUNCTION = "hermes_json_text"
SESSION_OK_FUNCTION = "hermes_trigram_session_ok"
MESSAGE_SCOPE_FUNCTION = "hermes_messages_fts_trigram_scope"
SESSION_SCOPE_FUNCTION = "hermes_sessions_fts_trigram_scope"
FTS_FUNCTIONS = (
    VECTOR_FUNCTION, DOCUMENT_FUNCTION, TRIGRAM_DOCUMENT_FUNCTION, JSON_TEXT_FUNCTION,
    SESSION_OK_FUNCTION, MESSAGE_SCOPE_FUNCTION, SESSION_SCOPE_FUNCTION,
)
MESSAGE_SCOPE_TRIGGER = "messages_fts_trigram_scope"
SESSION_SCOPE_TRIGGER = "sessions_fts_trigram_scope"
FTS_TRIGGERS = (MESSAGE_SCOPE_TRIGGER, SESSION_SCOPE_TRIGGER)

#: a document up to this many bytes always fits a tsvector (after the separator
#: rewrite each token costs at most 5x its bytes): no fallback needed below it
VECTOR_FAST_BYTES = 131072

_SOURCES = ", ".join(f"'{s}'" for s in TRIGRAM_EXCLUDED_SOURCES)

# One statement per entry, in creation order. Functions first (the column and the
# indexes use them), then the columns, triggers and indexes.
FUNCTIONS = {
    VECTOR_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {VECTOR_FUNCTION}(doc text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    words text := regexp_replace(doc, '[^[:alnum:]]+', ' ', 'g');
    n integer;
BEGIN
    IF octet_length(words) <= {VECTOR_FAST_BYTES} THEN
        RETURN to_tsvector('{TS_CONFIG}'::regconfig, words);
    END IF;
    n := length(words);
    LOOP
        BEGIN
            RETURN to_tsvector('{TS_CONFIG}'::regconfig, left(words, n));
        EXCEPTION WHEN program_limit_exceeded THEN
            n := n * 3 / 4;  -- longer than a tsvector holds: index the longest prefix that fits
        END;
    END LOOP;
END $$""",
    # SQL functions that call ours have SQL-standard bodies (RETURN …): parsed when
    # created, so the call is bound to the function itself and not looked up by name
    # later — pg_restore runs with an empty search_path, and a quoted body ($$ … $$)
    # calling hermes_fts_vector() unqualified failed to restore the messages table.
    DOCUMENT_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {DOCUMENT_FUNCTION}(
    role text, content text, tool_name text, tool_calls text
) RETURNS tsvector
LANGUAGE sql IMMUTABLE
RETURN {VECTOR_FUNCTION}(
    CASE WHEN role = 'tool' THEN {sql_c_string_head("coalesce(content, '')", TOOL_CONTENT_PREFIX_CHARS)}
         ELSE coalesce(content, '') END
    || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))""",
    TRIGRAM_DOCUMENT_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {TRIGRAM_DOCUMENT_FUNCTION}(content text, tool_name text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(content, '') || coalesce(' ' || tool_name, '')
$$""",
    JSON_TEXT_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {JSON_TEXT_FUNCTION}(doc text, key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF doc IS NULL OR strpos(doc, key) = 0 THEN
        RETURN NULL;  -- most rows: no parse at all
    END IF;
    BEGIN
        RETURN (doc::json) ->> key;
    EXCEPTION WHEN others THEN
        RETURN NULL;  -- malformed JSON reads as "no such key", as SQLite's json_valid guard
    END;
END $$""",
    SESSION_OK_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {SESSION_OK_FUNCTION}(source text, model_config text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN source NOT IN ({_SOURCES})
   AND {JSON_TEXT_FUNCTION}({sql_json_as_sqlite_reads_it("model_config")}, '_delegate_from') IS NULL""",
    MESSAGE_SCOPE_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {MESSAGE_SCOPE_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.{TRIGRAM_SCOPE_COLUMN} := NEW.role <> 'tool' AND EXISTS (
        SELECT 1 FROM sessions AS s
        WHERE s.id = NEW.session_id AND {SESSION_OK_FUNCTION}(s.source, s.model_config));
    RETURN NEW;
END $$""",
    SESSION_SCOPE_FUNCTION: f"""
CREATE OR REPLACE FUNCTION {SESSION_SCOPE_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    session_ok boolean := {SESSION_OK_FUNCTION}(NEW.source, NEW.model_config);
BEGIN
    UPDATE messages SET {TRIGRAM_SCOPE_COLUMN} = (role <> 'tool' AND session_ok)
    WHERE session_id = NEW.id
      AND {TRIGRAM_SCOPE_COLUMN} IS DISTINCT FROM (role <> 'tool' AND session_ok);
    RETURN NULL;
END $$""",
}

COLUMNS = {
    DOCUMENT_COLUMN: f"""
ALTER TABLE messages ADD COLUMN IF NOT EXISTS {DOCUMENT_COLUMN} tsvector
GENERATED ALWAYS AS ({DOCUMENT_FUNCTION}(role, content, tool_name, tool_calls)) STORED""",
    TRIGRAM_SCOPE_COLUMN: f"""
ALTER TABLE messages ADD COLUMN IF NOT EXISTS {TRIGRAM_SCOPE_COLUMN} boolean
NOT NULL DEFAULT false""",
}

TRIGGERS = {
    MESSAGE_SCOPE_TRIGGER: f"""
CREATE OR REPLACE TRIGGER {MESSAGE_SCOPE_TRIGGER}
BEFORE INSERT OR UPDATE OF role, session_id ON messages
FOR EACH ROW EXECUTE FUNCTION {MESSAGE_SCOPE_FUNCTION}()""",
    SESSION_SCOPE_TRIGGER: f"""
CREATE OR REPLACE TRIGGER {SESSION_SCOPE_TRIGGER}
AFTER UPDATE OF source, model_config ON sessions
FOR EACH ROW
WHEN (OLD.source IS DISTINCT FROM NEW.source OR OLD.model_config IS DISTINCT FROM NEW.model_config)
EXECUTE FUNCTION {SESSION_SCOPE_FUNCTION}()""",
}

INDEXES = {
    WORD_INDEX: f"""
CREATE INDEX IF NOT EXISTS {WORD_INDEX} ON messages USING gin ({DOCUMENT_COLUMN})""",
    TRIGRAM_INDEX: f"""
CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON messages
USING gin ({TRIGRAM_DOCUMENT_FUNCTION}(content, tool_name) gin_trgm_ops)
WHERE {TRIGRAM_SCOPE_COLUMN}""",
}

#: the trigram scope of one message row, as SQL over ``messages`` (alias ``m``) — what
#: the triggers maintain; ``rebuild`` and ``integrity_check`` recompute it
SCOPE_OF_ROW = (
    f"(m.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions AS s WHERE s.id = m.session_id "
    f"AND {SESSION_OK_FUNCTION}(s.source, s.model_config)))"
)


def is_fts_object(name: str) -> bool:
    """True for the PostgreSQL FTS objects: the two indexes, the two maintained
    columns, the functions and triggers (what schema comparison must leave out)."""
    return name in FTS_INDEXES or name in FTS_COLUMNS or name in FTS_FUNCTIONS \
        or name in FTS_TRIGGERS


def create_fts(conn: Connection, *, indexes: bool = True) -> None:
    """Create the head FTS layout where missing (idempotent).

    Adding the columns to a table that has rows fills them (PostgreSQL computes the
    generated column; the scope flag is then set from the sessions). ``indexes=False``
    leaves the two GIN indexes out, for a bulk load that builds them afterwards
    (:func:`create_indexes`).
    """
    conn.exec_driver_sql(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}")
    for ddl in FUNCTIONS.values():
        conn.exec_driver_sql(ddl)
    had_scope = has_column(conn, TRIGRAM_SCOPE_COLUMN)
    for ddl in COLUMNS.values():
        conn.exec_driver_sql(ddl)
    for ddl in TRIGGERS.values():
        conn.exec_driver_sql(ddl)
    if not had_scope:
        refresh_scope(conn)
    if indexes:
        create_indexes(conn)


def create_indexes(conn: Connection) -> None:
    for ddl in INDEXES.values():
        conn.exec_driver_sql(ddl)


def drop_indexes(conn: Connection) -> None:
    for name in FTS_INDEXES:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")


def drop_fts(conn: Connection) -> None:
    """Drop the whole FTS layer: indexes, triggers, columns, functions (not pg_trgm)."""
    drop_indexes(conn)
    conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {MESSAGE_SCOPE_TRIGGER} ON messages")
    conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {SESSION_SCOPE_TRIGGER} ON sessions")
    for column in FTS_COLUMNS:
        conn.exec_driver_sql(f"ALTER TABLE messages DROP COLUMN IF EXISTS {column}")
    for name in reversed(FTS_FUNCTIONS):
        conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {name} CASCADE")


def has_column(conn: Connection, column: str) -> bool:
    return conn.exec_driver_sql(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'messages' AND column_name = %(c)s", {"c": column},
    ).first() is not None


def refresh_scope(conn: Connection) -> int:
    """Set every row's trigram-scope flag from its session; returns the rows changed."""
    return conn.exec_driver_sql(
        f"UPDATE messages AS m SET {TRIGRAM_SCOPE_COLUMN} = {SCOPE_OF_ROW} "
        f"WHERE m.{TRIGRAM_SCOPE_COLUMN} IS DISTINCT FROM {SCOPE_OF_ROW}"
    ).rowcount


# --------------------------------------------------------------------------- upkeep



__all__ = [
    "SCOPE_OF_ROW",
    "has_column",
    "refresh_scope",
    "DOCUMENT_COLUMN",
    "EXTENSION",
    "FTS_COLUMNS",
    "FTS_FUNCTIONS",
    "FTS_INDEXES",
    "FTS_TRIGGERS",
    "JSON_TEXT_FUNCTION",
    "TRIGRAM_DOCUMENT_FUNCTION",
    "TRIGRAM_INDEX",
    "TRIGRAM_SCOPE_COLUMN",
    "TS_CONFIG",
    "WORD_INDEX",
    "create_fts",
    "create_indexes",
    "drop_fts",
    "drop_indexes",
    "is_fts_object",
]
