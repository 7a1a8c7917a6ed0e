"""A query's terms as substrings (the trigram route of ``fts/search.py``, and its
snippets; FTS5's trigram tokenizer reads the terms itself, so SQLite has no such module).

* :func:`term_groups` — the terms as OR-groups of (negated, text), with FTS5's
  precedence; each becomes an ``ILIKE`` (``LIKE``) pattern, :func:`escape_like`;
* :func:`substring_snippet` — the snippet: the text around the first term found, each
  term marked (:func:`substring_pattern`, kept per expression).
"""

from __future__ import annotations

import functools
import re

from ....fts.query import (
    LIKE_SNIPPET_CHARS,
    LIKE_SNIPPET_LEAD,
    SNIPPET_CLOSE,
    SNIPPET_ELLIPSIS,
    SNIPPET_OPEN,
    Term,
    query_terms,
)


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def term_groups(terms: list[Term]) -> list[list[tuple[bool, str]]]:
    """The terms as OR-groups of (negated, text), with FTS5's precedence: NOT binds to
    the next term, AND (implicit or written) joins the terms of a group, OR separates
    groups."""
    groups: list[list[tuple[bool, str]]] = [[]]
    negate_next = False
    for term in terms:
        if term.is_operator:
            if term.text == "OR":
                groups.append([])
            negate_next = term.text == "NOT"
            continue
        groups[-1].append((negate_next, term.text))
        negate_next = False
    return [g for g in groups if g]


@functools.lru_cache(maxsize=256)
def substring_pattern(expression: str) -> re.Pattern | None:
    """The trigram route's positive terms as one case-insensitive pattern, longest
    first (None: no term). Kept per expression: every hit of a search needs it."""
    terms = {text for group in term_groups(query_terms(expression))
             for negated, text in group if not negated and text}
    if not terms:
        return None
    return re.compile("|".join(map(re.escape, sorted(terms, key=len, reverse=True))),
                      re.IGNORECASE)


def substring_snippet(texts, expression: str) -> str:
    """The trigram route's snippet: up to ``LIKE_SNIPPET_CHARS`` characters of the
    first text holding a term of ``expression`` (content, then tool name), starting
    ``LIKE_SNIPPET_LEAD`` before the first match, each match (any case) marked
    ``>>>…<<<``, ``...`` where the text was cut. No match (cannot happen for a found
    row): the content's start."""
    pattern = substring_pattern(expression)
    texts = [t for t in texts if isinstance(t, str) and t]
    if pattern is not None:
        for text in texts:
            first = pattern.search(text)
            if first is None:
                continue
            start = max(0, first.start() - LIKE_SNIPPET_LEAD)
            end = min(len(text), max(start + LIKE_SNIPPET_CHARS, first.end()))
            # FTS5 appends each stretch of text between marks up to a NUL only
            cut = (lambda t: t.split("\x00", 1)[0]) if "\x00" in text else (lambda t: t)
            window, pieces, at = text[start:end], [], 0
            for match in pattern.finditer(window):
                pieces += [cut(window[at:match.start()]), SNIPPET_OPEN, match.group(),
                           SNIPPET_CLOSE]
                at = match.end()
            piece = "".join(pieces) + cut(window[at:])
            return ((SNIPPET_ELLIPSIS if start > 0 else "") + piece
                    + (SNIPPET_ELLIPSIS if end < len(text) else ""))
    return texts[0][:LIKE_SNIPPET_CHARS] if texts else ""


__all__ = ["escape_like", "substring_pattern", "substring_snippet", "term_groups"]
