"""v15: ``idx_sessions_source_id(source, id)`` — list a source's sessions without a sort.

Upstream schema version: 15
Shipped in: between 0.16.0 (v14) and 0.17.0 (v16); no release was stamped 15

The only schema difference between 0.16.0 and 0.17.0 besides v16's data step is
this declared index, so decision D6 attributes v15 to it (it may also have been a
bump with no schema change).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from hermes_store.migrations import helpers as h

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    h.execute("CREATE INDEX IF NOT EXISTS idx_sessions_source_id ON sessions(source, id)")


def downgrade() -> None:
    h.drop_index("idx_sessions_source_id")
