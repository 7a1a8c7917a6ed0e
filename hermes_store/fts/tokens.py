"""A column's text as the word index splits it: its tokens, their places, its sentences.

FTS5's ``unicode61`` tokenizer (and the PostgreSQL layout, which splits alike) makes a
token of every run of letters and digits, compared lower-cased. :class:`Column` holds
one text's tokens and finds a token's offsets and the sentence starts when asked;
:func:`spaced_form` is the fast form most texts take — the text with its tokens
lower-cased and every other character a space, the same length, so ``str`` methods
running in C find tokens and offsets in it. ``fts.snippet`` cuts FTS5's snippets with
both.
"""

from __future__ import annotations

import bisect
import itertools
import re

#: a token: a run of letters and digits (the word index's split), kept by ``split``
_SPLIT = re.compile(r"([^\W_]+)")
#: ASCII text as its tokens' letters lower-cased and every other character a space: the
#: same length, so an offset in it is an offset in the text, and ``str.split`` finds the
#: tokens in C (a third of the regex split's time, offsets not computed until needed)
_ASCII_TOKENS = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32
    for c in range(256))
#: a spaced text's shape (encoded as ASCII, "?" for any other character, which is a token
#: character there): "a" for a token character, a space for every other one
_SPACED_SHAPE = bytes(32 if c == 32 else 97 for c in range(256))
#: at most this share of a text beyond ASCII is written into its spaced form character by
#: character (``spaced_form``); a text with more is split by the regex (``_SPLIT``)
_MOSTLY_ASCII = 8
#: a text beyond ASCII shorter than this is split by the regex, which costs less for it
_MIXED_FROM = 256
#: characters whose lower case ``str.lower`` writes depending on the text around them (a
#: final sigma) or as two characters (dotted capital I): a token holding one is
#: lower-cased whole, by the regex split's path
_CONTEXT_CASED = ("\u03a3", "\u0130")
#: the end of a sentence: ``.`` or ``:`` and blank space (FTS5's sentence finder)
_SENTENCE_END = re.compile(r"[.:][ \t\n\r]+")
#: the same in a spaced column's text encoded as ASCII and translated by
#: ``_SENTENCE_MARKS`` ("." and ":" as "P", blank space as "S"): a literal to search for,
#: a quarter of the time of the character class over the text
_SENTENCE_MARKS = bytes(80 if c in b".:" else 83 if c in b" \t\n\r" else 120 for c in range(256))
_SENTENCE_END_MARKS = re.compile(rb"PS+")


def _spaced_ascii(text: str) -> str:
    """ASCII ``text`` with its tokens lower-cased and every other character a space."""
    return text.encode("ascii").translate(_ASCII_TOKENS).decode("ascii")


def spaced_form(text: str) -> str | None:
    """``text`` with its tokens lower-cased and every other character a space (the same
    length), or None where the regex split (``_SPLIT``) should split it: a text beyond
    ASCII that is short (``_MIXED_FROM``: the regex costs less than this), more than one
    character in ``_MOSTLY_ASCII`` beyond ASCII (a CJK text), or holding a character
    lower-cased by context (``_CONTEXT_CASED``).

    A log dump of 8 kB with a few Chinese words is written in C but for those words'
    characters, each found as a "?" of the text encoded as ASCII (a regex scanning for
    them took as long as the regex split)."""
    if text.isascii():
        return _spaced_ascii(text)
    if len(text) < _MIXED_FROM:
        return None
    # every character beyond ASCII is one "?" here (a space once translated)
    encoded = text.encode("ascii", "replace")
    if (encoded.count(b"?") - text.count("?") > len(text) // _MOSTLY_ASCII
            or any(char in text for char in _CONTEXT_CASED)):
        return None
    spaced = encoded.translate(_ASCII_TOKENS).decode("ascii")
    pieces, at = [], 0
    i = encoded.find(b"?")
    while i >= 0:
        char = text[i]
        if char != "?":
            # a token character ([^\W_]) is exactly one that ``isalnum``
            pieces += [spaced[at:i], char.lower() if char.isalnum() else " "]
            at = i + 1
        i = encoded.find(b"?", i + 1)
    pieces.append(spaced[at:])
    return "".join(pieces)


#: ``Column``'s ``spaced`` when the caller has not tried ``spaced_form``
_NOT_TRIED = object()


