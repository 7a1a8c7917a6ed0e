"""v6: reasoning columns on ``messages`` — the model's reasoning text and its structured forms.

Upstream schema version: 6
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

``reasoning`` (text), ``reasoning_details`` and ``codex_reasoning_items`` (JSON text).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = ["reasoning", "reasoning_details", "codex_reasoning_items"]


def upgrade() -> None:
    h.add_columns("messages", *(sa.Column(name, sa.Text) for name in COLUMNS))


def downgrade() -> None:
    h.drop_columns("messages", *COLUMNS)
