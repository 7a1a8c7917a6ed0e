"""A session's messages in the trigram index when the session's scope changes.

The trigram index holds the non-tool messages of the sessions that
``ddl.trigram_session_predicate`` admits (not ``cron``/``subagent``, not a delegate
run). Its triggers are on ``messages`` only, as in upstream's layout, so a unit that
changes a session's ``source`` or ``model_config`` after it has messages left rows in
the index that its content view no longer returns (FTS5 then calls the index
malformed), or left out rows the view now returns. Such a unit asks :func:`in_scope`
before its change and calls :func:`rescope` after it: the session's rows leave the index
(FTS5's 'delete', with the values it indexed) or join it, behind the rebuild gate as
the triggers are. PostgreSQL's scope trigger does the same on the server.
"""

from __future__ import annotations

from sqlalchemy import Connection

from ....driver import driver_execute
from .ddl import TRIGRAM_TABLE, base_gate, schema_object_exists, trigram_session_predicate

#: the trigger whose presence says the index is kept (absent: no trigram index, or
#: detached while stale)
_KEEPER = "messages_fts_trigram_insert"
_ADMITTED = f"SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ? AND {trigram_session_predicate()})"
_ROWS = f"FROM messages AS m WHERE m.session_id = ? AND m.role <> 'tool' AND {base_gate('m')}"
#: the session's rows out of the index (FTS5's 'delete', with the values it indexed), in
_LEAVE = (f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content, tool_name) "
          f"SELECT 'delete', m.id, m.content, m.tool_name {_ROWS}")
_JOIN = f"INSERT INTO {TRIGRAM_TABLE}(rowid, content, tool_name) SELECT m.id, m.content, m.tool_name {_ROWS}"


def in_scope(conn: Connection, session_id: str) -> bool:
    """Whether the session's messages belong in the trigram index (its rules; the
    index itself may be absent or detached: :func:`rescope` asks only on a change)."""
    # on the driver: this runs twice in every unit that may change a session's scope
    return bool(driver_execute(conn, _ADMITTED, (session_id,), fetch_all=True)[0][0])


def rescope(conn: Connection, session_id: str, before: bool) -> None:
    """After a change of the session's scope (``before``: :func:`in_scope` ahead of it),
    its messages taken out of the index or put into it, where triggers keep one."""
    if in_scope(conn, session_id) == before:
        return  # the usual case: the change left the session where it was
    if not schema_object_exists(conn, "trigger", _KEEPER):
        return
    driver_execute(conn, _LEAVE if before else _JOIN, (session_id,))


__all__ = ["in_scope", "rescope"]
