"""${message}

Upstream schema version: ${int(up_revision) if up_revision.isdigit() else "?"}
Shipped in: <release, or "unreleased main">

<What changes and why. Keep this revision frozen: declare the DDL as of this
version here (never import hermes_store.schema), make every step idempotent with
hermes_store.migrations.helpers, and give downgrade() back whatever upgrade() took.
It runs on SQLite files and on PostgreSQL databases: where the two need different
SQL, branch on h.dialect() (docs/migrations.md, "PostgreSQL").>

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
#: the engines this revision handles: every revision after 0030 handles both
dialects = ("sqlite", "postgresql")


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
