"""v13: platform message ids — link a message to its id on the chat platform.

Upstream schema version: 13
Shipped in: 0.15.0 (also 0.15.1, 0.15.2)

``messages.platform_message_id`` (e.g. a Telegram message id), ``messages.observed``
(0/1: the message was seen on the platform rather than produced by the agent), and
the partial index ``idx_messages_platform_msg_id(session_id, platform_message_id)
WHERE platform_message_id IS NOT NULL`` for lookups by platform id. No data
migration. (Which of these belonged to v12 vs v13 upstream is not recoverable;
decision D6 puts them all here.)

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    h.add_columns(
        "messages",
        sa.Column("platform_message_id", sa.Text),
        sa.Column("observed", sa.Integer, server_default=sa.text("0")),
    )
    h.execute(
        "CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id "
        "ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL"
    )


def downgrade() -> None:
    h.drop_index("idx_messages_platform_msg_id")
    h.drop_columns("messages", "platform_message_id", "observed")
