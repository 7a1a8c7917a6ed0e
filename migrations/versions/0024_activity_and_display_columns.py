"""v24: activity heartbeat, pinning, display hints, a message paging index.

Upstream schema version 24, between releases 0.19.0 (v22) and 0.20.x (v26). No gated
block; the objects are those of the v24 source snapshot that v23 lacks (schema-history
section 1, v24):

* ``sessions.last_activity_at``, ``last_activity_description``,
  ``last_activity_provenance`` - the mid-turn heartbeat that list views sort by;
* ``sessions.compression_ineffective_count`` and ``sessions.pinned``;
* ``messages.display_kind`` and ``messages.display_metadata`` - how a row is shown;
* ``idx_messages_session_id(session_id, id)`` - paging a session in id order.

No data changes. Downgrade drops them.
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

INDEX = "idx_messages_session_id"


def _flag(name: str) -> sa.Column:
    return sa.Column(name, sa.Integer(), nullable=False, server_default=sa.text("0"))


def upgrade() -> None:
    helpers.add_columns(
        "sessions",
        sa.Column("last_activity_at", sa.REAL()),
        sa.Column("last_activity_description", sa.Text()),
        sa.Column("last_activity_provenance", sa.Text()),
        _flag("compression_ineffective_count"),
        _flag("pinned"),
    )
    helpers.add_columns("messages", sa.Column("display_kind", sa.Text()),
                        sa.Column("display_metadata", sa.Text()))
    helpers.create_index(INDEX, "messages", ["session_id", "id"])


def downgrade() -> None:
    helpers.drop_index(INDEX)
    helpers.drop_columns("messages", "display_kind", "display_metadata")
    helpers.drop_columns("sessions", "last_activity_at", "last_activity_description",
                         "last_activity_provenance", "compression_ineffective_count", "pinned")
