"""v19: the gateway routing table.

Upstream schema version 19, shipped in hermes-agent 0.18.1 (attribution of the number to
this table is decision D6).

``gateway_routing`` replaces the routing half of sessions.json: one row per routing key
per scope, holding the serialized entry. Also the partial index
``idx_messages_active_null``, which makes upstream's on-open probe for rows whose
``active`` is still NULL an index lookup.

Idempotent (D4): the table may already exist. Early unreleased builds created it keyed
by ``session_key`` alone, without ``scope``; such a table is rebuilt to the
``(scope, session_key)`` key, the newest row per key winning, as upstream heals it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

TABLE = "gateway_routing"
PRIMARY_KEY = ["scope", "session_key"]


def _columns() -> list[sa.Column]:
    return [
        sa.Column("scope", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("entry_json", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.REAL(), nullable=False),
        sa.PrimaryKeyConstraint(*PRIMARY_KEY),
    ]


def _primary_key() -> list[str]:
    rows = op.get_bind().exec_driver_sql(f'PRAGMA table_info("{TABLE}")').fetchall()
    return [r[1] for r in sorted((r for r in rows if r[5]), key=lambda r: r[5])]


def _heal_primary_key() -> None:
    old = f"{TABLE}_unkeyed"
    scope = "COALESCE(scope, '')" if helpers.has_column(TABLE, "scope") else "''"
    op.rename_table(TABLE, old)
    op.create_table(TABLE, *_columns())
    # Oldest first, so INSERT OR REPLACE leaves the newest row for each key.
    op.execute(f"""
        INSERT OR REPLACE INTO {TABLE} (scope, session_key, entry_json, updated_at)
        SELECT {scope}, session_key, entry_json, updated_at FROM {old}
        WHERE session_key IS NOT NULL AND entry_json IS NOT NULL AND updated_at IS NOT NULL
        ORDER BY updated_at, rowid
    """)
    op.drop_table(old)


def upgrade() -> None:
    if helpers.has_table(TABLE) and _primary_key() != PRIMARY_KEY:
        _heal_primary_key()
    helpers.create_table(TABLE, *_columns())
    helpers.create_index("idx_messages_active_null", "messages", ["active"], where="active IS NULL")


def downgrade() -> None:
    helpers.drop_index("idx_messages_active_null")
    helpers.drop_table(TABLE)
