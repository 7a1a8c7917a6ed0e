"""Display-order triggers on ``messages`` (head; upstream added them after v30).

A transcript shows *visible* rows (``active = 1 OR compacted = 1``) ordered by
``display_order``. Rows that are the same message re-recorded (same
``display_identity`` within a session, e.g. a retried or re-synced message) must keep
the place of the first copy rather than jump to the end. The triggers keep that true:

``messages_display_order_insert``
    A new row without an order takes the smallest order among visible peers (same
    session, same ``display_identity``), else its own id.
``messages_display_visibility_update``
    When a row's visibility flips: a row becoming visible re-derives its order
    (min of its id and its peers' order) and its peers adopt it; a row becoming
    invisible leaves its peers ordered by their smallest remaining id.
``messages_display_identity_update``
    When a field that identity is computed from changes, the row's and its visible
    peers' ``display_identity``/``display_order`` are cleared, for the repository to
    recompute (``idx_messages_display_backfill`` finds them).
``messages_display_identity_delete``
    Deleting a visible row re-orders its remaining visible peers by their smallest id.

A NULL ``display_identity`` has no peers (``=`` never matches NULL), so such a row is
simply ordered by its id.

The rules are written once, as SQL fragments both engines' triggers are built from
(below); SQLite's triggers are ``backends/sqlite/display_order.py`` (``DISPLAY_TRIGGERS``),
PostgreSQL's PL/pgSQL functions and triggers ``backends/postgresql/display_order.py``.
``create_display_triggers(conn)`` / ``drop_display_triggers(conn)`` work on either engine
(``conn`` is a SQLAlchemy ``Connection``).
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from .backends.base import backend_of

# The same predicate as hermes_store.schema.VISIBLE_MESSAGE, as trigger text.
VISIBLE = "(active = 1 OR compacted = 1)"


#: the triggers' names, the same on both engines
TRIGGER_NAMES = (
    "messages_display_order_insert",
    "messages_display_visibility_update",
    "messages_display_identity_update",
    "messages_display_identity_delete",
)


def visible(row: str) -> str:
    return f"({row}.active = 1 OR {row}.compacted = 1)"


def first_peer_order(row: str) -> str:
    """The smallest ``display_order`` among ``row``'s visible peers (NULL if none)."""
    return (
        f"(SELECT display_order FROM messages "
        f"WHERE session_id = {row}.session_id AND id <> {row}.id AND {VISIBLE} "
        f"AND display_identity = {row}.display_identity AND display_order IS NOT NULL "
        f"ORDER BY display_order LIMIT 1)"
    )


def smallest_peer_id(row: str) -> str:
    return (
        f"(SELECT min(peer.id) FROM messages AS peer "
        f"WHERE peer.session_id = {row}.session_id AND (peer.active = 1 OR peer.compacted = 1) "
        f"AND peer.display_identity = {row}.display_identity)"
    )


def peers_of(row: str) -> str:
    return (
        f"session_id = {row}.session_id AND {VISIBLE} "
        f"AND display_identity = {row}.display_identity"
    )


# Fields the repository derives display_identity from.
IDENTITY_FIELDS = (
    "role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name", "display_kind",
)


def create_display_triggers(conn: Connection) -> None:
    """Create the display-order triggers on the connection's engine."""
    backend_of(conn).create_display_triggers(conn)


def drop_display_triggers(conn: Connection) -> None:
    backend_of(conn).drop_display_triggers(conn)


__all__ = [
    "IDENTITY_FIELDS",
    "TRIGGER_NAMES",
    "VISIBLE",
    "create_display_triggers",
    "drop_display_triggers",
    "first_peer_order",
    "peers_of",
    "smallest_peer_id",
    "visible",
]
