"""v1: the initial schema — sessions, messages and an external-content FTS5 index.

Upstream schema version: 1
Shipped in: before the first PyPI release (0.13.0 already ships v11)

``schema_version`` (one row by convention), ``sessions`` with a self-referencing
parent link, ``messages`` with an AUTOINCREMENT id (so ``sqlite_sequence`` exists),
four indexes, and ``messages_fts(content)`` kept in step with ``messages`` by three
triggers. The FTS table reads its text from ``messages`` (external content): the
index holds no copy of the text. Matches ``tests/data/v1-reference.schema.json``.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from hermes_store.migrations import helpers as h

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = {
    "schema_version": """
        CREATE TABLE schema_version (
            version INTEGER NOT NULL
        )""",
    "sessions": """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            user_id TEXT,
            model TEXT,
            model_config TEXT,
            system_prompt TEXT,
            parent_session_id TEXT,
            started_at REAL NOT NULL,
            ended_at REAL,
            end_reason TEXT,
            message_count INTEGER DEFAULT 0,
            tool_call_count INTEGER DEFAULT 0,
            input_tokens INTEGER DEFAULT 0,
            output_tokens INTEGER DEFAULT 0,
            FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
        )""",
    "messages": """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            role TEXT NOT NULL,
            content TEXT,
            tool_call_id TEXT,
            tool_calls TEXT,
            tool_name TEXT,
            timestamp REAL NOT NULL,
            token_count INTEGER
        )""",
}

INDEXES = [
    "CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC)",
    "CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp)",
]
INDEX_NAMES = ["idx_sessions_source", "idx_sessions_parent", "idx_sessions_started", "idx_messages_session"]

FTS_TABLE = "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content, content=messages, content_rowid=id)"
FTS_TRIGGERS = {
    "messages_fts_insert": """
        CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
        END""",
    "messages_fts_delete": """
        CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END""",
    "messages_fts_update": """
        CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
        END""",
}


def rebuild_fts(bind) -> None:
    """Re-derive the v1 index from ``messages`` (used when adoption repairs FTS)."""
    bind.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")


def upgrade() -> None:
    for name, ddl in TABLES.items():
        if not h.has_table(name):
            h.execute(ddl)
    h.execute(INDEXES)
    h.execute(FTS_TABLE)
    h.execute(list(FTS_TRIGGERS.values()))


def downgrade() -> None:
    h.drop_objects("TRIGGER", *FTS_TRIGGERS)
    h.drop_objects("TABLE", "messages_fts")
    h.drop_objects("INDEX", *INDEX_NAMES)
    # children before parents: messages references sessions
    h.drop_objects("TABLE", "messages", "sessions", "schema_version")
