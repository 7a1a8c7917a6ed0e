"""v4: titles become unique — partial unique index ``idx_sessions_title_unique``.

Upstream schema version: 4
Shipped in: before 0.13.0 (the pre-v11 ALTER chain)

Titles written before the constraint existed may collide, and the index cannot be
built over duplicates. As upstream does (since ~0.19.0), the newest session keeps
the title and every older duplicate (smaller rowid) has its title set to NULL;
the sessions themselves are all kept.

``heal_rows`` is that clearing on its own: upstream runs it on every open when the
index is missing, so adoption runs it on a file at v4 or later (adopt.py) before it adds
the index — without it, a file upstream left without the index refused adoption.

Downgrade drops the index only. The cleared duplicate titles are not restored:
they were the ambiguous aliases the constraint exists to forbid, and upstream
clears them the same way on every open.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import logging

from alembic import op

from hermes_store.migrations import helpers as h

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

CLEAR_OLDER_DUPLICATE_TITLES = """
    UPDATE sessions AS older SET title = NULL
    WHERE title IS NOT NULL
      AND EXISTS (SELECT 1 FROM sessions AS newer
                  WHERE newer.title = older.title AND newer.rowid > older.rowid)
"""


def heal_rows(conn) -> None:
    """Clear older duplicate titles when the unique index is missing (a connection of
    the adoption's transaction; no Alembic context)."""
    if conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type = 'index' "
                            "AND name = 'idx_sessions_title_unique'").first():
        return
    cleared = conn.exec_driver_sql(CLEAR_OLDER_DUPLICATE_TITLES).rowcount
    if cleared:
        log.warning("cleared %d duplicate session title(s) so titles can be unique", cleared)


def upgrade() -> None:
    if h.has_index("idx_sessions_title_unique"):
        return
    heal_rows(op.get_bind())
    h.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
        "ON sessions(title) WHERE title IS NOT NULL"
    )


def downgrade() -> None:
    h.drop_index("idx_sessions_title_unique")
