"""v29: cron sessions leave the trigram index.

Upstream schema version 29 (#101199, PR #101725, 2026-09-02), after release 0.21.0.

Scheduled (``cron``) runs repeat near-identical text and bloated the trigram index, the
largest one in the file, while nobody substring-searches them in CJK. The trigram
content view ``messages_fts_trigram_src`` now joins ``sessions`` and leaves out
``source = 'cron'``; the trigram triggers test the same session predicate. The trigram
index is rebuilt (FTS5 ``'rebuild'``, one statement), as upstream always did while the
stamped version was behind, so it holds exactly what the view yields.
``messages_fts`` is untouched. ``fts_storage_version`` stays 1: the tables are still
those of layout 1. A run that goes on to 0030 leaves this rebuild to 0030's (see 0023).

Downgrade restores the v28 view and triggers and rebuilds the trigram index again.
"""

from __future__ import annotations

from alembic import op

from hermes_store.migrations import fts_history

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

#: 0030 rebuilds both indexes; a run going that far rebuilds once, there (see below)
LAST_REBUILD = "0030"


def rebuild_fts(bind) -> None:
    """Give the file this revision's FTS layout with both indexes re-derived from
    ``messages`` (adoption calls it when it had to repair FTS objects)."""
    fts_history.apply_layout(bind, fts_history.LAYOUT_1_V29,
                             rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE))


def upgrade() -> None:
    fts_history.apply_layout(op.get_bind(), fts_history.LAYOUT_1_V29,
                             rebuild=(fts_history.TRIGRAM_TABLE,),
                             defer=fts_history.run_reaches(LAST_REBUILD),
                             progress=fts_history.migration_progress())


def downgrade() -> None:
    fts_history.apply_layout(op.get_bind(), fts_history.LAYOUT_1_V28,
                             rebuild=(fts_history.TRIGRAM_TABLE,),
                             progress=fts_history.migration_progress())
