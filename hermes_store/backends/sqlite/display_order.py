"""The display-order triggers on SQLite (the rules: ``hermes_store.display_order``)."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ...display_order import (
    IDENTITY_FIELDS,
    VISIBLE,
    first_peer_order,
    peers_of,
    smallest_peer_id,
    visible,
)

_IDENTITY_CHANGED = " OR ".join(f"new.{f} IS NOT old.{f}" for f in IDENTITY_FIELDS)

DISPLAY_TRIGGERS = {
    "messages_display_order_insert": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE({first_peer_order('new')}, new.id)
    WHERE id = new.id;
END""",
    "messages_display_visibility_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_visibility_update
AFTER UPDATE OF active, compacted ON messages
WHEN {visible('new')} <> {visible('old')}
BEGIN
    UPDATE messages
    SET display_order = min(new.id, COALESCE({first_peer_order('new')}, new.id))
    WHERE id = new.id AND {visible('new')};
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND {VISIBLE}
      AND display_identity = new.display_identity AND {visible('new')};
    UPDATE messages SET display_order = {smallest_peer_id('old')}
    WHERE {peers_of('old')} AND NOT {visible('new')};
END""",
    "messages_display_identity_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_identity_update
AFTER UPDATE OF {', '.join(IDENTITY_FIELDS)} ON messages
WHEN {_IDENTITY_CHANGED}
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id OR (session_id = old.session_id
          AND display_identity = old.display_identity AND {VISIBLE});
END""",
    "messages_display_identity_delete": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_identity_delete AFTER DELETE ON messages
WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = {smallest_peer_id('old')}
    WHERE {peers_of('old')};
END""",
}


def create_display_triggers(conn: Connection) -> None:
    for ddl in DISPLAY_TRIGGERS.values():
        conn.exec_driver_sql(ddl)


def drop_display_triggers(conn: Connection) -> None:
    for name in DISPLAY_TRIGGERS:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")


__all__ = ["DISPLAY_TRIGGERS", "create_display_triggers", "drop_display_triggers"]
