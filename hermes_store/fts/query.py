"""The search query layer: what a user typed → a safe query and a route (any engine).

The sanitizer's output is FTS5's query grammar, which is also the input of PostgreSQL's
route (``backends/postgresql/fts/search.py`` turns it into a ``tsquery``); the SQL of each
route is the backend's (``Backend.search``), so ``hermes_store.repository.search`` only
composes these pieces with portable Core filters.

* ``sanitize_fts5_query(text) -> str`` — turns *any* string into either ``""`` or an
  expression FTS5's MATCH accepts (upstream's rules, plus the fixes that make the
  guarantee hold: every character the FTS5 grammar rejects outside a string is removed,
  dangling or doubled boolean operators are dropped, stray ``.``/``-`` are removed).
* ``contains_cjk`` / ``count_cjk`` / ``is_cjk_codepoint`` — upstream's CJK ranges.
* ``plan_search(sanitized, indexes) -> SearchPlan`` — which index serves a query:
  ``messages_fts`` (unicode61), ``messages_fts_trigram`` (substring, CJK) or the bounded
  ``LIKE`` scan for CJK terms too short for trigram (< 3 characters).
* ``like_snippet`` (Python) for the LIKE route; the snippet markers both engines write.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, NamedTuple, Sequence

from .layout import FTS_TABLE, TRIGRAM_TABLE
from ..patterns import LazyPattern

#: the sanitizer looks at no more than this many characters of a query
MAX_FTS5_QUERY_CHARS = 2048
#: FTS5's boolean operators (case-sensitive in FTS5; upstream strips edge ones in any case)
FTS_OPERATORS = frozenset({"AND", "OR", "NOT"})
#: the trigram tokenizer matches nothing for a term shorter than this
TRIGRAM_MIN_CHARS = 3

ROUTE_FTS = "fts"
ROUTE_TRIGRAM = "trigram"
ROUTE_LIKE = "like"

SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS, SNIPPET_TOKENS = ">>>", "<<<", "...", 40
#: LIKE-route snippet: this many characters before the first term, this many in all
LIKE_SNIPPET_LEAD, LIKE_SNIPPET_CHARS = 40, 120

# --------------------------------------------------------------------------- CJK

_CJK_RANGES = (
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0x3400, 0x4DBF),  # Extension A
    (0x20000, 0x2A6DF),  # Extension B
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0xAC00, 0xD7AF),  # Hangul syllables
)


#: every CJK range starts at or above this character
_CJK_FLOOR = chr(min(lo for lo, _ in _CJK_RANGES))


def is_cjk_codepoint(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def contains_cjk(text: str) -> bool:
    # a search tests its query several times: text below every range (most queries)
    # is answered by one C-level max() instead of a test per character
    if not text or max(text) < _CJK_FLOOR:
        return False
    return any(is_cjk_codepoint(ord(ch)) for ch in text)


def count_cjk(text: str) -> int:
    if not text or max(text) < _CJK_FLOOR:
        return 0
    return sum(1 for ch in text if is_cjk_codepoint(ord(ch)))


# --------------------------------------------------------------------------- sanitizer

_SURROGATE = LazyPattern("[\ud800-\udfff]")
# ASCII controls other than FTS5's whitespace (\t \n \r) are syntax errors even inside
# a string; they never carry meaning in a search. (NUL never gets here: the query is
# cut at the first one.)
_CONTROL = LazyPattern(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")
# Outside a string FTS5 accepts only barewords (ASCII letters, digits, "_", non-ASCII),
# whitespace and its operators. Every other ASCII punctuation mark is replaced by a
# space, except "*" (prefix queries), "." "-" "_" (word chains, quoted below) and "%"
# (kept for CJK queries, whose LIKE route escapes it).
_PUNCTUATION = "!\"#$&'()+,/:;<=>?@[\\]^`{|}~"
_PUNCT_RE = LazyPattern("[" + re.escape(_PUNCTUATION) + "]")
_PUNCT_PERCENT_RE = LazyPattern("[" + re.escape(_PUNCTUATION + "%") + "]")
_STRING = LazyPattern(r'"([^"]*(?:""[^"]*)*)"')
_PLACEHOLDER = "\x00{}\x00"  # NUL cannot survive _CONTROL, so it cannot be forged
_PLACEHOLDER_RE = LazyPattern("\x00(\\d+)\x00")
_STAR_RUN = LazyPattern(r"\*+")
_LEADING_STAR = LazyPattern(r"(^|\s)\*")
_LEADING_OP = LazyPattern(r"(?i)^(AND|OR|NOT)\b\s*")
_TRAILING_OP = LazyPattern(r"(?i)\s+(AND|OR|NOT)\s*$")
# "chat-send", "P2.2", "my-app.config.ts", "snake_case_name": the unicode61 tokenizer
# would split them, so they become phrases.
_WORD_CHAIN = LazyPattern(r"\b(\w+(?:[._-]\w+)+)\b")

# Lexer over a sanitized query (the FTS5 token classes we can still meet).
_LEX = LazyPattern(
    r'(?P<string>"[^"]*(?:""[^"]*)*")'
    # Unicode spaces (U+3000, NBSP, ...) are bareword characters to FTS5, but str.strip()
    # removes them at the ends, so they must not count as a term here
    r"|(?P<space>\s+)"
    # [A-Za-z0-9_] and every non-ASCII character, spelled as the ASCII it excludes (a
    # class spanning all of Unicode takes milliseconds to compile at every start)
    r"|(?P<word>(?:(?!\s)[^\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f])+)"
    r"|(?P<star>\*)"
    r"|(?P<other>.)",
    re.DOTALL,
)


def _protect_phrases(text: str) -> tuple[str, list[str]]:
    """Swap each balanced ``"…"`` for a placeholder; an unpaired ``"`` becomes a space.

    A linear scan (no regex) so that runs of quotes cannot cause backtracking.
    """
    phrases: list[str] = []
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != '"':
            out.append(ch)
            i += 1
            continue
        end = text.find('"', i + 1)
        if end == -1:
            out.append(" ")
            i += 1
            continue
        phrases.append(text[i : end + 1])
        out.append(_PLACEHOLDER.format(len(phrases) - 1))
        i = end + 1
    return "".join(out), phrases


def _repair(text: str, *, keep_percent: bool) -> str:
    """Make a nearly-sanitized query valid FTS5, changing nothing that already is.

    Removes stray punctuation (``.``, ``-``, and ``%`` unless kept), a ``*`` that does
    not directly follow a term, and boolean operators that are leading, trailing or
    next to another operator (of a run, the last one is kept: ``a AND NOT b`` →
    ``a NOT b``, which is what FTS5's binary NOT means).
    """
    tokens = [(m.lastgroup, m.group()) for m in _LEX.finditer(text)]
    kinds = []
    for kind, value in tokens:
        if kind == "word" and value in FTS_OPERATORS:
            kind = "op"
        elif kind in ("word", "string") or (kind == "other" and keep_percent and value == "%"):
            kind = "term"
        elif kind == "other":
            kind = "stray"
        kinds.append(kind)

    drop = [False] * len(tokens)
    seen_term = False
    for i, kind in enumerate(kinds):
        if kind == "term":
            seen_term = True
        elif kind == "stray":
            drop[i] = True
        elif kind == "star":
            # only valid glued to a term: "deploy*" or '"a b"*'
            drop[i] = i == 0 or kinds[i - 1] != "term" or drop[i - 1]
        elif kind == "op":
            following = next((k for k in kinds[i + 1 :] if k in ("term", "op")), None)
            drop[i] = not seen_term or following != "term"
    if not any(drop):
        return text

    out: list[tuple[str, str]] = []
    for (kind, value), dropped in zip(tokens, drop):
        if dropped:
            kind, value = "space", " "
        if kind == "space" and (not out or out[-1][0] == "space"):
            continue
        out.append((kind, value))
    return "".join(value for _, value in out)


def sanitize_fts5_query(query: str) -> str:
    """A string FTS5's MATCH accepts, or ``""`` when nothing searchable is left.

    Steps (1-7 are upstream's, in upstream's order, so valid queries come out exactly
    as upstream produces them):

    1. cut at the first NUL (SQLite reads upstream's query only up to it, so upstream
       searches the text before it), then to ``MAX_FTS5_QUERY_CHARS``; lone
       surrogates → U+FFFD; controls → space;
    2. keep balanced ``"phrases"`` verbatim; an unpaired ``"`` becomes a space;
    3. outside phrases, replace FTS5 punctuation (``+ { } ( ) : ^ @ / # & | ~ [ ] < > ,
       ; ! ? $ = \\ ' ` ``, and ``%`` unless the query has CJK) with a space;
    4. collapse ``**`` runs; drop a ``*`` at the start or after whitespace;
    5. drop one leading and one trailing ``AND``/``OR``/``NOT`` (any case);
    6. quote word chains (``chat-send`` → ``"chat-send"``);
    7. restore phrases, strip;
    8. repair what is still invalid: dangling/adjacent operators, stray ``.``/``-``,
       a ``*`` not glued to a term.
    """
    if not isinstance(query, str):
        query = "" if query is None else str(query)
    query = query.split("\x00", 1)[0][:MAX_FTS5_QUERY_CHARS]
    query = _SURROGATE.sub("\ufffd", query)
    query = _CONTROL.sub(" ", query)

    text, phrases = _protect_phrases(query)
    text = (_PUNCT_RE if contains_cjk(query) else _PUNCT_PERCENT_RE).sub(" ", text)
    text = _STAR_RUN.sub("*", text)
    text = _LEADING_STAR.sub(r"\1", text)
    text = _LEADING_OP.sub("", text.strip())
    text = _TRAILING_OP.sub("", text.strip())
    text = _WORD_CHAIN.sub(r'"\1"', text)
    text = _PLACEHOLDER_RE.sub(lambda m: phrases[int(m.group(1))], text).strip()
    # "%" may stay only in a query that is still CJK (and so never reaches MATCH itself)
    result = _repair(text, keep_percent=contains_cjk(text)).strip()
    if not contains_cjk(result):
        result = _repair(result, keep_percent=False).strip()
    return result


# --------------------------------------------------------------------------- routing


class Term(NamedTuple):
    text: str
    is_operator: bool = False


def query_terms(sanitized: str) -> list[Term]:
    """Whitespace-separated terms of a sanitized query; a phrase is one term.

    Used by the trigram and LIKE routes, which match substrings: ``*`` carries no
    meaning there and is dropped.
    """
    terms: list[Term] = []
    i, n = 0, len(sanitized)
    while i < n:
        ch = sanitized[i]
        if ch.isspace():
            i += 1
        elif ch == '"':
            m = _STRING.match(sanitized, i)
            if m is None:  # cannot happen after sanitizing; be safe anyway
                i += 1
                continue
            inner = m.group(1).replace('""', '"')
            if inner.strip():
                terms.append(Term(inner))
            i = m.end()
        else:
            j = i
            while j < n and not sanitized[j].isspace() and sanitized[j] != '"':
                j += 1
            chunk = sanitized[i:j].replace("*", "")
            if chunk:
                terms.append(Term(chunk, chunk in FTS_OPERATORS))
            i = j
    return _drop_stray_operators(terms)


def _drop_stray_operators(terms: list[Term]) -> list[Term]:
    out: list[Term] = []
    pending: Term | None = None
    for term in terms:
        if term.is_operator:
            if out:
                pending = term
            continue
        if pending is not None:
            out.append(pending)
            pending = None
        out.append(term)
    return out


def trigram_query(terms: Iterable[Term]) -> str:
    """Each term as an FTS5 string (substring match on the trigram index)."""
    return " ".join(
        t.text if t.is_operator else '"' + t.text.replace('"', '""') + '"' for t in terms
    )


def _trigram_can_serve(terms: list[Term]) -> bool:
    words = [t.text for t in terms if not t.is_operator]
    return bool(words) and all(len(w) >= TRIGRAM_MIN_CHARS for w in words) and all(
        count_cjk(w) >= TRIGRAM_MIN_CHARS for w in words if contains_cjk(w)
    )


class SearchPlan(NamedTuple):
    """How to run one search: ``route`` and its query.

    ``match`` is the MATCH expression (fts/trigram routes); ``like_terms`` the
    substrings of the LIKE route (OR-ed, as upstream); ``retry_trigram`` is the trigram
    MATCH to try when a Latin query finds nothing at all in ``messages_fts`` (text glued
    to CJK, e.g. ``修改youer服务端``, is one unicode61 token).
    """

    route: str
    match: str = ""
    like_terms: tuple[str, ...] = ()
    retry_trigram: str | None = None
    fallback_like_terms: tuple[str, ...] = ()


def plan_search(sanitized: str, indexes: Iterable[str]) -> SearchPlan | None:
    """Choose the index for a sanitized query; ``None`` when nothing can match."""
    if not sanitized:
        return None
    indexes = set(indexes)
    terms = query_terms(sanitized)
    words = tuple(t.text for t in terms if not t.is_operator)
    has_trigram = TRIGRAM_TABLE in indexes
    if contains_cjk(sanitized):
        if not words:
            return None
        if has_trigram and _trigram_can_serve(terms):
            return SearchPlan(ROUTE_TRIGRAM, trigram_query(terms), fallback_like_terms=words)
        return SearchPlan(ROUTE_LIKE, like_terms=words)
    if FTS_TABLE not in indexes:
        return SearchPlan(ROUTE_LIKE, like_terms=words) if words else None
    retry = trigram_query(terms) if has_trigram and _trigram_can_serve(terms) else None
    return SearchPlan(ROUTE_FTS, sanitized, retry_trigram=retry, fallback_like_terms=words)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def like_snippet(columns: Sequence[Any], terms: Sequence[str]) -> str:
    """The LIKE route's snippet: ≤ 120 characters starting 40 before a matched term, no
    markers, taken from the first of ``columns`` (content, tool name, tool-call JSON)
    that holds one of ``terms``.

    Where the content holds the first term, this is exactly upstream's
    ``substr(content, max(1, instr(content, term) - 40), 120)``. Upstream looked in the
    content only, for the first term only, so a row found through its tool name (or
    through another term) got the start of its content, often empty, and not the match
    (api-catalog DIVERGENCE 106). A term is looked for as written, then ignoring ASCII
    case (as LIKE matches); with no term found, the content's first 120 characters.
    """
    texts = [c for c in columns if isinstance(c, str) and c]
    for fold in (False, True):
        for text in texts:
            haystack = text.translate(_ASCII_LOWER) if fold else text
            for term in terms:
                at = haystack.find(term.translate(_ASCII_LOWER) if fold else term)
                if term and at >= 0:
                    start = max(0, at - LIKE_SNIPPET_LEAD)
                    return text[start:start + LIKE_SNIPPET_CHARS]
    content = columns[0] if columns else None
    if isinstance(content, (int, float)) and not isinstance(content, bool):
        content = str(content)
    return content[:LIKE_SNIPPET_CHARS] if isinstance(content, str) else ""


__all__ = [
    "FTS_OPERATORS",
    "MAX_FTS5_QUERY_CHARS",
    "ROUTE_FTS",
    "ROUTE_LIKE",
    "ROUTE_TRIGRAM",
    "SearchPlan",
    "Term",
    "contains_cjk",
    "count_cjk",
    "is_cjk_codepoint",
    "like_snippet",
    "plan_search",
    "query_terms",
    "sanitize_fts5_query",
    "trigram_query",
]
