"""An FTS5 expression as PostgreSQL's ``to_tsquery`` input (the word route of
``fts/search.py``; FTS5 reads its own expressions, so SQLite has no such module).

The sanitized expression (``fts.query.sanitize_fts5_query``) is read as OR-operands of
AND-ed phrases, each possibly negated, with FTS5's precedence (NOT, then AND, then OR):

* :func:`tsquery_text` — what a row must match: a phrase's words (split where documents
  are split: at every run of characters that is not a letter or digit) joined by
  ``<->``, ``term*`` as ``'term':*``, AND as ``&``, OR as ``|``, ``a NOT b`` as
  ``a & !b``;
* :func:`rank_text` — what a match is ranked by: the positive words, OR-ed, and
  :func:`rank_share`, the least share of them a match holds;
* :func:`candidate_text` — for an expression with a phrase, what every match holds
  whatever the order of its words: GIN answers it without reading the rows' vectors.

Each is kept per expression: a search repeated (the next page, a refreshed view) need
not parse it again.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ....fts.query import FTS_OPERATORS
from ....fts.snippet import Phrase

# The sanitized FTS5 expression: "phrases" (with "" escapes) and barewords, either one
# optionally glued to a "*"; whitespace between them.
_ITEM = re.compile(r'(?P<string>"(?:[^"]|"")*")(?P<sprefix>\*)?|(?P<word>[^\s"*]+)(?P<wprefix>\*)?|\S')
#: the tokens a term splits into: runs of letters and digits (the document's rule)
_WORDS = re.compile(r"[^\W_]+")


def _lexemes(text: str) -> list[str]:
    return _WORDS.findall(text)


def _quoted(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _term(text: str, prefix: bool) -> Phrase | None:
    """One FTS5 term or phrase as its words (as written: ``to_tsquery`` folds the case
    itself); None when it holds no word."""
    words = tuple(_lexemes(text))
    return Phrase(words, prefix) if words else None


def _phrase_lexemes(phrase: Phrase) -> list[str]:
    """A phrase's words as tsquery lexemes, ``:*`` on the last of a prefix."""
    lexemes = [_quoted(w) for w in phrase.words]
    if phrase.prefix:
        lexemes[-1] += ":*"
    return lexemes


def _rendered(phrase: Phrase) -> str:
    """A phrase as tsquery text: its words joined by ``<->``, ``:*`` on a prefix."""
    lexemes = _phrase_lexemes(phrase)
    return lexemes[0] if len(lexemes) == 1 else "(" + " <-> ".join(lexemes) + ")"


@dataclass
class _Operand:
    """One OR-operand: phrases AND-ed, each possibly negated (FTS5's binary NOT)."""

    terms: list[tuple[bool, Phrase]]

    @property
    def matchable(self) -> bool:
        return any(not negated for negated, _ in self.terms)  # else FTS5 matches nothing

    @property
    def phrased(self) -> bool:
        """Whether a positive phrase of two words or more is among the terms."""
        return any(not negated and len(p.words) > 1 for negated, p in self.terms)

    def render(self, *, in_any_order: bool = False) -> str | None:
        """The operand as tsquery text; ``in_any_order``: each phrase's words AND-ed,
        a negated phrase left out (what every match holds: ``candidate_text``)."""
        if not self.matchable:
            return None
        kept = []
        for negated, phrase in self.terms:
            if in_any_order and len(phrase.words) > 1:
                if not negated:
                    kept.append(" & ".join(_phrase_lexemes(phrase)))
                continue
            kept.append(f"!{_rendered(phrase)}" if negated else _rendered(phrase))
        return "(" + " & ".join(kept) + ")"


def operands(sanitized: str) -> list[_Operand]:
    """The sanitized FTS5 expression as OR-operands of (negated, phrase), with FTS5's
    precedence (NOT, then AND, then OR)."""
    operands: list[_Operand] = [_Operand([])]
    negate_next = False
    for m in _ITEM.finditer(sanitized):
        if m.group("string") is not None:
            phrase = _term(m.group("string")[1:-1].replace('""', '"'), bool(m.group("sprefix")))
        elif m.group("word") is not None:
            word = m.group("word")
            if word in FTS_OPERATORS and not m.group("wprefix"):
                if word == "OR":
                    operands.append(_Operand([]))
                    negate_next = False
                elif word == "NOT":
                    negate_next = True
                continue  # AND: the implicit conjunction
            phrase = _term(word, bool(m.group("wprefix")))
        else:
            continue  # a stray character the sanitizer left: no meaning in a tsquery
        if phrase is not None:
            operands[-1].terms.append((negate_next, phrase))
        negate_next = False
    return operands


@functools.lru_cache(maxsize=256)
def tsquery_text(sanitized: str) -> str | None:
    """``to_tsquery('simple', …)`` input for a sanitized FTS5 expression (None: nothing
    searchable is left). Kept per expression, as ``snippet_query``: a search repeated
    (the next page, a refreshed view) need not parse it again."""
    parts = [p for p in (o.render() for o in operands(sanitized)) if p is not None]
    return " | ".join(parts) if parts else None


@functools.lru_cache(maxsize=256)
def candidate_text(sanitized: str) -> str | None:
    """``tsquery_text`` with each positive phrase's words AND-ed instead of in order, and
    negated phrases left out: what every match holds (a superset of the matches), which
    GIN answers from the index alone. None where the expression has no positive phrase
    of two words or more (``tsquery_text`` is answered as cheaply)."""
    found = [o for o in operands(sanitized) if o.matchable]
    if not any(o.phrased for o in found):
        return None
    return " | ".join(o.render(in_any_order=True) for o in found)


@functools.lru_cache(maxsize=256)
def rank_text(sanitized: str) -> str | None:
    """The ``tsquery`` a match is ranked by: every word of the query's positive phrases,
    OR-ed. As BM25 sums each term's score, ``ts_rank`` scores an OR by each word's
    frequency, in one pass over the document; an AND or a phrase makes it pair the
    words' positions, at several times the cost on long messages, for the same first
    page (docs/performance.md, 2026-12-03)."""
    words = [word for operand in operands(sanitized) for word in _ranked_words(operand)]
    return " | ".join(dict.fromkeys(words)) or None


def _ranked_words(operand: _Operand) -> list[str]:
    """An operand's positive words as ``rank_text`` writes them (none: not matchable)."""
    words: list[str] = []
    if operand.matchable:
        for negated, phrase in operand.terms:
            if not negated:
                words += [_quoted(w) for w in phrase.words]
                if phrase.prefix:
                    words[-1] += ":*"
    return words


@functools.lru_cache(maxsize=256)
def rank_share(sanitized: str) -> float:
    """The share of ``rank_text``'s words that every match holds at least: the fewest
    one OR-operand has, over all of them. ``ts_rank`` averages its words' scores, so a
    match holding no more of them scores at most this share of what all would."""
    counts = [len(set(words)) for words in map(_ranked_words, operands(sanitized)) if words]
    every = rank_text(sanitized)
    return min(counts) / (1 + every.count(" | ")) if counts and every else 1.0


__all__ = ["candidate_text", "operands", "rank_share", "rank_text", "tsquery_text"]
