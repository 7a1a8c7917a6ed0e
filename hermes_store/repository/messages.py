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

import inspect
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Callable, Sequence

import sqlalchemy as sa

from .. import schema
from ..errors import InvalidArgumentError, SessionNotFoundError
from .base import RepositoryBase
from .dialect import limit_or_all, offset_or_zero
from .prebuilt import Prebuilt
from .values import scrub_surrogates

log = logging.getLogger(__name__)

M = schema.messages
S = schema.sessions

#: prefix marking JSON-encoded (list/dict) content; NUL cannot start real text
CONTENT_JSON_PREFIX = "\x00json:"
#: ``list_recent_user_messages`` preview length
RECENT_PREVIEW_CHARS = 80

_JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items", "codex_message_items")
_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")

# A recalled-memory block the agent injected into a turn and that leaked into the
# stored text; replaying it would feed the model its own memory as user input.
_MEMORY_BLOCK = re.compile(r"<\s*memory-context\s*>.*?<\s*/\s*memory-context\s*>",
                           re.IGNORECASE | re.DOTALL)
_MEMORY_NOTE = re.compile(
    r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\."
    r"\s*Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
    re.IGNORECASE,
)
_MEMORY_TAG = re.compile(r"<\s*/?\s*memory-context\s*>", re.IGNORECASE)
_MEMORY_WORD = re.compile(r"memory", re.IGNORECASE)

# Prompts of the background skill/memory review that older agents wrote into the real
# session; replayed, they turn the agent into the reviewer.
_REVIEW_HARNESS_OPENINGS = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)

#: the message columns a replay (conversation) entry is built from
CONVERSATION_COLUMNS = (
    M.c.role, M.c.content, M.c.tool_call_id, M.c.tool_calls, M.c.tool_name,
    M.c.effect_disposition, M.c.finish_reason, M.c.reasoning, M.c.reasoning_content,
    M.c.reasoning_details, M.c.codex_reasoning_items, M.c.codex_message_items,
    M.c.platform_message_id, M.c.observed, M.c.timestamp, M.c.api_content,
)

# The hot write path runs prebuilt statements with bound values: a statement built per
# call (19 literal values) cost SQLAlchemy more CPU than SQLite's own work for the row.
# (_INSERT_MESSAGE is built below _message_row, whose keys it names)
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
    return Prebuilt(stmt)


@lru_cache(maxsize=None)
def _conversation(include_inactive: bool) -> Prebuilt:
    """``get_messages_as_conversation``'s statement for one session."""
    stmt = (sa.select(*CONVERSATION_COLUMNS)
            .where(M.c.session_id == sa.bindparam("sid", type_=sa.Text)).order_by(M.c.id))
    if not include_inactive:
        stmt = stmt.where(M.c.active == 1)
    return Prebuilt(stmt)


# --------------------------------------------------------------------------- encoding

def encode_content(content: Any) -> Any:
    """The stored form of message content (see module docstring)."""
    if isinstance(content, str):
        return scrub_surrogates(content)
    if content is None or isinstance(content, (bytes, int, float)):
        return content
    if not isinstance(content, (list, dict)):
        raise InvalidArgumentError(
            f"message content must be text, a list/dict of parts, a number or bytes (got "
            f"{type(content).__name__}); convert it first. Nothing was written."
        )
    # ensure_ascii (the default) escapes surrogates, so the text is always bindable
    return CONTENT_JSON_PREFIX + _dumps(content, "content")


def decode_content(stored: Any) -> Any:
    if isinstance(stored, str) and stored.startswith(CONTENT_JSON_PREFIX):
        try:
            return json.loads(stored[len(CONTENT_JSON_PREFIX):])
        except (ValueError, RecursionError):
            log.warning("message content carries the JSON marker but is not JSON; "
                        "returning the stored text")
    return stored


def content_preview(decoded: Any) -> str:
    """Plain text of decoded content: the text parts of multimodal content."""
    if isinstance(decoded, list):
        parts = [p.get("text", "") for p in decoded
                 if isinstance(p, dict) and p.get("type") == "text"]
        return " ".join(t for t in parts if t).strip() or "[multimodal content]"
    return decoded if isinstance(decoded, str) else ""


def _dumps(value: Any, field: str) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidArgumentError(
            f"{field} must be JSON-serializable (lists/dicts of str, numbers, bools, "
            f"None): {reason}; nothing was written"
        ) from None


