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

One rebuild per run, not per layout: when the same upgrade goes on to 0030, which
rebuilds both indexes anyway, 0023 (like 0028 and 0029) leaves its fill to it. The
tables are emptied and upstream's rebuild window is opened over every existing message
(``fts_rebuild_high_water`` = MAX(id), ``fts_rebuild_progress`` below the first id), so
the gated triggers keep the committed file consistent in between - they index new rows
and leave pending ones alone - and a run cut short is completed by the next one.
Adopting a 100,000-message 0.19.0 file to head: 86 s with a rebuild at every layout
step, 17 s with one.

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

#: 0030 rebuilds both indexes; a run going that far rebuilds once, there (see below)
LAST_REBUILD = "0030"


def rebuild_fts(bind) -> None:
    """Give the file this revision's FTS layout with both indexes re-derived from
    ``messages`` (adoption calls it when it had to repair FTS objects)."""
    fts_history.apply_layout(bind, fts_history.LAYOUT_1_V23,
                             rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE))


def upgrade() -> None:
    fts_history.apply_layout(
        op.get_bind(), fts_history.LAYOUT_1_V23,
        rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE),
        defer=fts_history.run_reaches(LAST_REBUILD),
        progress=fts_history.migration_progress(),
    )


def downgrade() -> None:
    fts_history.apply_layout(
        op.get_bind(), fts_history.LEGACY_INLINE,
        rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE),
        progress=fts_history.migration_progress(),
    )
