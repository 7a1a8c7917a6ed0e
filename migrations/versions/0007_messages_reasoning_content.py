"""v7: ``messages.reasoning_content`` — provider-native reasoning text.

Upstream schema version: 7
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

Upstream renumbered here (April 2026): v7 was first ``api_call_count``, then this
column was inserted as v7 and ``api_call_count`` moved to v8. Files stamped 7 under
the old numbering lack this column; adoption adds it (revision 0007's shape has it).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    h.add_columns("messages", sa.Column("reasoning_content", sa.Text))


def downgrade() -> None:
    h.drop_columns("messages", "reasoning_content")
