"""v21: durable async delegations, message effect/API columns, compression streak, profile.

Upstream schema version 21, between releases 0.18.1 (v19) and 0.19.0 (v22). Upstream has
no gated block for 21; which object owned the bump is unknown, so this revision takes
everything 0.19.0 has that 0.18.1 lacks besides the usage table (decision D6):

* ``async_delegations`` - background delegations survive a restart (before 0.19.0 their
  state lived in memory only) - with ``idx_async_delegations_delivery`` for the delivery
  sweep;
* ``messages.effect_disposition`` and ``messages.api_content`` (what was sent to the
  provider when it differs from the displayed content);
* ``sessions.compression_fallback_streak`` and ``sessions.profile_name``.

Downgrade drops them; the number of delegation rows dropped is logged.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

TABLE = "async_delegations"
INDEX = "idx_async_delegations_delivery"


def upgrade() -> None:
    helpers.create_table(
        TABLE,
        sa.Column("delegation_id", sa.Text(), primary_key=True, nullable=True),
        sa.Column("origin_session", sa.Text(), nullable=False),
        sa.Column("origin_ui_session_id", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("parent_session_id", sa.Text()),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("dispatched_at", sa.REAL(), nullable=False),
        sa.Column("completed_at", sa.REAL()),
        sa.Column("updated_at", sa.REAL(), nullable=False),
        sa.Column("event_json", sa.Text()),
        sa.Column("result_json", sa.Text()),
        sa.Column("delivery_state", sa.Text(), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("delivery_attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("delivered_at", sa.REAL()),
        sa.Column("owner_pid", sa.Integer()),
        sa.Column("owner_started_at", sa.Integer()),
        sa.Column("task_json", sa.Text()),
        sa.Column("delivery_claim", sa.Text()),
        sa.Column("delivery_claimed_at", sa.REAL()),
    )
    helpers.create_index(INDEX, TABLE, ["delivery_state", "completed_at"])
    helpers.add_columns("messages", sa.Column("effect_disposition", sa.Text()),
                        sa.Column("api_content", sa.Text()))
    helpers.add_columns(
        "sessions",
        sa.Column("compression_fallback_streak", sa.Integer(), nullable=False,
                  server_default=sa.text("0")),
        sa.Column("profile_name", sa.Text()),
    )


def downgrade() -> None:
    helpers.drop_columns("sessions", "compression_fallback_streak", "profile_name")
    helpers.drop_columns("messages", "effect_disposition", "api_content")
    if helpers.has_table(TABLE):
        rows = op.get_bind().exec_driver_sql(f"SELECT COUNT(*) FROM {TABLE}").scalar()
        if rows:
            log.warning("downgrade below v21 drops %s (%d rows): v20 kept delegations in memory",
                        TABLE, rows)
    helpers.drop_index(INDEX)
    helpers.drop_table(TABLE)
