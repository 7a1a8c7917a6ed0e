"""v30: delegate children leave the trigram index; head additions; FTS layout 3.

Upstream schema version 30 (PR #102032), current main. Decision D6 puts here everything
upstream added after the v30 bump without a bump of its own, so that head equals the
newest upstream v30 (``tests/data/head-v30-reference.schema.json``):

* trigram rule: ``subagent`` sessions and delegate children (``$._delegate_from`` in a
  ``json_valid``-guarded ``model_config``) leave the trigram index, next to ``cron``;
  compression/branch continuations carry no marker and stay indexed;
* FTS layout 3 (``fts_storage_version`` 3): ``messages_fts`` reads the projection view
  ``messages_fts_src``, which indexes only the first 8,192 characters of a tool row; the
  trigram table keeps two columns (``content, tool_name``). Both indexes are rebuilt
  (decision D7: converted, not left for a manual optimize);
* ``sessions.created_source``, ``transport_profile``, ``compression_overload_streak``;
  ``messages.display_identity`` (BLOB) and ``display_order``;
  ``async_delegations.origin_session_id`` (#94691/#94701);
* display paging: ``idx_messages_display_page``, ``idx_messages_display_backfill``,
  ``idx_messages_display_identity`` and the four display-order triggers (a row takes the
  order of the first visible row with the same display identity, else its id);
  ``idx_sessions_tool_names``; the expression index ``idx_sessions_effective_activity``;
* ``delivery_obligations`` at its head shape (19 columns + ``idx_delivery_obligations_claim``).
  Upstream creates this table lazily and versions it outside ``schema_version``; a file
  may already hold it in the 13-column shape of 0.19.0, and then only the missing
  columns are added.

Existing messages keep ``display_order`` NULL: the display-backfill index exists so the
application can fill them lazily, as upstream does.

Downgrade: back to the v29 FTS layout (both indexes rebuilt, ``fts_storage_version`` 1),
the display triggers and indexes dropped, the added columns dropped.
``delivery_obligations`` is dropped only when empty: it is the gateway's outbox, created
outside the schema chain, and older releases leave a table they do not know alone - so a
non-empty one is kept whole (logged) rather than losing undelivered messages.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import fts_history, helpers

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

OBLIGATIONS = "delivery_obligations"
OBLIGATIONS_INDEX = "idx_delivery_obligations_claim"

_VISIBLE = "(active = 1 OR compacted = 1)"
_NEW_VISIBLE = "(new.active = 1 OR new.compacted = 1)"
_OLD_VISIBLE = "(old.active = 1 OR old.compacted = 1)"

MESSAGE_INDEXES = (
    ("idx_messages_display_page",
     ["session_id", "display_order", sa.text("active DESC"), sa.text("id DESC")],
     "active = 1 OR compacted = 1"),
    ("idx_messages_display_backfill", ["session_id"],
     f"(display_order IS NULL OR display_identity IS NULL) AND {_VISIBLE}"),
    ("idx_messages_display_identity", ["session_id", "display_identity", "display_order"],
     f"display_identity IS NOT NULL AND {_VISIBLE}"),
)
SESSION_INDEXES = (
    ("idx_sessions_tool_names", ["tool_names"]),
    ("idx_sessions_effective_activity",
     [sa.text("COALESCE(last_activity_at, started_at) DESC"), sa.text("started_at DESC")]),
)


def _peer_order(row: str) -> str:
    """The order already taken by another visible row showing the same thing."""
    return (
        f"(SELECT display_order FROM messages"
        f" WHERE session_id = {row}.session_id AND id <> {row}.id AND {_VISIBLE}"
        f" AND display_identity = {row}.display_identity AND display_order IS NOT NULL"
        f" ORDER BY display_order LIMIT 1)"
    )


def _min_peer_id(row: str) -> str:
    return (
        f"(SELECT min(peer.id) FROM messages AS peer"
        f" WHERE peer.session_id = {row}.session_id AND (peer.active = 1 OR peer.compacted = 1)"
        f" AND peer.display_identity = {row}.display_identity)"
    )


_IDENTITY_COLUMNS = ("role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name",
                     "display_kind")

DISPLAY_TRIGGERS = (
    ("messages_display_order_insert", f"""
CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE({_peer_order('new')}, new.id)
    WHERE id = new.id;
END"""),
    ("messages_display_visibility_update", f"""
CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted ON messages
WHEN {_NEW_VISIBLE} <> {_OLD_VISIBLE}
BEGIN
    UPDATE messages SET display_order = min(new.id, COALESCE({_peer_order('new')}, new.id))
    WHERE id = new.id AND {_NEW_VISIBLE};
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND {_VISIBLE}
      AND display_identity = new.display_identity AND {_NEW_VISIBLE};
    UPDATE messages SET display_order = {_min_peer_id('old')}
    WHERE session_id = old.session_id AND {_VISIBLE}
      AND display_identity = old.display_identity AND NOT {_NEW_VISIBLE};
