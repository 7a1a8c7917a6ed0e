"""v11: FTS re-index — both indexes become inline tables over content + tool name + tool calls.

Upstream schema version: 11
Shipped in: 0.13.0 (also 0.14.0) — the first PyPI release (upstream issue #16751)

Searching for a tool by name or for text inside tool-call arguments found nothing,
because v1/v10 indexed ``content`` only. Upstream dropped the six triggers and both
external-content tables and recreated them as *inline* (self-contained, one column)
FTS5 tables whose single column holds
``COALESCE(content,'') || ' ' || COALESCE(tool_name,'') || ' ' || COALESCE(tool_calls,'')``.
Deletes become plain ``DELETE … WHERE rowid = old.id``; updates are delete + insert.
Both indexes are backfilled from every message with one ``INSERT … SELECT`` each.

Also part of the v11 shape (declared without a bump of their own):
``sessions.handoff_state``, ``handoff_platform``, ``handoff_error``.

After ``upgrade 0011`` an empty file has the schema of a fresh hermes-agent 0.13.0
file (``upstream-0.13.0-v11.schema.json``).

Downgrade restores the v10 external-content layout and re-derives both indexes
with the FTS5 ``'rebuild'`` command.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

from hermes_store.migrations import helpers as h

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

FTS_TABLES = ("messages_fts", "messages_fts_trigram")
TRIGGER_NAMES = [f"{t}_{event}" for t in FTS_TABLES for event in ("insert", "delete", "update")]

# What both v11 indexes store for a message: its text, tool name and tool calls.
_INDEXED_TEXT = (
    "COALESCE({r}content, '') || ' ' || COALESCE({r}tool_name, '') || ' ' || "
    "COALESCE({r}tool_calls, '')"
)


def _inline_ddl(table: str, tokenize: str | None) -> list[str]:
    options = f", tokenize='{tokenize}'" if tokenize else ""
    new_text = _INDEXED_TEXT.format(r="new.")
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(content{options})",
        f"""CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages BEGIN
            INSERT INTO {table}(rowid, content) VALUES (new.id, {new_text});
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages BEGIN
            DELETE FROM {table} WHERE rowid = old.id;
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE ON messages BEGIN
            DELETE FROM {table} WHERE rowid = old.id;
            INSERT INTO {table}(rowid, content) VALUES (new.id, {new_text});
        END""",
    ]


INLINE_FTS = {"messages_fts": _inline_ddl("messages_fts", None),
              "messages_fts_trigram": _inline_ddl("messages_fts_trigram", "trigram")}

# The v10 layout, frozen here for the downgrade (revisions never import each other).
_V10_TABLES = {
    "messages_fts": "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=id)",
    "messages_fts_trigram": (
        "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5("
        "content, content=messages, content_rowid=id, tokenize='trigram')"
    ),
}


def _v10_triggers(table: str) -> list[str]:
    return [
        f"""CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN
            INSERT INTO {table}(rowid, content) VALUES (new.id, new.content);
        END""",
        f"""CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN
            INSERT INTO {table}({table}, rowid, content) VALUES ('delete', old.id, old.content);
        END""",
        f"""CREATE TRIGGER {table}_update AFTER UPDATE ON messages BEGIN
            INSERT INTO {table}({table}, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO {table}(rowid, content) VALUES (new.id, new.content);
        END""",
    ]


HANDOFF_COLUMNS = ["handoff_state", "handoff_platform", "handoff_error"]


def _backfill(bind, table: str) -> None:
    bind.exec_driver_sql(
        f"INSERT INTO {table}(rowid, content) SELECT id, {_INDEXED_TEXT.format(r='')} FROM messages"
    )


def rebuild_fts(bind) -> None:
    """Re-fill both inline v11 indexes from ``messages`` (used when adoption repairs FTS).

    The old index is dropped, not emptied: a DELETE re-tokenizes every stored row to find
    its entries, and an index another SQLite built does not always hold them (before
    3.44 the tokenizers stopped at a NUL, as in upstream's ``\x00json:`` rows), which
    SQLite then reports as a malformed database."""
    for table in FTS_TABLES:
        bind.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        bind.exec_driver_sql(INLINE_FTS[table][0])
        _backfill(bind, table)


def _is_inline(table: str) -> bool:
    sql = op.get_bind().exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type='table' AND name=?", (table,)
    ).scalar()
    return sql is not None and "content=" not in sql.replace(" ", "").lower()


def upgrade() -> None:
    bind = op.get_bind()
    h.add_columns("sessions", *(sa.Column(name, sa.Text) for name in HANDOFF_COLUMNS))
    if all(_is_inline(t) for t in FTS_TABLES):
        # Already the v11 layout: only make sure every trigger is there.
        for ddl in INLINE_FTS.values():
            h.execute(ddl[1:])
        return
    h.drop_objects("TRIGGER", *TRIGGER_NAMES)
    h.drop_objects("TABLE", *FTS_TABLES)
    for table, ddl in INLINE_FTS.items():
        h.execute(ddl[0])
        _backfill(bind, table)
        h.execute(ddl[1:])


def downgrade() -> None:
    bind = op.get_bind()
    h.drop_objects("TRIGGER", *TRIGGER_NAMES)
    h.drop_objects("TABLE", *FTS_TABLES)
    for table in FTS_TABLES:
        h.execute(_V10_TABLES[table])
        bind.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        h.execute(_v10_triggers(table))
    h.drop_columns("sessions", *HANDOFF_COLUMNS)
