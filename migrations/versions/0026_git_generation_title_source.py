"""v26: git metadata generation, title provenance, compression recovery deadline.

Upstream schema version 26; the 0.20.x releases (e.g. 0.20.6) are stamped 26. No gated
block exists for 26, 27 or 28; the split of the objects that appeared between v25 and
v28 over these three numbers is decision D6:

* ``sessions.git_metadata_generation`` - bumps when the git branch/root are re-read, so a
  stale writer cannot overwrite newer workspace metadata;
* ``sessions.title_source`` - who set the title (user, auto-title, ...);
* ``sessions.compression_recovery_deadline``.

No data changes. Downgrade drops them.
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    helpers.add_columns(
        "sessions",
        sa.Column("git_metadata_generation", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("title_source", sa.Text()),
        sa.Column("compression_recovery_deadline", sa.REAL()),
    )


def downgrade() -> None:
    helpers.drop_columns("sessions", "git_metadata_generation", "title_source",
                         "compression_recovery_deadline")
