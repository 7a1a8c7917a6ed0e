"""v8: ``sessions.api_call_count`` — number of model API calls in the session.

Upstream schema version: 8
Shipped in: before 0.13.0 (the pre-v11 ALTER chain; was v7 before the renumbering)

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    h.add_columns("sessions", sa.Column("api_call_count", sa.Integer, server_default=sa.text("0")))


def downgrade() -> None:
    h.drop_columns("sessions", "api_call_count")
