"""${message}

Telegram DM topic schema version: ${int(up_revision[1:]) if up_revision[1:].isdigit() else "?"}
(upstream's ``state_meta.telegram_dm_topic_schema_version``)
Shipped in: <release, or "unreleased main">

<What changes and why. Keep this revision frozen: declare the DDL as of this
version here (never import hermes_store.telegram_schema), make every step idempotent
with hermes_store.migrations.helpers, and give downgrade() back whatever upgrade() took.>

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers as h
${imports if imports else ""}
revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
