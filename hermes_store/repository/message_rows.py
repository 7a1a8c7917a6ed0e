"""How a message is stored: content and JSON fields encoded, rows built for inserts.

Storage conventions kept from upstream Hermes (other programs read the same file):
``content`` that is a list/dict (multimodal parts) is stored as ``"\\x00json:" + JSON``;
``tool_calls``, ``reasoning_details`` and ``codex_*`` are JSON text, an empty value NULL;
text never carries lone surrogates; a JSON column holding text that is not JSON (another
writer's bug) still reads, with a warning. ``messages.py`` (the concern) and
``importing.py`` write rows built here.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any, Sequence

import sqlalchemy as sa

from .. import schema
from ..errors import InvalidArgumentError
from ..sql.prebuilt import Prebuilt
from ..sql.values import scrub_surrogates

log = logging.getLogger(__name__)

M = schema.messages
S = schema.sessions


#: prefix marking JSON-encoded (list/dict) content; NUL cannot start real text
CONTENT_JSON_PREFIX = "\x00json:"

_JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items", "codex_message_items")
_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")


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


def load_json(text: Any, field: str, fallback: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        log.warning("messages.%s holds text that is not JSON; returning %r", field, fallback)
        return fallback


def tool_call_increment(tool_calls: Any) -> int:
    """How much a message adds to ``sessions.tool_call_count`` (upstream's rule)."""
    if tool_calls is None:
        return 0
    return len(tool_calls) if isinstance(tool_calls, list) else 1


def epoch_seconds(value: Any, default: float) -> float:
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


def message_row(session_id: str, role: Any, *, content=None, tool_name=None,
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
INSERT_MESSAGE = Prebuilt(sa.insert(M),
                           column_keys=tuple(message_row("", "user", timestamp=0.0)))

#: the keys a message of ``append_messages`` may carry (``append_message``'s arguments)
_APPEND_FIELDS = ("role", "timestamp") + tuple(
    name for name in inspect.signature(message_row).parameters
    if name not in ("session_id", "role", "timestamp")
)


def bulk_rows(session_id: str, messages: Sequence[dict]) -> tuple[list[dict], int]:
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
        ts = epoch_seconds(msg.get("timestamp"), next_ts)
        fields = {k: msg.get(k) for k in _ASSISTANT_ONLY} if role == "assistant" else {}
        try:
            rows.append(message_row(
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
        tool_calls_total += tool_call_increment(msg.get("tool_calls"))
        # rows without a timestamp stay in order even on a coarse clock
        next_ts = max(next_ts + 1e-6, ts + 1e-6)
    return rows, tool_calls_total


def append_rows(session_id: str, messages: Iterable[Mapping[str, Any]]) -> tuple[list[dict], int]:
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
            rows.append(message_row(session_id, role, timestamp=epoch_seconds(stamp, unstamped),
                                     **fields))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"messages[{index}]: {exc}") from None
        tool_calls_total += tool_call_increment(fields.get("tool_calls"))
        # as separate calls would on a fine clock: unstamped rows keep their order
        unstamped += 1e-6
    return rows, tool_calls_total


def decoded_row(row, keys=None) -> dict:
    """A full message row as a dict, content and tool_calls decoded. ``keys`` (the
    result's column names, taken once per result) spares a mapping per row, which
    is most of the cost of reading a long transcript."""
    msg = dict(zip(keys, row)) if keys is not None else dict(row._mapping)
    msg["content"] = decode_content(msg.get("content"))
    if msg.get("tool_calls"):
        msg["tool_calls"] = load_json(msg["tool_calls"], "tool_calls", [])
    return msg
