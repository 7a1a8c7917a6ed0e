"""The messages concern of ``SessionDB``: a session's transcript.

Writing: ``append_message`` (one row + the session's counters, one unit),
``replace_messages`` / ``archive_and_compact`` (bulk rewrites), ``rewind_to_message`` /
``restore_rewound`` (soft delete and undo), ``clear_messages``,
``set_latest_user_api_content``.
Reading: ``get_messages``, ``get_messages_as_conversation`` (OpenAI replay shape),
``get_messages_around`` / ``get_anchored_view`` (windows), ``list_recent_user_messages``,
``message_count``, ``has_platform_message_id``, ``has_archived_messages``.

Storage conventions kept from upstream Hermes (other programs read the same file):

* list/dict ``content`` (multimodal parts) is stored as ``"\\x00json:" + JSON`` and
  decoded on read; ``tool_calls``, ``reasoning_details`` and ``codex_*`` are JSON text,
  an empty value stored as NULL;
* text never carries lone surrogates (replaced by U+FFFD: the driver cannot encode
  them, and one would fail the whole write) — text *arguments* are scrubbed alike, so an
  id given with one reaches the stored row;
* content of another type, or a JSON field ``json`` cannot encode, is refused
  (``InvalidArgumentError``) before anything is written;
* a JSON column holding text that is not JSON (another writer's bug) still reads:
  ``tool_calls`` falls back to ``[]``, the replay-only fields to ``None``, content to
  its raw text — each with a warning, never an exception.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Callable, Sequence

import sqlalchemy as sa

from .. import schema, unit_locks
from ..errors import InvalidArgumentError, SessionNotFoundError
from .base import RepositoryBase
from .conversation import (
    CONVERSATION_COLUMNS,
    conversation_entry,
    conversation_query,
    default_alternation_repair,
    is_replayed_prompt,
    without_review_harness,
)
from ..sql.constructs import limit_or_all, offset_or_zero, text_length
from .message_rows import (
    INSERT_MESSAGE,
    append_rows,
    bulk_rows,
    content_preview,
    decode_content,
    decoded_row,
    encode_content,
    epoch_seconds,
    message_row,
    tool_call_increment,
)
from ..sql.prebuilt import Prebuilt
from ..sql.values import scrub_surrogates

log = logging.getLogger(__name__)

M = schema.messages
S = schema.sessions


#: ``list_recent_user_messages`` preview length
RECENT_PREVIEW_CHARS = 80

_COUNT_ADDED = Prebuilt(
    sa.update(S)
    .where(S.c.id == sa.bindparam("counted_session", type_=sa.Text))
    .values(
        message_count=sa.func.coalesce(S.c.message_count, 0)
        + sa.bindparam("added_messages", type_=sa.Integer),
        tool_call_count=sa.func.coalesce(S.c.tool_call_count, 0)
        + sa.bindparam("added_calls", type_=sa.Integer),
    )
)
# append_messages: the ids a batch received (it holds the session row's lock, which every
# unit that adds rows to a session takes or waits for, and ids only grow, so its rows
# are exactly the session's rows above the largest id before it)
_LAST_MESSAGE_ID = Prebuilt(sa.select(sa.func.max(M.c.id)))
_SESSION_IDS_ABOVE = Prebuilt(
    sa.select(M.c.id)
    .where(M.c.session_id == sa.bindparam("batch_session", type_=sa.Text),
           M.c.id > sa.bindparam("above_id", type_=sa.Integer))
    .order_by(M.c.id)
)


_COUNT_SESSION_MESSAGES = Prebuilt(
    sa.select(sa.func.count()).select_from(M)
    .where(M.c.session_id == sa.bindparam("sid", type_=sa.Text))
)
_COUNT_ALL_MESSAGES = Prebuilt(sa.select(sa.func.count()).select_from(M))


@lru_cache(maxsize=None)
def _transcript(include_inactive: bool, limited: bool, offset: bool) -> Prebuilt:
    """``get_messages``'s statement for one shape (``:sid``, ``:limit``, ``:offset``)."""
    stmt = (sa.select(M).where(M.c.session_id == sa.bindparam("sid", type_=sa.Text))
            .order_by(M.c.id))
    if not include_inactive:
        stmt = stmt.where(M.c.active == 1)
    if limited:
        stmt = stmt.limit(limit_or_all(sa.bindparam("limit", type_=sa.Integer)))
    if offset:
        stmt = stmt.offset(offset_or_zero(sa.bindparam("offset", type_=sa.Integer)))
    return Prebuilt(stmt, paging=(("limit",) if limited else ()) + (("offset",) if offset else ()))


