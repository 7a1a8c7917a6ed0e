"""The display-order triggers on PostgreSQL (the rules: ``hermes_store.display_order``).

The same four rules as PL/pgSQL trigger functions. The insert rule runs BEFORE INSERT
and sets NEW.display_order (SQLite's AFTER trigger has to write the row a second
time); the others run AFTER the row change, as on SQLite. One difference: PostgreSQL
fires AFTER ROW triggers once the whole statement has run, SQLite after each row, so
when one UPDATE hides several peers at once, a hidden peer keeps the order it had
(SQLite may renumber it on the way); the rows that stay visible end up alike.
"""

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

_PG_IDENTITY_CHANGED = " OR ".join(
    f"NEW.{f} IS DISTINCT FROM OLD.{f}" for f in IDENTITY_FIELDS
)

PG_DISPLAY_FUNCTIONS = {
    "hermes_display_order_insert": f"""
CREATE OR REPLACE FUNCTION hermes_display_order_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.display_order := NEW.id;
    IF NEW.display_identity IS NOT NULL THEN  -- NULL has no peers
        NEW.display_order := COALESCE({first_peer_order('NEW')}, NEW.id);
    END IF;
    RETURN NEW;
END $$""",
    "hermes_display_visibility_update": f"""
CREATE OR REPLACE FUNCTION hermes_display_visibility_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF {visible('NEW')} THEN
        UPDATE messages
        SET display_order = least(NEW.id, COALESCE({first_peer_order('NEW')}, NEW.id))
        WHERE id = NEW.id;
        UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = NEW.id)
        WHERE session_id = NEW.session_id AND id <> NEW.id AND {VISIBLE}
          AND display_identity = NEW.display_identity;
    ELSE
        UPDATE messages SET display_order = {smallest_peer_id('OLD')}
        WHERE {peers_of('OLD')};
    END IF;
    RETURN NULL;
END $$""",
    "hermes_display_identity_update": f"""
CREATE OR REPLACE FUNCTION hermes_display_identity_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = NEW.id OR (session_id = OLD.session_id
          AND display_identity = OLD.display_identity AND {VISIBLE});
    RETURN NULL;
END $$""",
    "hermes_display_identity_delete": f"""
CREATE OR REPLACE FUNCTION hermes_display_identity_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET display_order = {smallest_peer_id('OLD')}
    WHERE {peers_of('OLD')};
    RETURN NULL;
END $$""",
}

PG_DISPLAY_TRIGGERS = {
    "messages_display_order_insert": """
CREATE OR REPLACE TRIGGER messages_display_order_insert BEFORE INSERT ON messages
FOR EACH ROW WHEN (NEW.display_order IS NULL)
EXECUTE FUNCTION hermes_display_order_insert()""",
    "messages_display_visibility_update": f"""
CREATE OR REPLACE TRIGGER messages_display_visibility_update
AFTER UPDATE OF active, compacted ON messages
FOR EACH ROW WHEN ({visible('NEW')} <> {visible('OLD')})
EXECUTE FUNCTION hermes_display_visibility_update()""",
    "messages_display_identity_update": f"""
CREATE OR REPLACE TRIGGER messages_display_identity_update
AFTER UPDATE OF {', '.join(IDENTITY_FIELDS)} ON messages
FOR EACH ROW WHEN ({_PG_IDENTITY_CHANGED})
EXECUTE FUNCTION hermes_display_identity_update()""",
    "messages_display_identity_delete": f"""
CREATE OR REPLACE TRIGGER messages_display_identity_delete AFTER DELETE ON messages
FOR EACH ROW WHEN ({visible('OLD')})
EXECUTE FUNCTION hermes_display_identity_delete()""",
}


def create_display_triggers(conn: Connection) -> None:
    for ddl in (*PG_DISPLAY_FUNCTIONS.values(), *PG_DISPLAY_TRIGGERS.values()):
        conn.exec_driver_sql(ddl)


def drop_display_triggers(conn: Connection) -> None:
    for name in PG_DISPLAY_TRIGGERS:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON messages")
    for name in PG_DISPLAY_FUNCTIONS:
        conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {name}()")


__all__ = ["PG_DISPLAY_FUNCTIONS", "PG_DISPLAY_TRIGGERS", "create_display_triggers",
           "drop_display_triggers"]
