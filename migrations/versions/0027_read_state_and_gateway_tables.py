"""v27: hidden/unread state, tool names, summary rows, gateway hygiene and generations.

Upstream schema version 27, between 0.20.x (v26) and 0.21.0 (v28); the split of
v26-v28 is decision D6 (no upstream gated block exists for it):

* ``sessions.hidden``, ``sessions.last_read_at`` (read/unread, commit ec0c8d9c20) and
  ``sessions.tool_names`` (the tools a session used, for filtering);
* ``messages._compressed_summary`` - marks the synthetic summary row of a compression;
* ``gateway_hygiene_state(session_key, failure_streak)`` - per-key failure streaks of the
  gateway's session hygiene;
* ``conversation_generations(source, session_key, generation)`` (#96811) - a counter per
  conversation key, never pruned by design.

Downgrade drops them; rows of the two tables are logged when dropped.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

TABLES = ("gateway_hygiene_state", "conversation_generations")


def upgrade() -> None:
    helpers.add_columns(
        "sessions",
        sa.Column("hidden", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_read_at", sa.REAL()),
        sa.Column("tool_names", sa.Text()),
    )
    helpers.add_columns(
        "messages",
        sa.Column("_compressed_summary", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    helpers.create_table(
        "gateway_hygiene_state",
        sa.Column("session_key", sa.Text(), primary_key=True, nullable=True),
        sa.Column("failure_streak", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    helpers.create_table(
        "conversation_generations",
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("source", "session_key"),
    )


def downgrade() -> None:
    for table in TABLES:
        if helpers.has_table(table):
            rows = op.get_bind().exec_driver_sql(f'SELECT COUNT(*) FROM "{table}"').scalar()
            if rows:
                log.warning("downgrade below v27 drops %s (%d rows)", table, rows)
        helpers.drop_table(table)
    helpers.drop_columns("messages", "_compressed_summary")
    helpers.drop_columns("sessions", "hidden", "last_read_at", "tool_names")