class MessagesMixin(RepositoryBase):
    """Transcript reads and writes (see the module docstring)."""

    #: ``repair_alternation=True`` hook: ``fn(messages)`` repairs the list in place.
    #: ``None`` = the Hermes agent's ``repair_message_sequence`` when importable.
    alternation_repair: Callable[[list], Any] | None = None

    _encode_content = staticmethod(encode_content)
    _decode_content = staticmethod(decode_content)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _session_must_exist(conn: sa.Connection, session_id: str) -> None:
        if conn.execute(sa.select(S.c.id).where(S.c.id == session_id)).first() is None:
            raise SessionNotFoundError(session_id)

    @staticmethod
    def _set_counters(conn: sa.Connection, session_id: str, messages: int, tool_calls: int):
        conn.execute(sa.update(S).where(S.c.id == session_id)
                     .values(message_count=messages, tool_call_count=tool_calls))

    # ------------------------------------------------------------------ writes

    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_content: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        effect_disposition: str | None = None,
        timestamp: Any = None,
        api_content: str | None = None,
    ) -> int:
        """Append one message and count it on its session; returns the new id.

        ``message_count`` grows by 1 and ``tool_call_count`` by ``len(tool_calls)``
        (a list) or 1 (any other non-None value), in the same unit as the insert.
        Raises ``SessionNotFoundError`` for an unknown session and
        ``InvalidArgumentError`` for a missing role or unserializable JSON field.
        """
        row = message_row(
            session_id, role, content=content, tool_name=tool_name, tool_calls=tool_calls,
            tool_call_id=tool_call_id, token_count=token_count, finish_reason=finish_reason,
            reasoning=reasoning, reasoning_content=reasoning_content,
            reasoning_details=reasoning_details, codex_reasoning_items=codex_reasoning_items,
            codex_message_items=codex_message_items, platform_message_id=platform_message_id,
            observed=observed, effect_disposition=effect_disposition,
            timestamp=epoch_seconds(timestamp, time.time()), api_content=api_content,
        )
        counted = {"counted_session": session_id, "added_messages": 1,
                   "added_calls": tool_call_increment(tool_calls)}

        def unit(conn: sa.Connection) -> int:
            # Counting first tells whether the session exists (no separate SELECT);
            # raising rolls the unit back, so nothing is written for an unknown one.
            if _COUNT_ADDED.execute(conn, counted).rowcount == 0:
                raise SessionNotFoundError(session_id)
            return INSERT_MESSAGE.insert(conn, row)

        # appends to one session queue on its lock, appends to others run side by side
        return self._write(unit, locks=unit_locks.sessions(session_id))

    def append_messages(self, session_id: str,
                        messages: Iterable[Mapping[str, Any]]) -> list[int]:
        """Append many messages in one write unit; returns their ids, in order.

        Each message is a dict of ``append_message``'s keyword arguments (``role``
        required, any other key refused) and is stored exactly as that call stores it;
        the counters grow once, by the batch's totals. A message without a timestamp
        gets the call's time, 1 µs after the previous such message, so order is kept.
        All or nothing: a bad message (``InvalidArgumentError`` naming its index) or an
        unknown session (``SessionNotFoundError``) writes nothing. An empty batch is a
        no-op that returns ``[]``.
        """
        rows, added_calls = append_rows(session_id, messages)
        if not rows:
            return []
        counted = {"counted_session": session_id, "added_messages": len(rows),
                   "added_calls": added_calls}

        def unit(conn: sa.Connection) -> list[int]:
            if _COUNT_ADDED.execute(conn, counted).rowcount == 0:
                raise SessionNotFoundError(session_id)
            above = _LAST_MESSAGE_ID.scalar(conn) or 0
            INSERT_MESSAGE.execute_many(conn, rows)
            return [row[0] for row in _SESSION_IDS_ABOVE.rows(
                conn, {"batch_session": session_id, "above_id": above})]

        # while this unit holds the session no other unit adds rows to it (imports run
        # alone), so its rows above ``above`` are the batch
        return self._write(unit, locks=unit_locks.sessions(session_id))

    def replace_messages(self, session_id: str, messages: list[dict],
                         active_only: bool = False) -> None:
        """Replace a session's transcript in one unit.

        Deletes every row (only the active ones with ``active_only=True``, keeping
        rewound and compaction-archived rows), inserts ``messages`` and sets the
        counters to the inserted totals. An empty list on an unknown session is a no-op;
        a non-empty one raises ``SessionNotFoundError``.
        """
        rows, tool_calls = bulk_rows(session_id, messages)

        def unit(conn: sa.Connection) -> None:
            if rows:
                self._session_must_exist(conn, session_id)
            doomed = sa.delete(M).where(M.c.session_id == session_id)
            if active_only:
                doomed = doomed.where(M.c.active == 1)
            conn.execute(doomed)
            if rows:
                INSERT_MESSAGE.execute_many(conn, rows)
            self._set_counters(conn, session_id, len(rows), tool_calls)

        self._write(unit, locks=unit_locks.sessions(session_id))

    def archive_and_compact(self, session_id: str, compacted_messages: list[dict]) -> int:
        """Compact in place without losing history; returns the number of rows inserted.

        The active rows become ``active=0, compacted=1`` (hidden from replay, still
        found by search), ``compacted_messages`` are inserted as the new live rows,
        and the counters describe the live set.
        """
        rows, tool_calls = bulk_rows(session_id, compacted_messages)

        def unit(conn: sa.Connection) -> int:
            if rows:
                self._session_must_exist(conn, session_id)
            conn.execute(
                sa.update(M).where(M.c.session_id == session_id, M.c.active == 1)
                .values(active=0, compacted=1)
            )
            if rows:
                INSERT_MESSAGE.execute_many(conn, rows)
            self._set_counters(conn, session_id, len(rows), tool_calls)
            return len(rows)

        return self._write(unit, locks=unit_locks.sessions(session_id))

    def set_latest_user_api_content(self, session_id: str, content: Any,
                                    api_content: str) -> int:
        """Store ``api_content`` on the newest active user row if its content equals
        ``content`` (a guard against a racing rewrite); returns rows updated (0/1)."""
        encoded = encode_content(content)
        newest_user = (
            sa.select(M.c.id)
            .where(M.c.session_id == session_id, M.c.role == "user", M.c.active == 1)
            .order_by(M.c.id.desc()).limit(1).scalar_subquery()
        )

        def unit(conn: sa.Connection) -> int:
            result = conn.execute(
                sa.update(M)
                .where(M.c.id == newest_user, M.c.content.is_not_distinct_from(encoded))
                .values(api_content=scrub_surrogates(api_content))
            )
            return result.rowcount

        return self._write(unit, locks=unit_locks.sessions(session_id))

    def rewind_to_message(self, session_id: str, target_message_id: int) -> dict:
        """Soft-delete a user message and everything after it (``active=0``).

        Returns ``{"rewound_count", "target_message", "new_head_id"}``; the target's
        content is decoded so a UI can offer it for editing. ``rewind_count`` grows on
        every call; ``message_count`` is left alone (upstream). Raises
        ``InvalidArgumentError`` (a ``ValueError``) with upstream's texts when the
        target is not in the session or is not a user message.
        """

        def unit(conn: sa.Connection) -> dict:
            target = conn.execute(
                sa.select(M).where(M.c.id == target_message_id, M.c.session_id == session_id)
            ).first()
            if target is None:
                raise InvalidArgumentError(
                    f"message {target_message_id} not found in session {session_id}")
            if target.role != "user":
                raise InvalidArgumentError(
                    f"rewind target must be a 'user' message (got role={target.role!r}, "
                    f"id={target_message_id})")
            newly_hidden = conn.execute(
                sa.update(M)
                .where(M.c.session_id == session_id, M.c.id >= target_message_id,
                       M.c.active == 1)
                .values(active=0)
            ).rowcount
            conn.execute(
                sa.update(S).where(S.c.id == session_id)
                .values(rewind_count=sa.func.coalesce(S.c.rewind_count, 0) + 1)
            )
            new_head = conn.execute(
                sa.select(sa.func.max(M.c.id))
                .where(M.c.session_id == session_id, M.c.active == 1)
            ).scalar()
            target_row = dict(target._mapping)
            target_row["content"] = decode_content(target_row["content"])
            return {"rewound_count": newly_hidden, "target_message": target_row,
                    "new_head_id": new_head}

        return self._write(unit, locks=unit_locks.sessions(session_id))

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Re-activate inactive rows with ``id >= since_message_id``; returns how many."""

        def unit(conn: sa.Connection) -> int:
            return conn.execute(
                sa.update(M)
                .where(M.c.session_id == session_id, M.c.id >= since_message_id,
                       M.c.active == 0)
                .values(active=1)
            ).rowcount

        return self._write(unit, locks=unit_locks.sessions(session_id))

    def clear_messages(self, session_id: str) -> None:
        """Delete every message of the session (active or not) and zero its counters.
        The session row stays; an unknown session is a no-op."""

        def unit(conn: sa.Connection) -> None:
            conn.execute(sa.delete(M).where(M.c.session_id == session_id))
            self._set_counters(conn, session_id, 0, 0)

        self._write(unit, locks=unit_locks.sessions(session_id))

    # ------------------------------------------------------------------ reads

    def get_messages(self, session_id: str, include_inactive: bool = False,
                     limit: int | None = None, offset: int = 0) -> list[dict]:
        """The session's rows in insertion (id) order, every column, content and
        ``tool_calls`` decoded (``reasoning_details``/``codex_*`` stay JSON text).
        Active rows only unless ``include_inactive``; ``limit``/``offset`` page."""
        statement = _transcript(bool(include_inactive), limit is not None, bool(offset))
        rows = self._query(statement, {"sid": session_id, "limit": limit, "offset": offset})
        keys = statement.keys
        return [decoded_row(row, keys) for row in rows]

    def get_messages_as_conversation(self, session_id: str, include_ancestors: bool = False,
                                     include_inactive: bool = False,
                                     repair_alternation: bool = False) -> list[dict]:
        """The transcript as an OpenAI-style message list, ready to replay.

        ``include_ancestors`` prepends the messages of every parent session (root
        first), dropping a user prompt a resumed segment re-sent. Leaked memory-context
        blocks and background-review harness turns are removed. ``repair_alternation``
        runs ``alternation_repair`` (the agent's sequence repair) on the result.
        """
        if include_ancestors:
            with self._read() as conn:
                # _parent_chain (lineage concern) joins this snapshot
                ids = list(reversed(self._parent_chain(session_id))) or [session_id]
                stmt = (sa.select(*CONVERSATION_COLUMNS)
                        .where(M.c.session_id.in_(ids)).order_by(M.c.id))
                if not include_inactive:
                    stmt = stmt.where(M.c.active == 1)
                rows = conn.execute(stmt).all()
        else:  # one statement: a snapshot by itself
            rows = self._query(conversation_query(bool(include_inactive)), {"sid": session_id})
        return self._rows_to_conversation(rows, include_ancestors=include_ancestors,
                                          repair_alternation=repair_alternation)

    def _rows_to_conversation(self, rows: Iterable, *, include_ancestors: bool,
                              repair_alternation: bool) -> list[dict]:
        """Rows of ``CONVERSATION_COLUMNS`` (id order) as the replay list: decoded,
        replayed prompts dropped across segments when ``include_ancestors``, review
        harness turns removed, alternation repaired when asked."""
        messages: list[dict] = []
        for row in rows:
            msg = conversation_entry(row)
            if include_ancestors and is_replayed_prompt(messages, msg):
                continue
            messages.append(msg)
        messages = without_review_harness(messages)
        if repair_alternation and messages:
            repair = self.alternation_repair or default_alternation_repair()
            if repair is None:
                log.warning("repair_alternation=True but no repair is available (set "
                            "SessionDB.alternation_repair); returning the stored sequence")
            else:
                repair(messages)
        return messages

    def get_messages_around(self, session_id: str, around_message_id: int,
                            window: int = 5) -> dict:
        """Up to ``window`` messages either side of an anchor, active or not.

        Returns ``{"window": [...], "messages_before": n, "messages_after": n}`` (id
        order); an anchor not in the session gives an empty window and zero counts.
        """
        window = max(0, int(window))
        with self._read() as conn:
            anchor = conn.execute(
                sa.select(M.c.id).where(M.c.id == around_message_id,
                                        M.c.session_id == session_id)
            ).first()
            if anchor is None:
                return {"window": [], "messages_before": 0, "messages_after": 0}
            upto_anchor = conn.execute(
                sa.select(M).where(M.c.session_id == session_id, M.c.id <= around_message_id)
                .order_by(M.c.id.desc()).limit(window + 1)
            ).all()
            after = conn.execute(
                sa.select(M).where(M.c.session_id == session_id, M.c.id > around_message_id)
                .order_by(M.c.id).limit(window)
            ).all()
        rows = list(reversed(upto_anchor)) + list(after)
        return {
            "window": [decoded_row(r) for r in rows],
            "messages_before": len(upto_anchor) - 1,
            "messages_after": len(after),
        }

    def get_anchored_view(self, session_id: str, around_message_id: int, window: int = 5,
                          bookend: int = 3,
                          keep_roles: Sequence[str] | None = ("user", "assistant")) -> dict:
        """``get_messages_around`` plus the session's opening and closing turns.

        The window keeps only ``keep_roles`` (the anchor always stays);
        ``bookend_start``/``bookend_end`` are the first/last ``bookend`` non-empty
        messages of those roles outside the window (``keep_roles=None``: any role).
        """
        bookend = max(0, int(bookend))
        # SQLite's length(): a multimodal "\x00json:…" message counts as empty
        nonempty = [M.c.session_id == session_id, text_length(M.c.content) > 0]
        if keep_roles is not None:
            nonempty.append(M.c.role.in_(list(keep_roles)))
        with self._read() as conn:  # one snapshot: get_messages_around joins it
            view = self.get_messages_around(session_id, around_message_id, window=window)
            rows = view["window"]
            head = tail = []
            if rows and bookend:
                head = conn.execute(
                    sa.select(M).where(*nonempty, M.c.id < rows[0]["id"])
                    .order_by(M.c.id).limit(bookend)
                ).all()
                tail = conn.execute(
                    sa.select(M).where(*nonempty, M.c.id > rows[-1]["id"])
                    .order_by(M.c.id.desc()).limit(bookend)
                ).all()
        if keep_roles is not None:
            keep = set(keep_roles)
            view["window"] = [m for m in rows
                              if m["id"] == around_message_id or m["role"] in keep]
        view["bookend_start"] = [decoded_row(r) for r in head]
        view["bookend_end"] = [decoded_row(r) for r in reversed(tail)]
        return view

    def list_recent_user_messages(self, session_id: str, limit: int = 20,
                                  include_inactive: bool = False) -> list[dict]:
        """Newest user messages first as ``{"id", "timestamp", "preview"}`` (a rewind
        picker); the preview is whitespace-collapsed, cut to 77 chars + "..." past 80."""
        stmt = (sa.select(M.c.id, M.c.timestamp, M.c.content)
                .where(M.c.session_id == session_id, M.c.role == "user")
                .order_by(M.c.id.desc()).limit(limit_or_all(int(limit))))
        if not include_inactive:
            stmt = stmt.where(M.c.active == 1)
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        out = []
        for row in rows:
            preview = " ".join(content_preview(decode_content(row.content)).split())
            if len(preview) > RECENT_PREVIEW_CHARS:
                preview = preview[:RECENT_PREVIEW_CHARS - 3] + "..."
            out.append({"id": row.id, "timestamp": row.timestamp, "preview": preview})
        return out

    def message_count(self, session_id: str | None = None) -> int:
        """Rows stored for a session (or in all sessions), rewound/archived included."""
        if session_id:
            return int(self._query(_COUNT_SESSION_MESSAGES, {"sid": session_id})[0][0])
        return int(self._query(_COUNT_ALL_MESSAGES)[0][0])

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Whether the session already stored the platform's message (retry dedupe)."""
        stmt = sa.select(sa.literal(1)).where(
            M.c.session_id == session_id, M.c.platform_message_id == platform_message_id
        ).limit(1)
        with self._read() as conn:
            return conn.execute(stmt).first() is not None

    def has_archived_messages(self, session_id: str) -> bool:
        """Whether the session has any inactive (rewound or compacted) row."""
        stmt = sa.select(sa.literal(1)).where(
            M.c.session_id == session_id, M.c.active == 0
        ).limit(1)
        with self._read() as conn:
            return conn.execute(stmt).first() is not None
