"""Telegram DM topic bindings: ``session_id`` gets ``ON DELETE CASCADE``.

Telegram DM topic schema version 2 (upstream's ``state_meta`` key
``telegram_dm_topic_schema_version`` = 2), shipped in hermes-agent 0.19.0.

With version 1's plain key, deleting or pruning a session that a topic was bound to
failed on the foreign key. Version 2 lets the binding go with its session. A foreign
key cannot be altered in SQLite, so the table is rebuilt (as upstream does): create
the new shape, copy every row, drop the old table, rename, re-create both indexes.

Rows whose session no longer exists (possible only where foreign keys were off when
the session was deleted) cannot satisfy the new key: they are not copied, and their
number is logged. Every other row is kept unchanged.

Idempotent (D4): a table whose key already cascades is left as it is.
Downgrade rebuilds the table back to the plain key; every row is kept.

Revision ID: t002
Revises: t001
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "t002"
down_revision = "t001"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

BINDINGS = "telegram_dm_topic_bindings"
COLUMNS = ("chat_id", "thread_id", "user_id", "session_key", "session_id",
           "managed_mode", "linked_at", "updated_at")


def _session_key_cascades() -> bool:
    # SQLite's own record of the key: SQLAlchemy's reflection drops the ON DELETE of a
    # key declared inline, which is how upstream declares this one.
    rows = op.get_bind().exec_driver_sql(f"PRAGMA foreign_key_list('{BINDINGS}')").fetchall()
    return any(r[2] == "sessions" and (r[6] or "").upper() == "CASCADE" for r in rows)


def _rebuild(*, cascade: bool) -> None:
    new = f"{BINDINGS}_new"
    op.create_table(
        new,
        sa.Column("chat_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("managed_mode", sa.Text(), nullable=False, server_default=sa.text("'auto'")),
        sa.Column("linked_at", sa.REAL(), nullable=False),
        sa.Column("updated_at", sa.REAL(), nullable=False),
        sa.PrimaryKeyConstraint("chat_id", "thread_id"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], ondelete="CASCADE" if cascade else None
        ),
    )
    columns = ", ".join(COLUMNS)
    bind = op.get_bind()
    total = bind.execute(sa.text(f"SELECT count(*) FROM {BINDINGS}")).scalar()
    copied = 0
    if total:  # (adoption replays this revision on a scratch database without sessions)
        copied = bind.execute(sa.text(
            f"INSERT INTO {new} ({columns}) SELECT {columns} FROM {BINDINGS} "
            f"WHERE session_id IN (SELECT id FROM sessions)"
        )).rowcount
    if copied != total:
        log.warning(
            "%s: %d binding(s) of sessions that no longer exist were not kept "
            "(the rebuilt table's key refuses them)", BINDINGS, total - copied,
        )
    op.drop_table(BINDINGS)
    op.rename_table(new, BINDINGS)
    op.create_index(f"idx_{BINDINGS}_session", BINDINGS, ["session_id"], unique=True)
    op.create_index(f"idx_{BINDINGS}_user", BINDINGS, ["user_id", "chat_id"])


def upgrade() -> None:
    if helpers.has_table(BINDINGS) and not _session_key_cascades():
        _rebuild(cascade=True)


def downgrade() -> None:
    if helpers.has_table(BINDINGS) and _session_key_cascades():
        _rebuild(cascade=False)
