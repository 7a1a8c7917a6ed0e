"""Telegram DM topic mode: the two opt-in tables.

Telegram DM topic schema version 1 (upstream's ``state_meta`` key
``telegram_dm_topic_schema_version`` = 1), the first shape (hermes-agent 0.19.0
already writes version 2 and rebuilds version-1 tables to it).

``telegram_dm_topic_mode`` holds one row per private chat that opted into ``/topic``;
``telegram_dm_topic_bindings`` maps a (chat, forum thread) to the Hermes session it
carries — a session is linked to one topic at most (unique index on ``session_id``).
Version 1's ``session_id`` key has no ``ON DELETE`` action: deleting a bound session
fails until the binding is removed (version 2 fixes that).

Upstream creates these tables only when a user opts in, never on open; this branch
keeps that: nothing runs it but an explicit call (see ``docs/migrations.md``).

Idempotent (D4): a table or index that already exists is left as it is.
Downgrade drops both tables (their row counts are logged); the branch's
``state_meta`` key goes with them (the branch's version hook).

Revision ID: t001
Revises: (branch base)
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "t001"
down_revision = None
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

MODE = "telegram_dm_topic_mode"
BINDINGS = "telegram_dm_topic_bindings"


def upgrade() -> None:
    helpers.create_table(
        MODE,
        sa.Column("chat_id", sa.Text(), nullable=True),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Integer(), nullable=False, server_default=sa.text("1")),
        sa.Column("activated_at", sa.REAL(), nullable=False),
        sa.Column("updated_at", sa.REAL(), nullable=False),
        sa.Column("has_topics_enabled", sa.Integer()),
        sa.Column("allows_users_to_create_topics", sa.Integer()),
        sa.Column("capability_checked_at", sa.REAL()),
        sa.Column("intro_message_id", sa.Text()),
        sa.Column("pinned_message_id", sa.Text()),
        sa.PrimaryKeyConstraint("chat_id"),
    )
    helpers.create_table(
        BINDINGS,
        sa.Column("chat_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("managed_mode", sa.Text(), nullable=False, server_default=sa.text("'auto'")),
        sa.Column("linked_at", sa.REAL(), nullable=False),
        sa.Column("updated_at", sa.REAL(), nullable=False),
        sa.PrimaryKeyConstraint("chat_id", "thread_id"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"]),
    )
    helpers.create_index(f"idx_{BINDINGS}_session", BINDINGS, ["session_id"], unique=True)
    helpers.create_index(f"idx_{BINDINGS}_user", BINDINGS, ["user_id", "chat_id"])


def downgrade() -> None:
    for table in (BINDINGS, MODE):
        if helpers.has_table(table):
            rows = op.get_bind().execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar()
            if rows:
                log.warning("downgrade to the branch base drops %s (%d rows)", table, rows)
            helpers.drop_table(table)
