"""v12: ``messages.active`` — soft delete for rewind/undo.

Upstream schema version: 12
Shipped in: 0.16.0 (stamped 14). Released out of order: 0.15.x is already stamped 13
and has no ``active`` column; the v12 block first ships with 0.16.0.

``active INTEGER NOT NULL DEFAULT 1`` (rewound rows become 0 and drop out of the
transcript), every NULL healed to 1 (older upstream builds added the column
without its default, so rows written then are NULL and would vanish from
``WHERE active = 1`` readers — upstream #51646), and the index
``idx_messages_session_active(session_id, active, timestamp)`` the transcript
loaders use.

Attribution (decision D6): upstream never said which of v12/v13 owned what; we
give ``active`` to v12 as the 0.16.0 code comment does. So ``upgrade 0013`` has
``active`` while a real 0.15.x file (stamped 13) does not — adoption adds it.

``heal_rows`` is the NULL→1 heal on its own: upstream runs it on every open (the rows
were written at v12+ by its pre-fix INSERTs), so adoption runs it on a file at v12 or
later (adopt.py), which this upgrade never sees again.

Downgrade drops the index and the column (the NULL→1 heal has nothing to give
back once the column is gone).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


HEAL_NULL_ACTIVE = "UPDATE messages SET active = 1 WHERE active IS NULL"


def heal_rows(conn) -> None:
    """``active`` NULL→1 (a connection of the adoption's transaction)."""
    conn.exec_driver_sql(HEAL_NULL_ACTIVE)


def upgrade() -> None:
    h.add_columns(
        "messages", sa.Column("active", sa.Integer, nullable=False, server_default=sa.text("1"))
    )
    h.execute(HEAL_NULL_ACTIVE)
    h.execute(
        "CREATE INDEX IF NOT EXISTS idx_messages_session_active "
        "ON messages(session_id, active, timestamp)"
    )


def downgrade() -> None:
    h.drop_index("idx_messages_session_active")
    h.drop_columns("messages", "active")
