"""Gateway concern: the routing index (``gateway_routing``) and the routing peer each
gateway session records on its ``sessions`` row.

The gateway maps a deterministic routing key (``session_key``, e.g.
``agent:main:telegram:dm:42``) to the session that serves it. Two records back that map:

* ``gateway_routing`` — one row per (``scope``, ``session_key``) holding the gateway's
  serialised entry verbatim; ``scope`` keeps separate gateways' indexes apart (callers
  pass their sessions directory), the way separate ``sessions.json`` files did;
* the session row's peer columns (``session_key``, ``chat_id``, ``chat_type``,
  ``thread_id``, ``display_name``, ``origin_json``) — durable, so a lost or pruned
  index can be rebuilt from the sessions themselves.

Lookups never guess across peers: ``find_session_by_origin`` answers None rather than
hand one participant's session to another, and the peer fallback of
``find_latest_gateway_session_for_peer`` needs the complete peer tuple.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

import sqlalchemy as sa

from .. import schema, unit_locks
from ..errors import InvalidArgumentError
from .base import RepositoryBase
from ..sql.constructs import ascii_lower, insert_for, text_order
from .kinds import RECOVERABLE_END_REASONS, update_scoped
from .rows import row_dict, session_columns
from ..sql.values import scrub_surrogates

S = schema.sessions
M = schema.messages
R = schema.gateway_routing


def _scope(scope: Any) -> str:
    if not isinstance(scope, str):
        raise InvalidArgumentError(
            f"scope must be text ('' is the default scope), got {type(scope).__name__}"
        )
    return scope


def _json_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(
            f"{what} must be the serialised entry as a JSON string, got {type(value).__name__}"
            " (pass json.dumps(entry))"
        )
    return value


def _peer_text(value: Any, what: str) -> str | None:
    """A peer identifier as stored: text, None, or an integer id written as text (the
    way SQLite's TEXT affinity stores it, so both engines keep the same value)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"{what} must be text (or an integer id), got {type(value).__name__}")


def _has_messages(s) -> sa.ColumnElement:
    """The session holds a transcript: by its counter, or by a message row (a row
    written by a build that did not keep the counter)."""
    return sa.or_(
        sa.func.coalesce(s.c.message_count, 0) > 0,
        sa.exists().where(M.c.session_id == s.c.id),
    )


def _recoverable(s) -> sa.ColumnElement:
    """Live, or ended only by an accidental close that recovery may reopen; an
    explicit boundary (/new, /resume, compression) is not recoverable."""
    return sa.and_(
        sa.or_(s.c.ended_at.is_(None), s.c.end_reason.in_(RECOVERABLE_END_REASONS)),
        _has_messages(s),
    )


def _same_or_blank(column, value: str | None) -> sa.ColumnElement:
    """NULL and '' are the same peer field (upstream compares both as '')."""
    return sa.func.coalesce(column, "") == (value if value is not None else "")


class GatewayMixin(RepositoryBase):
    # ------------------------------------------------------------------ routing index

    def save_gateway_routing_entry(
        self, session_key: str, entry_json: str, *, scope: str = ""
    ) -> None:
        """Insert or replace one routing entry of ``scope``; an empty key or entry is
        ignored (nothing to route)."""
        if not session_key or not entry_json:
            return
        scope = _scope(scope)
        entry_json = _json_text(entry_json, "entry_json")
        now = time.time()

        def unit(conn: sa.Connection) -> None:
            stmt = insert_for(conn, R).values(
                scope=scope, session_key=session_key, entry_json=entry_json, updated_at=now
            )
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[R.c.scope, R.c.session_key],
                set_={"entry_json": stmt.excluded.entry_json,
                      "updated_at": stmt.excluded.updated_at},
            ))

        self._write(unit, locks=unit_locks.routing_scope(scope))

    def replace_gateway_routing_entries(
        self, entries: dict[str, str], *, scope: str = ""
    ) -> None:
        """Make ``entries`` (``{session_key: entry_json}``) the whole index of ``scope``,
        in one unit: keys absent from it are removed, other scopes are untouched.
        Pairs with an empty key or entry are skipped; ``None`` or ``{}`` empties the
        scope."""
        scope = _scope(scope)
        if entries is None:
            entries = {}
        if not isinstance(entries, Mapping):
            raise TypeError(
                f"entries must be a mapping of session_key to entry JSON, got "
                f"{type(entries).__name__}"
            )
        now = time.time()
        # a mapping is not scrubbed at the API boundary (only text and lists are)
        rows = [
            {"scope": scope, "session_key": scrub_surrogates(key),
             "entry_json": scrub_surrogates(_json_text(value, f"entries[{key!r}]")),
             "updated_at": now}
            for key, value in entries.items() if key and value
        ]

        def unit(conn: sa.Connection) -> None:
            conn.execute(sa.delete(R).where(R.c.scope == scope))
            if rows:
                conn.execute(sa.insert(R), rows)

        self._write(unit, locks=unit_locks.routing_scope(scope))

    def load_gateway_routing_entries(self, *, scope: str = "") -> dict[str, str]:
        """The index of ``scope`` as ``{session_key: entry_json}`` (``{}`` when empty)."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(R.c.session_key, R.c.entry_json).where(R.c.scope == scope)
            ).all()
        return {row.session_key: row.entry_json for row in rows}

    def delete_gateway_routing_entries(
        self, session_keys: list[str], *, scope: str = ""
    ) -> None:
        """Remove the given keys from the index of ``scope``; unknown keys are ignored."""
        if not session_keys:
            return
        if isinstance(session_keys, (str, bytes)):
            # iterating a string would delete one key per character
            raise TypeError("session_keys must be a list of keys, not a single string")
        scope = _scope(scope)
        keys = list(session_keys)

        def unit(conn: sa.Connection) -> None:
            conn.execute(sa.delete(R).where(R.c.scope == scope, R.c.session_key.in_(keys)))

        self._write(unit, locks=unit_locks.routing_scope(scope))

    # ------------------------------------------------------------------ session peers

    def record_gateway_session_peer(
        self,
        session_id: str,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        display_name: str | None = None,
        origin_json: str | None = None,
    ) -> None:
        """Write the routing peer onto an existing session row.

        ``source``, ``session_key``, ``user_id``, ``chat_id``, ``chat_type`` and
        ``thread_id`` are overwritten as given (None clears them); ``display_name`` and
        ``origin_json`` only change when given. Nothing happens without both a session
        id and a ``session_key``, or when the session does not exist.
        """
        if not session_id or not session_key:
            return
        if not source:
            raise InvalidArgumentError(
                "source is required: the platform the peer talks through (e.g. 'telegram')"
            )
        values: dict[str, Any] = {
            "session_key": session_key,
            "source": source,
            "user_id": _peer_text(user_id, "user_id"),
            "chat_id": _peer_text(chat_id, "chat_id"),
            "chat_type": chat_type,
            "thread_id": _peer_text(thread_id, "thread_id"),
        }
        if display_name is not None:
            values["display_name"] = display_name
        if origin_json is not None:
            values["origin_json"] = origin_json
        stmt = sa.update(S).where(S.c.id == session_id).values(**values)
        self._write(lambda conn: update_scoped(conn, session_id, lambda c: c.execute(stmt)),
                    locks=unit_locks.sessions(session_id))

    def find_latest_gateway_session_for_peer(
        self,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> dict[str, Any] | None:
        """The newest recoverable session (see ``_recoverable``) of a routing peer, as a
        session row, or None.

        Matched by ``session_key`` and ``source`` (exact, case-sensitive). When no row
        carries the key, and only then, a row whose complete peer — user, chat, chat
        type, thread, NULL and '' alike — equals the given one is accepted; without
        ``chat_id`` and ``chat_type`` there is no fallback. No ``session_key``: None.
        """
        if not session_key:
            return None
        by_key = [S.c.session_key == session_key, S.c.source == source]
        with self._read() as conn:
            row = self._newest_recoverable(conn, by_key)
            if row is None and chat_id is not None and chat_type is not None:
                by_peer = [
                    S.c.source == source,
                    _same_or_blank(S.c.user_id, _peer_text(user_id, "user_id")),
                    _same_or_blank(S.c.chat_id, _peer_text(chat_id, "chat_id")),
                    _same_or_blank(S.c.chat_type, chat_type),
                    _same_or_blank(S.c.thread_id, _peer_text(thread_id, "thread_id")),
                ]
                row = self._newest_recoverable(conn, by_peer)
        return row

    @staticmethod
    def _newest_recoverable(conn: sa.Connection, terms: Iterable) -> dict | None:
        row = conn.execute(
            sa.select(*session_columns())
            .where(*terms, _recoverable(S))
            .order_by(S.c.started_at.desc(), text_order(S.c.id).desc())
            .limit(1)
        ).first()
        return row_dict(row) if row is not None else None

    def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        """The id of the newest live gateway session (one with a ``session_key``) of a
        chat, or None.

        ``platform`` matches ``source`` case-insensitively; ``thread_id``, when given,
        must match ('' matches no thread). With ``user_id``, that sender's newest
        session wins; if the sender has none, the answer is the chat's only session,
        or None when there are several. Without ``user_id``, None when the chat's live
        sessions belong to more than one known user: never someone else's session.
        """
        if not platform or chat_id is None or chat_id == "":
            return None
        terms = [
            ascii_lower(S.c.source) == ascii_lower(sa.literal(platform, sa.Text())),
            S.c.session_key.is_not(None),
            S.c.chat_id == _peer_text(chat_id, "chat_id"),
            S.c.ended_at.is_(None),
        ]
        if thread_id is not None:
            terms.append(_same_or_blank(S.c.thread_id, _peer_text(thread_id, "thread_id")))
        with self._read() as conn:
            rows = conn.execute(
                sa.select(S.c.id, S.c.user_id)
                .where(*terms)
                .order_by(S.c.started_at.desc(), text_order(S.c.id).desc())
            ).all()
        if not rows:
            return None
        if user_id:
            wanted = str(user_id)
            for row in rows:
                if (row.user_id or "") == wanted:
                    return row.id
            return rows[0].id if len(rows) == 1 else None
        known_users = {(row.user_id or "").strip() for row in rows} - {""}
        return rows[0].id if len(known_users) <= 1 else None

    def list_gateway_sessions(
        self,
        *,
        platform: str | None = None,
        active_only: bool = True,
    ) -> list[dict[str, Any]]:
        """One session row per routing key — the key's newest session — with
        ``last_active`` (latest message, else start), most recently active first.

        ``platform`` filters on ``source`` case-insensitively; ``active_only`` drops
        keys whose newest session has ended (an older live one does not stand in).
        """
        newer = S.alias("newer")
        newest_of_key = sa.select(sa.func.max(newer.c.started_at)).where(
            newer.c.session_key == S.c.session_key
        ).scalar_subquery()
        latest_message = sa.select(sa.func.max(M.c.timestamp)).where(
            M.c.session_id == S.c.id
        ).scalar_subquery()
        last_active = sa.func.coalesce(latest_message, S.c.started_at)
        stmt = (
            sa.select(*session_columns(), last_active.label("last_active"))
            .where(S.c.session_key.is_not(None), S.c.started_at == newest_of_key)
            .order_by(last_active.desc(), S.c.started_at.desc(), text_order(S.c.id).desc())
        )
        if platform:
            stmt = stmt.where(
                ascii_lower(S.c.source) == ascii_lower(sa.literal(platform, sa.Text())))
        if active_only:
            stmt = stmt.where(S.c.ended_at.is_(None))
        with self._read() as conn:
            return [row_dict(r) for r in conn.execute(stmt)]