def _json_or_none(value: Any, field: str) -> str | None:
    return _dumps(value, field) if value else None


def _load_json(text: Any, field: str, fallback: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        log.warning("messages.%s holds text that is not JSON; returning %r", field, fallback)
        return fallback


def _tool_call_increment(tool_calls: Any) -> int:
    """How much a message adds to ``sessions.tool_call_count`` (upstream's rule)."""
    if tool_calls is None:
        return 0
    return len(tool_calls) if isinstance(tool_calls, list) else 1


def _timestamp(value: Any, default: float) -> float:
    """Epoch seconds from a number or anything with ``.timestamp()``; else ``default``."""
    if value is None:
        return default
    try:
        ts = float(value.timestamp()) if hasattr(value, "timestamp") else float(value)
    except (TypeError, ValueError, OverflowError, OSError):
        log.debug("ignoring unusable message timestamp %r", value)
        return default
    # NaN/inf would be stored as NULL and break the NOT NULL column
    return ts if math.isfinite(ts) else default


def _message_row(session_id: str, role: Any, *, content=None, tool_name=None,
                 tool_calls=None, tool_call_id=None, token_count=None, finish_reason=None,
                 reasoning=None, reasoning_content=None, reasoning_details=None,
                 codex_reasoning_items=None, codex_message_items=None,
                 platform_message_id=None, observed=False, effect_disposition=None,
                 timestamp: float, api_content=None) -> dict:
    if role is None or not isinstance(role, str):
        raise InvalidArgumentError(
            f"a message needs a role such as 'user', 'assistant' or 'tool' (got {role!r}); "
            "nothing was written"
        )
    return {
        "session_id": session_id,
        "role": scrub_surrogates(role),
        "content": encode_content(content),
        "tool_call_id": scrub_surrogates(tool_call_id),
        "tool_calls": _json_or_none(tool_calls, "tool_calls"),
        "tool_name": scrub_surrogates(tool_name),
        "effect_disposition": scrub_surrogates(effect_disposition),
        "timestamp": timestamp,
        "token_count": token_count,
        "finish_reason": scrub_surrogates(finish_reason),
        "reasoning": scrub_surrogates(reasoning),
        "reasoning_content": scrub_surrogates(reasoning_content),
        "reasoning_details": _json_or_none(reasoning_details, "reasoning_details"),
        "codex_reasoning_items": _json_or_none(codex_reasoning_items, "codex_reasoning_items"),
        "codex_message_items": _json_or_none(codex_message_items, "codex_message_items"),
        "platform_message_id": scrub_surrogates(platform_message_id),
        "observed": 1 if observed else 0,
        "active": 1,
        "api_content": scrub_surrogates(api_content) if isinstance(api_content, str) else None,
    }


# the INSERT names exactly the columns a message row carries
_INSERT_MESSAGE = Prebuilt(sa.insert(M),
                           column_keys=tuple(_message_row("", "user", timestamp=0.0)))

#: the keys a message of ``append_messages`` may carry (``append_message``'s arguments)
_APPEND_FIELDS = ("role", "timestamp") + tuple(
    name for name in inspect.signature(_message_row).parameters
    if name not in ("session_id", "role", "timestamp")
)


def _bulk_rows(session_id: str, messages: Sequence[dict]) -> tuple[list[dict], int]:
    """Rows for ``replace_messages``/``archive_and_compact`` and their tool-call total.

    Built before the write unit, so a bad message fails the call before anything is
    written, and a retried unit inserts exactly the same rows.
    """
    if not isinstance(messages, (list, tuple)):
        raise InvalidArgumentError(
            f"messages must be a list of dicts (got {type(messages).__name__}); "
            "nothing was written"
        )
    rows: list[dict] = []
    tool_calls_total = 0
    next_ts = time.time()
    for index, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidArgumentError(
                f"messages[{index}] must be a dict (got {type(msg).__name__}); "
                "nothing was written"
            )
        role = msg.get("role", "unknown")
        ts = _timestamp(msg.get("timestamp"), next_ts)
        fields = {k: msg.get(k) for k in _ASSISTANT_ONLY} if role == "assistant" else {}
        try:
            rows.append(_message_row(
                session_id, role,
                content=msg.get("content"),
                tool_name=msg.get("tool_name"),
                tool_calls=msg.get("tool_calls"),
                tool_call_id=msg.get("tool_call_id"),
                token_count=msg.get("token_count"),
                finish_reason=msg.get("finish_reason"),
                platform_message_id=msg.get("platform_message_id") or msg.get("message_id"),
                observed=msg.get("observed"),
                effect_disposition=msg.get("effect_disposition"),
                timestamp=ts,
                api_content=msg.get("api_content"),
                **fields,
            ))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"messages[{index}]: {exc}") from None
        tool_calls_total += _tool_call_increment(msg.get("tool_calls"))
        # rows without a timestamp stay in order even on a coarse clock
        next_ts = max(next_ts + 1e-6, ts + 1e-6)
    return rows, tool_calls_total


