"""Python-side value preparation shared by the concern modules."""

from __future__ import annotations

import hashlib
import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: Any) -> Any:
    """Text with lone surrogates replaced by U+FFFD; anything else unchanged.

    The driver cannot encode U+D800–U+DFFF as UTF-8, so one such code point would
    fail the whole write unit.
    """
    # ASCII text (most ids, most content) cannot hold one: skip the scan
    if isinstance(value, str) and not value.isascii() and _LONE_SURROGATE.search(value):
        return _LONE_SURROGATE.sub("\ufffd", value)
    return value


#: value types that cannot hold text
_NOT_TEXT = frozenset((type(None), bool, int, float))


def need_no_scrubbing(values) -> bool:
    """Whether ``scrub_surrogates`` would leave every value as it is, told without
    calling it: None, numbers and ASCII text cannot hold a lone surrogate."""
    for value in values:
        if type(value) in _NOT_TEXT or (type(value) is str and value.isascii()):
            continue
        return False
    return True


def prompt_hash(prompt: str) -> str:
    """Key of a system prompt in ``system_prompts`` (sha256 of its UTF-8 text, as upstream)."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


#: the escape character of the LIKE patterns below
LIKE_ESCAPE = "/"


def _like_literal(text: str) -> str:
    for ch in (LIKE_ESCAPE, "%", "_"):
        text = text.replace(ch, LIKE_ESCAPE + ch)
    return text


def like_prefix(prefix: str) -> str:
    """A LIKE pattern (``ESCAPE LIKE_ESCAPE``) for text starting with ``prefix``."""
    return _like_literal(prefix) + "%"


def like_containing(needle: str) -> str:
    """A LIKE pattern (``ESCAPE LIKE_ESCAPE``) for text containing ``needle``."""
    return "%" + _like_literal(needle) + "%"
