"""v28: gateway heartbeats, session turn leases, FTS update triggers narrowed.

Upstream schema version 28; release 0.21.0 is stamped 28 (#101725 says main "had already
reached 28" on 2026-09-02). Split of v26-v28 per decision D6:

* ``gateway_heartbeats`` (#94895) - one row per running gateway backend;
* ``session_turn_leases`` + ``idx_session_turn_leases_expires`` - one turn at a time per
  conversation across processes;
* the FTS update triggers fire only ``AFTER UPDATE OF`` the columns they index
  (#68858/#73639): before, every update of any message column (``active``, token counts,
  ...) ran the trigger and its WHEN test. The index content does not change, so there is
  no rebuild; tables and views stay as at v23 (layout 1) - unless a rebuild is still
  pending from 0023 in a run that ends before 0030 (see 0023).

Downgrade drops the two tables and restores the v23 triggers.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import fts_history, helpers

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

#: 0030 rebuilds both indexes; a run going that far rebuilds once, there (see below)
LAST_REBUILD = "0030"

log = logging.getLogger(__name__)

TABLES = ("gateway_heartbeats", "session_turn_leases")
LEASE_INDEX = "idx_session_turn_leases_expires"


def rebuild_fts(bind) -> None:
    """Give the file this revision's FTS layout with both indexes re-derived from
    ``messages`` (adoption calls it when it had to repair FTS objects)."""
    fts_history.apply_layout(bind, fts_history.LAYOUT_1_V28,
                             rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE))


def upgrade() -> None:
    helpers.create_table(
        "gateway_heartbeats",
        sa.Column("backend_id", sa.Text(), primary_key=True, nullable=True),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.REAL(), nullable=False),
        sa.Column("last_heartbeat", sa.REAL(), nullable=False),
        sa.Column("profile", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("host", sa.Text(), nullable=False, server_default=sa.text("''")),
    )
    helpers.create_table(
        "session_turn_leases",
        sa.Column("conversation_id", sa.Text(), primary_key=True, nullable=True),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("acquired_at", sa.REAL(), nullable=False),
        sa.Column("expires_at", sa.REAL(), nullable=False),
    )
    helpers.create_index(LEASE_INDEX, "session_turn_leases", ["expires_at"])
    fts_history.apply_layout(op.get_bind(), fts_history.LAYOUT_1_V28,
                             defer=fts_history.run_reaches(LAST_REBUILD),
                             progress=fts_history.migration_progress())


def downgrade() -> None:
    fts_history.apply_layout(op.get_bind(), fts_history.LAYOUT_1_V23,
                             progress=fts_history.migration_progress())
    helpers.drop_index(LEASE_INDEX)
    for table in TABLES:
        if helpers.has_table(table):
            rows = op.get_bind().exec_driver_sql(f'SELECT COUNT(*) FROM "{table}"').scalar()
            if rows:
                log.warning("downgrade below v28 drops %s (%d rows)", table, rows)
        helpers.drop_table(table)
