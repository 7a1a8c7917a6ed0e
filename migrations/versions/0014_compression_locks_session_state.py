"""v14: ``compression_locks`` and session state columns (cwd, rewind count, archived).

Upstream schema version: 14
Shipped in: 0.16.0

* ``compression_locks(session_id PK, holder, acquired_at, expires_at)`` — a lease so
  only one process compresses a session's context at a time; expired leases are
  found through ``idx_compression_locks_expires(expires_at)``.
* ``sessions.cwd`` (working directory of the session), ``rewind_count`` and
  ``archived`` (both ``INTEGER NOT NULL DEFAULT 0``).

Which of these items owned the "14" bump upstream is unknown; 0.16.0 is the first
release with all of them (decision D6). After ``upgrade 0014`` an empty file has the
schema of a fresh 0.16.0 file.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers as h

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

COMPRESSION_LOCKS = """
    CREATE TABLE IF NOT EXISTS compression_locks (
        session_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        acquired_at REAL NOT NULL,
        expires_at REAL NOT NULL
    )"""


def upgrade() -> None:
    h.execute(COMPRESSION_LOCKS)
    h.execute(
        "CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at)"
    )
    h.add_columns(
        "sessions",
        sa.Column("cwd", sa.Text),
        sa.Column("rewind_count", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("archived", sa.Integer, nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    h.drop_columns("sessions", "cwd", "rewind_count", "archived")
    h.drop_index("idx_compression_locks_expires")
    h.drop_table("compression_locks")
