"""v20: per-model usage attribution, seeded from the session totals.

Upstream schema version 20 (#51607), between releases 0.18.1 (v19) and 0.19.0 (v22).

``session_model_usage`` holds one row per session x model x billing route, so a session
that switched models mid-way is accounted per model. At v20/v21 its primary key is the
five columns ``(session_id, model, billing_provider, billing_base_url, billing_mode)``;
v22 adds ``task`` to it (revision 0022).

Data: sessions written before only have aggregate totals on their row. One usage row is
seeded per session whose token total is above zero (model ``'unknown'`` when NULL, empty
billing route parts, counters and costs with NULL as 0, ``first_seen = started_at``,
``last_seen = COALESCE(ended_at, started_at)``). One ``INSERT OR IGNORE ... SELECT``:
bounded memory, and rows newer code already wrote for the same key win over the seed.

Idempotent (D4): a file may already hold the table (in its 5- or 6-column key shape);
it is kept and only seeded.

Downgrade drops the table. Its rows have no place in the v19 schema; the session totals
they were seeded from are still on the sessions rows. The number of rows dropped is
logged.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

TABLE = "session_model_usage"
INDEXES = (
    ("idx_session_model_usage_session", ["session_id"]),
    ("idx_session_model_usage_model", ["model"]),
)

_TOKEN_TOTAL = (
    "COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0) + COALESCE(cache_read_tokens, 0)"
    " + COALESCE(cache_write_tokens, 0) + COALESCE(reasoning_tokens, 0)"
)


def _counter(name: str) -> sa.Column:
    return sa.Column(name, sa.Integer(), nullable=False, server_default=sa.text("0"))


def _route(name: str) -> sa.Column:
    return sa.Column(name, sa.Text(), nullable=False, server_default=sa.text("''"))


def upgrade() -> None:
    helpers.create_table(
        TABLE,
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        _route("billing_provider"),
        _route("billing_base_url"),
        _route("billing_mode"),
        _counter("api_call_count"),
        _counter("input_tokens"),
        _counter("output_tokens"),
        _counter("cache_read_tokens"),
        _counter("cache_write_tokens"),
        _counter("reasoning_tokens"),
        sa.Column("estimated_cost_usd", sa.REAL(), nullable=False, server_default=sa.text("0")),
        sa.Column("actual_cost_usd", sa.REAL(), nullable=False, server_default=sa.text("0")),
        sa.Column("cost_status", sa.Text()),
        sa.Column("cost_source", sa.Text()),
        sa.Column("first_seen", sa.REAL()),
        sa.Column("last_seen", sa.REAL()),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_id", "model", "billing_provider", "billing_base_url",
                                "billing_mode"),
    )
    for name, columns in INDEXES:
        helpers.create_index(name, TABLE, columns)
    op.execute(f"""
        INSERT OR IGNORE INTO {TABLE} (
            session_id, model, billing_provider, billing_base_url, billing_mode,
            api_call_count, input_tokens, output_tokens, cache_read_tokens,
            cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd,
            cost_status, cost_source, first_seen, last_seen
        )
        SELECT id, COALESCE(model, 'unknown'),
               COALESCE(billing_provider, ''), COALESCE(billing_base_url, ''),
               COALESCE(billing_mode, ''),
               COALESCE(api_call_count, 0), COALESCE(input_tokens, 0),
               COALESCE(output_tokens, 0), COALESCE(cache_read_tokens, 0),
               COALESCE(cache_write_tokens, 0), COALESCE(reasoning_tokens, 0),
               COALESCE(estimated_cost_usd, 0), COALESCE(actual_cost_usd, 0),
               cost_status, cost_source, started_at, COALESCE(ended_at, started_at)
        FROM sessions
        WHERE {_TOKEN_TOTAL} > 0
    """)


def downgrade() -> None:
    if helpers.has_table(TABLE):
        rows = op.get_bind().exec_driver_sql(f"SELECT COUNT(*) FROM {TABLE}").scalar()
        if rows:
            log.warning("downgrade below v20 drops %s (%d rows): the v19 schema has no per-model "
                        "usage; the session totals remain on the sessions rows", TABLE, rows)
    for name, _columns in INDEXES:
        helpers.drop_index(name)
    helpers.drop_table(TABLE)
