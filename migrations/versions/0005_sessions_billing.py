"""v5: billing columns on ``sessions`` — cache/reasoning token counters and cost fields.

Upstream schema version: 5
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

Counters default to 0 like the v1 token counters; cost fields stay NULL until a
price is known. (A fork numbered v5 "audit_log"; that never shipped upstream.)

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COLUMNS = [
    ("cache_read_tokens", sa.Integer, "0"),
    ("cache_write_tokens", sa.Integer, "0"),
    ("reasoning_tokens", sa.Integer, "0"),
    ("billing_provider", sa.Text, None),
    ("billing_base_url", sa.Text, None),
    ("billing_mode", sa.Text, None),
    ("estimated_cost_usd", sa.REAL, None),
    ("actual_cost_usd", sa.REAL, None),
    ("cost_status", sa.Text, None),
    ("cost_source", sa.Text, None),
    ("pricing_version", sa.Text, None),
]


def upgrade() -> None:
    h.add_columns(
        "sessions",
        *(
            sa.Column(name, type_, server_default=sa.text(default) if default else None)
            for name, type_, default in COLUMNS
        ),
    )


def downgrade() -> None:
    h.drop_columns("sessions", *(name for name, _, _ in COLUMNS))
