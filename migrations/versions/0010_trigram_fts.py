"""v10: ``messages_fts_trigram`` — a trigram FTS5 index for CJK and substring search.

Upstream schema version: 10
Shipped in: before 0.13.0

The default unicode61 tokenizer splits CJK text into one-character tokens, so
phrase and substring queries fail; a trigram index matches any run of three or
more characters in any script (needs SQLite >= 3.34). Like v1's index it reads
its text from ``messages`` (external content) and is kept in step by three
triggers of the same pattern. Existing rows are indexed once with one
``INSERT … SELECT`` (bounded memory: SQLite streams the rows).

Upstream's delete/update trigger bodies for v10 are not preserved anywhere; they
mirror v1's, which is the only correct form for an external-content table.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from hermes_store.migrations import helpers as h

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TRIGRAM_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5("
    "content, content=messages, content_rowid=id, tokenize='trigram')"
)
TRIGRAM_TRIGGERS = {
    "messages_fts_trigram_insert": """
        CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
        END""",
    "messages_fts_trigram_delete": """
        CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
            VALUES ('delete', old.id, old.content);
        END""",
    "messages_fts_trigram_update": """
        CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update AFTER UPDATE ON messages BEGIN
            INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
            VALUES ('delete', old.id, old.content);
            INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
        END""",
}


def rebuild_fts(bind) -> None:
    """Re-derive both v1/v10 external-content indexes from ``messages``."""
    for table in ("messages_fts", "messages_fts_trigram"):
        bind.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('rebuild')")


def upgrade() -> None:
    if not h.has_table("messages_fts_trigram"):
        h.execute(TRIGRAM_TABLE)
        h.execute(
            "INSERT INTO messages_fts_trigram(rowid, content) "
            "SELECT id, content FROM messages WHERE content IS NOT NULL"
        )
    h.execute(list(TRIGRAM_TRIGGERS.values()))


def downgrade() -> None:
    h.drop_objects("TRIGGER", *TRIGRAM_TRIGGERS)
    h.drop_objects("TABLE", "messages_fts_trigram")
