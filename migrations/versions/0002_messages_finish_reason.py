"""v2: ``messages.finish_reason`` — why the model stopped (stop, length, tool_calls…).

Upstream schema version: 2
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    h.add_columns("messages", sa.Column("finish_reason", sa.Text))


def downgrade() -> None:
    h.drop_columns("messages", "finish_reason")
