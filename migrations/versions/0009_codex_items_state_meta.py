"""v9: ``messages.codex_message_items`` and the ``state_meta`` key/value table.

Upstream schema version: 9
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

``codex_message_items`` keeps the Codex Responses message id/phase (JSON text).

``state_meta(key, value)`` was declared in upstream's schema without a version
bump somewhere between v6 and v9 (the exact version is not recoverable). We
attribute it to v9, the first version whose source shows it, so every revision
from here on can rely on it (see docs/migrations.md).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

STATE_META = """
    CREATE TABLE IF NOT EXISTS state_meta (
        key TEXT PRIMARY KEY,
        value TEXT
    )"""


def upgrade() -> None:
    h.add_columns("messages", sa.Column("codex_message_items", sa.Text))
    h.execute(STATE_META)


def downgrade() -> None:
    h.drop_table("state_meta")
    h.drop_columns("messages", "codex_message_items")
