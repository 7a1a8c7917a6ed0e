"""Replaying a transcript to a model (``get_messages_as_conversation``): the entry shape,
and what never goes back to the model (leaked recalled-memory blocks, the background
review harness's prompts, replayed duplicate prompts)."""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any, Callable

import sqlalchemy as sa

from .. import schema
from ..patterns import LazyPattern
from .message_rows import load_json, decode_content
from ..sql.prebuilt import Prebuilt

log = logging.getLogger(__name__)

M = schema.messages
S = schema.sessions


# A recalled-memory block the agent injected into a turn and that leaked into the
# stored text; replaying it would feed the model its own memory as user input.
_MEMORY_BLOCK = LazyPattern(r"<\s*memory-context\s*>.*?<\s*/\s*memory-context\s*>",
                            re.IGNORECASE | re.DOTALL)
_MEMORY_NOTE = LazyPattern(
    r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\."
    r"\s*Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
    re.IGNORECASE,
)
_MEMORY_TAG = LazyPattern(r"<\s*/?\s*memory-context\s*>", re.IGNORECASE)
_MEMORY_WORD = LazyPattern(r"memory", re.IGNORECASE)

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


@lru_cache(maxsize=None)
def conversation_query(include_inactive: bool) -> Prebuilt:
    """``get_messages_as_conversation``'s statement for one session."""
    stmt = (sa.select(*CONVERSATION_COLUMNS)
            .where(M.c.session_id == sa.bindparam("sid", type_=sa.Text)).order_by(M.c.id))
    if not include_inactive:
        stmt = stmt.where(M.c.active == 1)
    return Prebuilt(stmt)


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


def without_review_harness(messages: list[dict]) -> list[dict]:
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


def is_replayed_prompt(earlier: list[dict], msg: dict) -> bool:
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


def conversation_entry(row) -> dict:
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
        msg["tool_calls"] = load_json(tool_calls, "tool_calls", [])
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
                msg[field] = load_json(stored, field, None)
    return msg


def default_alternation_repair() -> Callable[[list], Any] | None:
    try:  # the agent package ships the repair; the store does not depend on it
        from agent.agent_runtime_helpers import repair_message_sequence
    except ImportError:
        return None
    return lambda messages: repair_message_sequence(None, messages)
