"""v23: full-text search redesign - external-content layout 1, converted and rebuilt.

Upstream schema version 23 (#22478, #43690, #55233), after release 0.19.0 (v22) and
before 0.20.x (v26).

The v11-v22 indexes were inline: each FTS5 table stored its own copy of every message
(content, tool name and tool calls glued into one column), and the trigram copy - the
largest object in the file - included tool output. Layout 1 (``fts_storage_version`` 1):

* ``messages_fts(content, tool_name, tool_calls)`` with ``content='messages'`` - no copy;
* ``messages_fts_trigram`` over the view ``messages_fts_trigram_src``, which leaves tool
  rows out (they stay findable through ``messages_fts``);
* six triggers gated by upstream's rebuild window (``fts_rebuild_high_water`` /
  ``fts_rebuild_progress``); the update triggers fire on any column but act only when an
  indexed column changed.

Decision D7: upstream left upgraded files on the inline layout until a manual
``optimize-storage``; this revision converts the file and rebuilds both indexes (FTS5
``'rebuild'``: one statement each, bounded memory), so a file at 0023 always has
layout 1. ``fts_storage_version`` is written as ``1``; ``fts_optimize_available`` and the
rebuild-window keys, meaningless after a full rebuild, are removed.

Downgrade converts back to the inline layout and refills both tables from ``messages``
(one INSERT ... SELECT each) and removes ``fts_storage_version`` (absent = inline).
The DDL of both layouts is frozen in ``hermes_store.migrations.fts_history``.
"""

from __future__ import annotations

from alembic import op

from hermes_store.migrations import fts_history

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def rebuild_fts(bind) -> None:
    """Give the file this revision's FTS layout with both indexes re-derived from
    ``messages`` (adoption calls it when it had to repair FTS objects)."""
    fts_history.apply_layout(bind, fts_history.LAYOUT_1_V23,
                             rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE))


def upgrade() -> None:
    fts_history.apply_layout(
        op.get_bind(), fts_history.LAYOUT_1_V23,
        rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE),
        progress=fts_history.migration_progress(),
    )


def downgrade() -> None:
    fts_history.apply_layout(
        op.get_bind(), fts_history.LEGACY_INLINE,
        rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE),
        progress=fts_history.migration_progress(),
    )
