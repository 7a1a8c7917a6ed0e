"""v3: ``sessions.title`` — a human-readable session name.

Upstream schema version: 3
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    h.add_columns("sessions", sa.Column("title", sa.Text))


def downgrade() -> None:
    h.drop_columns("sessions", "title")