END"""),
    ("messages_display_identity_update", f"""
CREATE TRIGGER messages_display_identity_update
AFTER UPDATE OF {', '.join(_IDENTITY_COLUMNS)} ON messages
WHEN {' OR '.join(f'new.{c} IS NOT old.{c}' for c in _IDENTITY_COLUMNS)}
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id
       OR (session_id = old.session_id AND display_identity = old.display_identity AND {_VISIBLE});
END"""),
    ("messages_display_identity_delete", f"""
CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages
WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = {_min_peer_id('old')}
    WHERE session_id = old.session_id AND {_VISIBLE} AND display_identity = old.display_identity;
END"""),
)


def _obligation_columns() -> list[sa.Column]:
    """The head shape; the first 13 are what 0.19.0 created lazily."""
    return [
        sa.Column("obligation_id", sa.Text(), primary_key=True, nullable=True),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("platform", sa.Text(), nullable=False),
        sa.Column("chat_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text()),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.REAL(), nullable=False),
        sa.Column("updated_at", sa.REAL(), nullable=False),
        sa.Column("owner_pid", sa.Integer()),
        sa.Column("owner_started_at", sa.Integer()),
        sa.Column("last_error", sa.Text()),
        sa.Column("adapter_profile", sa.Text()),
        sa.Column("delivery_fence", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("owner_installation_id", sa.Text()),
        sa.Column("owner_host", sa.Text()),
        sa.Column("owner_generation", sa.Text()),
        sa.Column("lease_expires_at", sa.REAL()),
    ]


def rebuild_fts(bind) -> None:
    """Give the file this revision's FTS layout with both indexes re-derived from
    ``messages`` (adoption calls it when it had to repair FTS objects)."""
    fts_history.apply_layout(bind, fts_history.LAYOUT_3_V30,
                             rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE))


def upgrade() -> None:
    helpers.add_columns(
        "sessions",
        sa.Column("created_source", sa.Text()),
        sa.Column("transport_profile", sa.Text()),
        sa.Column("compression_overload_streak", sa.Integer(), nullable=False,
                  server_default=sa.text("0")),
    )
    helpers.add_columns("messages", sa.Column("display_identity", sa.LargeBinary()),
                        sa.Column("display_order", sa.Integer()))
    helpers.add_columns(
        "async_delegations",
        sa.Column("origin_session_id", sa.Text(), nullable=False, server_default=sa.text("''")),
    )
    for name, columns, where in MESSAGE_INDEXES:
        helpers.create_index(name, "messages", columns, where=where)
    for name, columns in SESSION_INDEXES:
        helpers.create_index(name, "sessions", columns)
    helpers.drop_objects("TRIGGER", *(name for name, _sql in DISPLAY_TRIGGERS))
    helpers.execute([sql for _name, sql in DISPLAY_TRIGGERS])

    if helpers.has_table(OBLIGATIONS):
        helpers.add_columns(OBLIGATIONS, *_obligation_columns()[1:])
    else:
        op.create_table(OBLIGATIONS, *_obligation_columns())
    helpers.create_index(OBLIGATIONS_INDEX, OBLIGATIONS, ["state", "platform", "adapter_profile"])

    fts_history.apply_layout(
        op.get_bind(), fts_history.LAYOUT_3_V30,
        rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE),
        progress=fts_history.migration_progress(),
    )


def downgrade() -> None:
    fts_history.apply_layout(
        op.get_bind(), fts_history.LAYOUT_1_V29,
        rebuild=(fts_history.BASE_TABLE, fts_history.TRIGRAM_TABLE),
        progress=fts_history.migration_progress(),
    )
    helpers.drop_index(OBLIGATIONS_INDEX)
    if helpers.has_table(OBLIGATIONS):
        pending = op.get_bind().exec_driver_sql(f"SELECT COUNT(*) FROM {OBLIGATIONS}").scalar()
        if pending:
            log.warning("downgrade below v30 keeps %s: it holds %d rows of the gateway's "
                        "outbox, and older releases leave the table alone", OBLIGATIONS, pending)
        else:
            helpers.drop_table(OBLIGATIONS)
    helpers.drop_objects("TRIGGER", *(name for name, _sql in DISPLAY_TRIGGERS))
    for name, _columns in SESSION_INDEXES:
        helpers.drop_index(name)
    for name, _columns, _where in MESSAGE_INDEXES:
        helpers.drop_index(name)
    helpers.drop_columns("async_delegations", "origin_session_id")
    helpers.drop_columns("messages", "display_identity", "display_order")
    helpers.drop_columns("sessions", "created_source", "transport_profile",
                         "compression_overload_streak")
