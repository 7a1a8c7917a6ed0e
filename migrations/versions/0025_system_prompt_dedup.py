"""v25: system prompts stored once, referenced by hash.

Upstream schema version 25 (PR #60852, merged via #77755), between releases 0.19.0 (v22)
and 0.20.x (v26).

Every session used to carry its full system prompt, mostly identical text repeated
thousands of times. ``system_prompts(hash, prompt)`` keeps each distinct prompt once;
``sessions.system_prompt_hash`` (foreign key, indexed) points at it and the inline
``sessions.system_prompt`` becomes NULL. Hash = SHA-256 hex of the prompt's UTF-8 bytes,
as upstream computes it, so files stay interchangeable. The data step walks sessions
in rowid batches (SQLite has no SHA-256 of its own): bounded memory whatever the file.
Unlike upstream, which stopped quietly on an error and resumed on the next open, the
step is all-or-nothing inside the revision's transaction.

Also (decision D6: attributed here, its exact version is unknown) the partial index
``idx_messages_assistant_calls_by_session`` on assistant rows that carry tool calls.

Downgrade puts every prompt back on ``sessions.system_prompt`` (one UPDATE ... SELECT),
then drops the hash column, its index and ``system_prompts``. A sessions table created
with the foreign key as a table constraint (head DDL written in one CREATE TABLE)
cannot drop the column directly; the constraint is first removed from the stored
CREATE text - the edit SQLite documents for dropping a constraint, which leaves the
stored rows untouched.
"""

from __future__ import annotations

import hashlib
import re

import sqlalchemy as sa
from alembic import op

from hermes_store.errors import SchemaError
from hermes_store.migrations import helpers

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

PROMPTS = "system_prompts"
HASH_COLUMN = "system_prompt_hash"
HASH_INDEX = "idx_sessions_system_prompt_hash"
CALLS_INDEX = "idx_messages_assistant_calls_by_session"
#: sessions per batch: small enough to keep memory flat with long prompts
BATCH_SIZE = 500

_IDENT = r'["`\[]?{}["`\]]?'
_TABLE_LEVEL_FK = re.compile(
    r",\s*(?:CONSTRAINT\s+\S+\s+)?FOREIGN\s+KEY\s*\(\s*" + _IDENT.format(HASH_COLUMN) + r"\s*\)"
    r"\s*REFERENCES\s+" + _IDENT.format(PROMPTS) + r"\s*\(\s*" + _IDENT.format("hash") + r"\s*\)"
    r"(?:\s+ON\s+(?:DELETE|UPDATE)\s+(?:SET\s+NULL|SET\s+DEFAULT|CASCADE|RESTRICT|NO\s+ACTION))*",
    re.IGNORECASE,
)


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def _move_prompts_to_table() -> int:
    bind = op.get_bind()
    select_batch = sa.text(
        "SELECT rowid, system_prompt FROM sessions "
        "WHERE system_prompt IS NOT NULL AND rowid > :after ORDER BY rowid LIMIT :n"
    )
    store = sa.text(f"INSERT OR IGNORE INTO {PROMPTS} (hash, prompt) VALUES (:hash, :prompt)")
    point = sa.text(
        f"UPDATE sessions SET {HASH_COLUMN} = :hash, system_prompt = NULL WHERE rowid = :rowid"
    )
    after, moved = -(2 ** 63), 0
    while True:
        batch = bind.execute(select_batch, {"after": after, "n": BATCH_SIZE}).fetchall()
        if not batch:
            return moved
        rows = [{"rowid": rowid, "prompt": prompt, "hash": prompt_hash(prompt)} for rowid, prompt in batch]
        bind.execute(store, rows)
        bind.execute(point, rows)
        moved += len(rows)
        after = batch[-1][0]


def upgrade() -> None:
    helpers.create_table(
        PROMPTS,
        sa.Column("hash", sa.Text(), primary_key=True, nullable=True),
        sa.Column("prompt", sa.Text(), nullable=False),
    )
    if not helpers.has_column("sessions", HASH_COLUMN):
        # Alembic cannot add a column with a foreign key on SQLite; SQLite itself can.
        op.execute(f"ALTER TABLE sessions ADD COLUMN {HASH_COLUMN} TEXT REFERENCES {PROMPTS}(hash)")
    helpers.create_index(HASH_INDEX, "sessions", [HASH_COLUMN])
    helpers.create_index(CALLS_INDEX, "messages", ["session_id"],
                         where="role = 'assistant' AND tool_calls IS NOT NULL")
    _move_prompts_to_table()


def _drop_table_level_foreign_key() -> None:
    bind = op.get_bind()
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'"
    ).scalar()
    stripped, found = _TABLE_LEVEL_FK.subn("", sql)
    if not found:
        return  # the key is declared on the column itself; DROP COLUMN handles that
    if found > 1:
        raise SchemaError(f"sessions declares {found} foreign keys on {HASH_COLUMN}; "
                          "cannot downgrade below v25 automatically")
    cookie = bind.exec_driver_sql("PRAGMA schema_version").scalar()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        bind.execute(sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = 'sessions'"),
                     {"sql": stripped})
        # A new cookie makes SQLite re-read the schema it was just told about.
        bind.exec_driver_sql(f"PRAGMA schema_version = {int(cookie) + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def downgrade() -> None:
    if helpers.has_column("sessions", HASH_COLUMN) and helpers.has_table(PROMPTS):
        op.execute(f"""
            UPDATE sessions
            SET system_prompt = (SELECT p.prompt FROM {PROMPTS} p WHERE p.hash = sessions.{HASH_COLUMN})
            WHERE system_prompt IS NULL AND {HASH_COLUMN} IS NOT NULL
        """)
    helpers.drop_index(CALLS_INDEX)
    helpers.drop_index(HASH_INDEX)
    if helpers.has_column("sessions", HASH_COLUMN):
        _drop_table_level_foreign_key()
        helpers.drop_columns("sessions", HASH_COLUMN)
    helpers.drop_table(PROMPTS)