def _append_rows(session_id: str, messages: Iterable[Mapping[str, Any]]) -> tuple[list[dict], int]:
    """Rows for ``append_messages`` (``append_message``'s rules) and their tool-call total.

    Built before the write unit: a bad message fails the call before anything is
    written, and a retried unit inserts exactly the same rows.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidArgumentError(
            f"messages must be an iterable of dicts (got {type(messages).__name__}); "
            "nothing was written"
        )
    rows: list[dict] = []
    tool_calls_total = 0
    unstamped = time.time()
    for index, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise InvalidArgumentError(
                f"messages[{index}] must be a dict (got {type(msg).__name__}); "
                "nothing was written"
            )
        unknown = sorted(str(k) for k in msg if k not in _APPEND_FIELDS)
        if unknown:
            raise InvalidArgumentError(
                f"messages[{index}] has unknown field(s) {', '.join(map(repr, unknown))}; "
                f"a message takes append_message's arguments ({', '.join(_APPEND_FIELDS)}). "
                "Nothing was written."
            )
        fields = dict(msg)
        role = fields.pop("role", None)
        stamp = fields.pop("timestamp", None)
        try:
            rows.append(_message_row(session_id, role, timestamp=_timestamp(stamp, unstamped),
                                     **fields))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"messages[{index}]: {exc}") from None
        tool_calls_total += _tool_call_increment(fields.get("tool_calls"))
        # as separate calls would on a fine clock: unstamped rows keep their order
        unstamped += 1e-6
    return rows, tool_calls_total


def _decoded_row(row, keys=None) -> dict:
    """A full message row as a dict, content and tool_calls decoded. ``keys`` (the
    result's column names, taken once per result) spares a mapping per row, which
    is most of the cost of reading a long transcript."""
    msg = dict(zip(keys, row)) if keys is not None else dict(row._mapping)
    msg["content"] = decode_content(msg.get("content"))
    if msg.get("tool_calls"):
        msg["tool_calls"] = _load_json(msg["tool_calls"], "tool_calls", [])
    return msg


def strip_memory_context(text: str) -> str:
    """Remove recalled-memory blocks, their system note and stray fence tags."""
    if not _MEMORY_WORD.search(text):  # what each of the three patterns needs
        return text
    text = _MEMORY_BLOCK.sub("", text)
    text = _MEMORY_NOTE.sub("", text)
    return _MEMORY_TAG.sub("", text)


def _is_review_harness(msg: dict) -> bool:
    content = msg.get("content")
    return (msg.get("role") in ("user", "system") and isinstance(content, str)
            and content.lstrip().startswith(_REVIEW_HARNESS_OPENINGS))


def _without_review_harness(messages: list[dict]) -> list[dict]:
    """Drop review-harness prompts and the assistant turn that answered each."""
    out: list[dict] = []
    answering = False
    for msg in messages:
        if _is_review_harness(msg):
            answering = True
            continue
        if answering:
            answering = False
            if msg.get("role") == "assistant":
                continue
        out.append(msg)
    return out


def _is_replayed_prompt(earlier: list[dict], msg: dict) -> bool:
    """A user turn repeating an earlier user turn with no assistant output between
    (a resumed session re-sends its last prompt; across segments it would show twice)."""
    content = msg.get("content")
    if msg.get("role") != "user" or not isinstance(content, str) or not content:
        return False
    for prev in reversed(earlier):
        if prev.get("role") == "user" and prev.get("content") == content:
            return True
        if prev.get("role") == "assistant" and (prev.get("content") or prev.get("tool_calls")):
            return False
    return False


def _conversation_entry(row) -> dict:
    """One replay message from a row ending with ``CONVERSATION_COLUMNS`` (in that
    order; a query may select columns of its own before them, such as the session id)."""
    (role, content, tool_call_id, tool_calls, tool_name, effect_disposition, finish_reason,
     reasoning, reasoning_content, reasoning_details, codex_reasoning_items,
     codex_message_items, platform_message_id, observed, timestamp,
     api_content) = row[len(row) - len(CONVERSATION_COLUMNS):]
    content = decode_content(content)
    if role in ("user", "assistant") and isinstance(content, str):
        content = strip_memory_context(content).strip()
    msg: dict[str, Any] = {"role": role, "content": content}
    if api_content:
        msg["api_content"] = api_content  # verbatim: it is the exact wire text
    if timestamp:
        msg["timestamp"] = timestamp
    if tool_call_id:
        msg["tool_call_id"] = tool_call_id
    if tool_name:
        msg["tool_name"] = tool_name
    if effect_disposition:
        msg["effect_disposition"] = effect_disposition
    if tool_calls:
        msg["tool_calls"] = _load_json(tool_calls, "tool_calls", [])
    if platform_message_id:
        msg["message_id"] = platform_message_id
    if observed:
        msg["observed"] = True
    if role == "assistant":
        if finish_reason:
            msg["finish_reason"] = finish_reason
        if reasoning:
            msg["reasoning"] = reasoning
        if reasoning_content is not None:
            msg["reasoning_content"] = reasoning_content
        for field, stored in (("reasoning_details", reasoning_details),
                              ("codex_reasoning_items", codex_reasoning_items),
                              ("codex_message_items", codex_message_items)):
            if stored:
                msg[field] = _load_json(stored, field, None)
    return msg


def _default_alternation_repair() -> Callable[[list], Any] | None:
    try:  # the agent package ships the repair; the store does not depend on it
        from agent.agent_runtime_helpers import repair_message_sequence
    except ImportError:
        return None
    return lambda messages: repair_message_sequence(None, messages)


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
        row = _message_row(
            session_id, role, content=content, tool_name=tool_name, tool_calls=tool_calls,
            tool_call_id=tool_call_id, token_count=token_count, finish_reason=finish_reason,
            reasoning=reasoning, reasoning_content=reasoning_content,
            reasoning_details=reasoning_details, codex_reasoning_items=codex_reasoning_items,
            codex_message_items=codex_message_items, platform_message_id=platform_message_id,
            observed=observed, effect_disposition=effect_disposition,
            timestamp=_timestamp(timestamp, time.time()), api_content=api_content,
        )
        counted = {"counted_session": session_id, "added_messages": 1,
                   "added_calls": _tool_call_increment(tool_calls)}

        def unit(conn: sa.Connection) -> int:
            # Counting first tells whether the session exists (no separate SELECT);
            # raising rolls the unit back, so nothing is written for an unknown one.
            if _COUNT_ADDED.execute(conn, counted).rowcount == 0:
                raise SessionNotFoundError(session_id)
            return _INSERT_MESSAGE.insert(conn, row)

        # concurrent: the counter UPDATE locks the session's row first, so appends to one
        # session queue there and appends to others run side by side (PostgreSQL)
        return self._write(unit, concurrent=True)

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
        rows, added_calls = _append_rows(session_id, messages)
        if not rows:
            return []
        counted = {"counted_session": session_id, "added_messages": len(rows),
                   "added_calls": added_calls}

        def unit(conn: sa.Connection) -> list[int]:
            if _COUNT_ADDED.execute(conn, counted).rowcount == 0:
                raise SessionNotFoundError(session_id)
            above = _LAST_MESSAGE_ID.scalar(conn) or 0
            _INSERT_MESSAGE.execute_many(conn, rows)
            return [row[0] for row in _SESSION_IDS_ABOVE.rows(
                conn, {"batch_session": session_id, "above_id": above})]

        # concurrent, as append_message: while this unit holds the session's row lock no
        # other unit adds rows to the session, so its rows above ``above`` are the batch
        return self._write(unit, concurrent=True)

    def replace_messages(self, session_id: str, messages: list[dict],
                         active_only: bool = False) -> None:
        """Replace a session's transcript in one unit.

        Deletes every row (only the active ones with ``active_only=True``, keeping
        rewound and compaction-archived rows), inserts ``messages`` and sets the
        counters to the inserted totals. An empty list on an unknown session is a no-op;
        a non-empty one raises ``SessionNotFoundError``.
        """
        rows, tool_calls = _bulk_rows(session_id, messages)

        def unit(conn: sa.Connection) -> None:
            if rows:
                self._session_must_exist(conn, session_id)
            doomed = sa.delete(M).where(M.c.session_id == session_id)
            if active_only:
                doomed = doomed.where(M.c.active == 1)
            conn.execute(doomed)
            if rows:
                _INSERT_MESSAGE.execute_many(conn, rows)
            self._set_counters(conn, session_id, len(rows), tool_calls)

        self._write(unit)

    def archive_and_compact(self, session_id: str, compacted_messages: list[dict]) -> int:
        """Compact in place without losing history; returns the number of rows inserted.

        The active rows become ``active=0, compacted=1`` (hidden from replay, still
        found by search), ``compacted_messages`` are inserted as the new live rows,
        and the counters describe the live set.
        """
        rows, tool_calls = _bulk_rows(session_id, compacted_messages)

        def unit(conn: sa.Connection) -> int:
            if rows:
                self._session_must_exist(conn, session_id)
            conn.execute(
                sa.update(M).where(M.c.session_id == session_id, M.c.active == 1)
                .values(active=0, compacted=1)
            )
            if rows:
                _INSERT_MESSAGE.execute_many(conn, rows)
            self._set_counters(conn, session_id, len(rows), tool_calls)
            return len(rows)

        return self._write(unit)

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

        return self._write(unit)

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

        return self._write(unit)

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Re-activate inactive rows with ``id >= since_message_id``; returns how many."""

        def unit(conn: sa.Connection) -> int:
            return conn.execute(
                sa.update(M)
                .where(M.c.session_id == session_id, M.c.id >= since_message_id,
                       M.c.active == 0)
                .values(active=1)
            ).rowcount

        return self._write(unit)

    def clear_messages(self, session_id: str) -> None:
        """Delete every message of the session (active or not) and zero its counters.
        The session row stays; an unknown session is a no-op."""

        def unit(conn: sa.Connection) -> None:
            conn.execute(sa.delete(M).where(M.c.session_id == session_id))
            self._set_counters(conn, session_id, 0, 0)

        self._write(unit)

    # ------------------------------------------------------------------ reads

    def get_messages(self, session_id: str, include_inactive: bool = False,
                     limit: int | None = None, offset: int = 0) -> list[dict]:
        """The session's rows in insertion (id) order, every column, content and
        ``tool_calls`` decoded (``reasoning_details``/``codex_*`` stay JSON text).
        Active rows only unless ``include_inactive``; ``limit``/``offset`` page."""
        statement = _transcript(bool(include_inactive), limit is not None, bool(offset))
        rows = self._query(statement, {"sid": session_id, "limit": limit, "offset": offset})
        keys = statement.keys
        return [_decoded_row(row, keys) for row in rows]

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
            rows = self._query(_conversation(bool(include_inactive)), {"sid": session_id})
        return self._rows_to_conversation(rows, include_ancestors=include_ancestors,
                                          repair_alternation=repair_alternation)

    def _rows_to_conversation(self, rows: Iterable, *, include_ancestors: bool,
                              repair_alternation: bool) -> list[dict]:
        """Rows of ``CONVERSATION_COLUMNS`` (id order) as the replay list: decoded,
        replayed prompts dropped across segments when ``include_ancestors``, review
        harness turns removed, alternation repaired when asked."""
        messages: list[dict] = []
        for row in rows:
            msg = _conversation_entry(row)
            if include_ancestors and _is_replayed_prompt(messages, msg):
                continue
            messages.append(msg)
        messages = _without_review_harness(messages)
        if repair_alternation and messages:
            repair = self.alternation_repair or _default_alternation_repair()
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
            "window": [_decoded_row(r) for r in rows],
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
        nonempty = [M.c.session_id == session_id, sa.func.length(M.c.content) > 0]
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
        view["bookend_start"] = [_decoded_row(r) for r in head]
        view["bookend_end"] = [_decoded_row(r) for r in reversed(tail)]
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
