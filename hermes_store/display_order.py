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

Public API: ``DISPLAY_TRIGGERS`` (name → DDL; PostgreSQL: ``PG_DISPLAY_FUNCTIONS`` and
``PG_DISPLAY_TRIGGERS``), ``create_display_triggers(conn)``, ``drop_display_triggers(conn)``
(both by the connection's dialect); ``conn`` is a SQLAlchemy ``Connection``.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

# The same predicate as hermes_store.schema.VISIBLE_MESSAGE, as trigger text.
_VISIBLE = "(active = 1 OR compacted = 1)"


def _visible(row: str) -> str:
    return f"({row}.active = 1 OR {row}.compacted = 1)"


def _first_peer_order(row: str) -> str:
    """The smallest ``display_order`` among ``row``'s visible peers (NULL if none)."""
    return (
        f"(SELECT display_order FROM messages "
        f"WHERE session_id = {row}.session_id AND id <> {row}.id AND {_VISIBLE} "
        f"AND display_identity = {row}.display_identity AND display_order IS NOT NULL "
        f"ORDER BY display_order LIMIT 1)"
    )


def _smallest_peer_id(row: str) -> str:
    return (
        f"(SELECT min(peer.id) FROM messages AS peer "
        f"WHERE peer.session_id = {row}.session_id AND (peer.active = 1 OR peer.compacted = 1) "
        f"AND peer.display_identity = {row}.display_identity)"
    )


def _peers_of(row: str) -> str:
    return (
        f"session_id = {row}.session_id AND {_VISIBLE} "
        f"AND display_identity = {row}.display_identity"
    )


# Fields the repository derives display_identity from.
_IDENTITY_FIELDS = (
    "role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name", "display_kind",
)
_IDENTITY_CHANGED = " OR ".join(f"new.{f} IS NOT old.{f}" for f in _IDENTITY_FIELDS)

DISPLAY_TRIGGERS = {
    "messages_display_order_insert": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE({_first_peer_order('new')}, new.id)
    WHERE id = new.id;
END""",
    "messages_display_visibility_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_visibility_update
AFTER UPDATE OF active, compacted ON messages
WHEN {_visible('new')} <> {_visible('old')}
BEGIN
    UPDATE messages
    SET display_order = min(new.id, COALESCE({_first_peer_order('new')}, new.id))
    WHERE id = new.id AND {_visible('new')};
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND {_VISIBLE}
      AND display_identity = new.display_identity AND {_visible('new')};
    UPDATE messages SET display_order = {_smallest_peer_id('old')}
    WHERE {_peers_of('old')} AND NOT {_visible('new')};
END""",
    "messages_display_identity_update": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_identity_update
AFTER UPDATE OF {', '.join(_IDENTITY_FIELDS)} ON messages
WHEN {_IDENTITY_CHANGED}
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id OR (session_id = old.session_id
          AND display_identity = old.display_identity AND {_VISIBLE});
END""",
    "messages_display_identity_delete": f"""
CREATE TRIGGER IF NOT EXISTS messages_display_identity_delete AFTER DELETE ON messages
WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = {_smallest_peer_id('old')}
    WHERE {_peers_of('old')};
END""",
}


# --------------------------------------------------------------------------- PostgreSQL
# The same four rules as PL/pgSQL trigger functions. The insert rule runs BEFORE INSERT
# and sets NEW.display_order (SQLite's AFTER trigger has to write the row a second
# time); the others run AFTER the row change, as on SQLite. One difference: PostgreSQL
# fires AFTER ROW triggers once the whole statement has run, SQLite after each row, so
# when one UPDATE hides several peers at once, a hidden peer keeps the order it had
# (SQLite may renumber it on the way); the rows that stay visible end up alike.

_PG_IDENTITY_CHANGED = " OR ".join(
    f"NEW.{f} IS DISTINCT FROM OLD.{f}" for f in _IDENTITY_FIELDS
)

PG_DISPLAY_FUNCTIONS = {
    "hermes_display_order_insert": f"""
CREATE OR REPLACE FUNCTION hermes_display_order_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.display_order := NEW.id;
    IF NEW.display_identity IS NOT NULL THEN  -- NULL has no peers
        NEW.display_order := COALESCE({_first_peer_order('NEW')}, NEW.id);
    END IF;
    RETURN NEW;
END $$""",
    "hermes_display_visibility_update": f"""
CREATE OR REPLACE FUNCTION hermes_display_visibility_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF {_visible('NEW')} THEN
        UPDATE messages
        SET display_order = least(NEW.id, COALESCE({_first_peer_order('NEW')}, NEW.id))
        WHERE id = NEW.id;
        UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = NEW.id)
        WHERE session_id = NEW.session_id AND id <> NEW.id AND {_VISIBLE}
          AND display_identity = NEW.display_identity;
    ELSE
        UPDATE messages SET display_order = {_smallest_peer_id('OLD')}
        WHERE {_peers_of('OLD')};
    END IF;
    RETURN NULL;
END $$""",
    "hermes_display_identity_update": f"""
CREATE OR REPLACE FUNCTION hermes_display_identity_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = NEW.id OR (session_id = OLD.session_id
          AND display_identity = OLD.display_identity AND {_VISIBLE});
    RETURN NULL;
END $$""",
    "hermes_display_identity_delete": f"""
CREATE OR REPLACE FUNCTION hermes_display_identity_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET display_order = {_smallest_peer_id('OLD')}
    WHERE {_peers_of('OLD')};
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
FOR EACH ROW WHEN ({_visible('NEW')} <> {_visible('OLD')})
EXECUTE FUNCTION hermes_display_visibility_update()""",
    "messages_display_identity_update": f"""
CREATE OR REPLACE TRIGGER messages_display_identity_update
AFTER UPDATE OF {', '.join(_IDENTITY_FIELDS)} ON messages
FOR EACH ROW WHEN ({_PG_IDENTITY_CHANGED})
EXECUTE FUNCTION hermes_display_identity_update()""",
    "messages_display_identity_delete": f"""
CREATE OR REPLACE TRIGGER messages_display_identity_delete AFTER DELETE ON messages
FOR EACH ROW WHEN ({_visible('OLD')})
EXECUTE FUNCTION hermes_display_identity_delete()""",
}


def create_display_triggers(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        for ddl in (*PG_DISPLAY_FUNCTIONS.values(), *PG_DISPLAY_TRIGGERS.values()):
            conn.exec_driver_sql(ddl)
        return
    for ddl in DISPLAY_TRIGGERS.values():
        conn.exec_driver_sql(ddl)


def drop_display_triggers(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        for name in PG_DISPLAY_TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON messages")
        for name in PG_DISPLAY_FUNCTIONS:
            conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {name}()")
        return
    for name in DISPLAY_TRIGGERS:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")


__all__ = [
    "DISPLAY_TRIGGERS",
    "PG_DISPLAY_FUNCTIONS",
    "PG_DISPLAY_TRIGGERS",
    "create_display_triggers",
    "drop_display_triggers",
]