class Column:
    """One column's text split into tokens (``tokens``, lower-cased), with each token's
    place in the text (``start_of``/``end_of``) and the sentence starts."""

    __slots__ = ("text", "tokens", "_spaced", "_offsets", "_shape")

    def __init__(self, text: str, spaced: object = _NOT_TRIED) -> None:
        """``spaced``: ``text``'s :func:`spaced_form` (None: it has none), where the
        caller has it."""
        self.text = text
        self._offsets = self._shape = None
        if spaced is _NOT_TRIED:
            spaced = spaced_form(text)
        if spaced is not None:
            # A snippet needs the places of a handful of tokens (the window's ends, the
            # marked runs), found in ``_spaced`` when asked.
            self._spaced = spaced
            self.tokens = spaced.split()
        else:
            self._spaced = None
            pieces = _SPLIT.split(text)
            self.tokens = [t.lower() for t in pieces[1::2]]
            # token i is text[offsets[2i + 1]:offsets[2i + 2]]
            self._offsets = [0, *itertools.accumulate(map(len, pieces))]

    def start_of(self, i: int, *, known: tuple[int, int] | None = None) -> int:
        """The offset of token ``i``'s first character; ``known``: (j, the offset of
        token j) for a token j ≤ i, to count from there rather than from the start."""
        if self._offsets is not None:
            return self._offsets[2 * i + 1]
        spaced = self._spaced
        if known is None:  # the text less its first i tokens starts with token i
            if not i:
                return len(spaced) - len(spaced.lstrip())
            return len(spaced) - len(spaced.split(None, i)[i])
        j, at = known
        if i - j > 2:
            # the text from token j, less its first i - j tokens, starts with token i
            rest = spaced[at:]
            return at + len(rest) - len(rest.split(None, i - j)[i - j])
        tokens = self.tokens
        while j < i:  # only spaces lie between two tokens: the next one is found first
            at = spaced.find(tokens[j + 1], at + len(tokens[j]))
            j += 1
        return at

    def end_of(self, i: int, *, known: tuple[int, int] | None = None) -> int:
        """The offset just past token ``i`` (``known`` as for :meth:`start_of`)."""
        if self._offsets is not None:
            return self._offsets[2 * i + 2]
        return self.start_of(i, known=known) + len(self.tokens[i])

    def positions(self, word: str, prefix: bool) -> list[int]:
        """The positions of the tokens equal to ``word`` (``prefix``: starting with it)."""
        tokens = self.tokens
        if not prefix:
            found, at, index = [], -1, tokens.index
            for _ in range(tokens.count(word)):  # count and index: the scans run in C
                at = index(word, at + 1)
                found.append(at)
            return found
        spaced = self._spaced
        if spaced is None or not word.isalnum():  # (a word a token cannot hold: none)
            return [i for i, t in enumerate(tokens) if t.startswith(word)]
        # spaced: find the word where a token starts; its position is the number of
        # tokens before it, counted from the previous one found
        found, count, previous = [], 0, 0
        at = spaced.find(word)
        while at >= 0:
            if at == 0 or spaced[at - 1] == " ":
                count += self._tokens_in(previous, at)
                previous = at
                found.append(count)
            at = spaced.find(word, at + 1)
        return found

    def _tokens_in(self, start: int, end: int) -> int:
        """(A spaced column) how many tokens begin at offsets ``start`` to ``end``
        (exclusive), where ``start`` is 0 or a token's first character — counted in C,
        in the column's shape (every token character "a", every other one a space),
        where a token begins wherever " a" does (and at 0 on an "a")."""
        shape = self._shape
        if shape is None:
            shape = self._shape = self._spaced.encode("ascii", "replace").translate(
                _SPACED_SHAPE)
        if start:
            return shape.count(b" a", start - 1, end)
        return shape.count(b" a", 0, end) + (end > 0 and shape[:1] == b"a")

    def sentences(self, until: int) -> list[int]:
        """Token positions that start a sentence, up to the first after token ``until``:
        the first token, and any right after ``.``/``:`` and blank space."""
        found = [0]
        if self._offsets is None:
            # spaced: the tokens before a sentence's start, counted from the previous one
            spaced, size = self._spaced, len(self.text)
            at = previous = 0
            marks = self.text.encode("ascii", "replace").translate(_SENTENCE_MARKS)
            for m in _SENTENCE_END_MARKS.finditer(marks):
                end = m.end()
                if end < size and spaced[end] != " ":  # a token starts there
                    at += self._tokens_in(previous, end)
                    previous = end
                    if at > 0:
                        found.append(at)
                        if at > until:
                            break
            return found
        starts = self._offsets[1:-1:2]  # each token's first character
        for m in _SENTENCE_END.finditer(self.text):
            at = bisect.bisect_left(starts, m.end())
            if at < len(starts) and starts[at] == m.end() and at > 0:
                found.append(at)
                if at > until:
                    break
        return found


__all__ = ["Column", "spaced_form"]
