"""FTS5's ``snippet()``, computed in Python from the row's indexed text.

SQLite writes a search hit's snippet in SQL (``snippet(messages_fts, -1, '>>>', '<<<',
'...', 40)``). An engine whose index cannot (PostgreSQL: ``ts_headline`` parses the
whole text again on the server, and marks the words *its* parser sees, not the index's)
gets the same snippet here, from the same columns and the same phrases, by the same
rules:

* a document is split into tokens where the word index splits it (``fts.tokens``):
  runs of letters and digits (FTS5's ``unicode61``; the PostgreSQL layout splits the
  same way), compared lower-cased;
* a phrase instance is a run of tokens equal to the phrase's words (the last one a
  prefix for ``term*``); overlapping or touching instances are marked as one
  ``>>>…<<<``, so a phrase is marked whole (``>>>docker compose<<<``) as FTS5 marks it;
* the column with the best window is chosen (content — a tool row's indexed prefix —,
  tool name, tool calls), then a window of 40 tokens: scored by the instances it holds
  (1,000 for each phrase's first, 1 for every other), centred on them, or started at
  a sentence (after ``.`` or ``:``) for a bonus, as ``fts5SnippetFunction`` does;
* the text runs from the window's first token to its last, with ``...`` where the
  column goes on; a window at the column's start or end keeps the text before or after
  (each piece cut at a NUL character, as FTS5's printf cuts it).

A search prepares its query once (:class:`SnippetQuery`: the phrases, what marks them)
and cuts each hit's snippet with it; :func:`snippet` does both for one row. Over columns
no longer than the window (most hits: a message of a few words) the windows are
skipped: the column is whole, each phrase's instances found by one pattern.
``tests/repository/test_snippet.py`` holds the output equal to SQLite's own
``snippet()`` over generated rows and queries.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass
from typing import Sequence

from .query import SNIPPET_CLOSE, SNIPPET_ELLIPSIS, SNIPPET_OPEN, SNIPPET_TOKENS
from .tokens import Column, spaced_form

#: a window's score (``fts5SnippetScore``): this much for each phrase it holds, 1 for
#: each further instance; a window that starts a sentence gains a bonus, more for the
#: column's first
_PHRASE_SCORE = 1000
_SENTENCE_BONUS, _FIRST_SENTENCE_BONUS = 100, 120
#: a column of more than this many characters per token of the window is left to the
#: general path by ``SnippetQuery._whole`` without counting its tokens
_WHOLE_CHARS = 16


@dataclass(frozen=True)
class Phrase:
    """One phrase of a query: its words (lower-cased); ``prefix``: the last word is a
    prefix (``term*``)."""

    words: tuple[str, ...]
    prefix: bool = False


def _instances(column: Column, phrases: Sequence[Phrase]) -> list[tuple[int, int, int]]:
    """(position, phrase number, length) of every phrase instance, by position."""
    found = []
    tokens = column.tokens
    n = len(tokens)
    for number, phrase in enumerate(phrases):
        words, size = phrase.words, len(phrase.words)
        if not size:
            continue
        if size == 1:
            found += [(at, number, 1) for at in column.positions(words[0], phrase.prefix)]
            continue
        middle, last = list(words[1:-1]), words[-1]
        for at in column.positions(words[0], False):
            if at + size > n:
                break
            end = tokens[at + size - 1]
            if tokens[at + 1:at + size - 1] == middle and (
                    end.startswith(last) if phrase.prefix else end == last):
                found.append((at, number, size))
    found.sort()
    return found


def _score(phrases: int, instances: int) -> int:
    """A window's score (``fts5SnippetScore``) where it holds ``instances`` instances of
    ``phrases`` phrases: 1,000 per phrase, 1 per repeat."""
    return _PHRASE_SCORE * phrases + instances - phrases if phrases else 0


def _bonus(sentence: int) -> int:
    """The bonus of a window that starts the sentence at token ``sentence``."""
    return _FIRST_SENTENCE_BONUS if sentence == 0 else _SENTENCE_BONUS


class _Windows:
    """Windows of ``width`` tokens over a column of ``size`` tokens and its instances
    (sorted by position), scored as FTS5's ``fts5SnippetScore`` scores them. The
    instances a window holds are a slice of the sorted list, found by bisection (in C,
    through ``map``): a column with many instances costs each window two bisections, not
    a pass over every instance as in FTS5."""

    __slots__ = ("instances", "positions", "phrases", "width", "size")

    def __init__(self, instances, phrases: int, width: int, size: int) -> None:
        self.instances = instances
        self.positions = [at for at, _, _ in instances]
        self.phrases, self.width, self.size = phrases, width, size

    def scores(self, starts: Sequence[int]) -> list[int]:
        """Each window's score: 1,000 per phrase it holds, 1 per repeat."""
        positions, width = self.positions, self.width
        los = map(bisect.bisect_left, itertools.repeat(positions), starts)
        his = map(bisect.bisect_left, itertools.repeat(positions), [s + width for s in starts])
        if self.phrases == 1:
            return [_PHRASE_SCORE - 1 + hi - lo if hi > lo else 0 for lo, hi in zip(los, his)]
        numbers = [number for _, number, _ in self.instances]
        scores = []
        for lo, hi in zip(los, his):
            scores.append(_score(len(set(numbers[lo:hi])), hi - lo))
        return scores

    def centred(self, start: int) -> int:
        """Where the window that starts at an instance's token ``start`` goes to centre
        the instances it holds (kept inside the column)."""
        positions, width, size = self.positions, self.width, self.size
        lo = bisect.bisect_left(positions, start)
        hi = bisect.bisect_left(positions, start + width)
        first, last = positions[lo], positions[hi - 1] + self.instances[hi - 1][2]
        spare = width - (last - first)
        centred = first - (spare // 2 if spare >= 0 else -(-spare // 2))  # C's division
        if centred + width > size:
            centred = size - width
        return max(centred, 0)


def _merged(spans) -> list[tuple[int, int]]:
    """Half-open (start, end) spans, sorted by start, with each run of overlapping ones
    merged into one (FTS5 marks overlapping instances as one)."""
    runs: list[tuple[int, int]] = []
    reach = -1  # the end of the last run
    for start, end in spans:
        if start >= reach:
            runs.append((start, end))
            reach = end
        elif end > reach:
            runs[-1] = (runs[-1][0], end)
            reach = end
    return runs


class _InstanceFinder:
    """Finds each instance of one phrase in a spaced text (``spaced_form``): where a token
    starts (after a space or at 0), its words apart by spaces only, the last one ending a
    token (or, for ``term*``, any token it starts); overlapping instances included.

    The first word is looked for with ``str.find`` and the phrase matched only there: a
    pattern tried at every character (a look-behind at each) took 1.2 µs for a message
    of 60 characters, most of its snippet's time (docs/performance.md, issue 32)."""

    __slots__ = ("first", "whole")

    def __init__(self, phrase: Phrase) -> None:
        self.first = phrase.words[0]
        words = " +".join(map(re.escape, phrase.words)) + ("[^ ]*" if phrase.prefix else "")
        self.whole = re.compile(f"{words}(?![^ ])")

    def spans(self, spaced: str) -> list[tuple[int, int]]:
        """(start, end) of every instance in ``spaced``, by start."""
        found, first, match = [], self.first, self.whole.match
        at = spaced.find(first)
        while at >= 0:
            if at == 0 or spaced[at - 1] == " ":
                instance = match(spaced, at)
                if instance is not None:
                    found.append(instance.span())
            at = spaced.find(first, at + 1)
        return found


class SnippetQuery:
    """A query's phrases prepared once for the snippets of many rows (a search page).

    ``phrases`` are numbered in the order the query names them. ``operands``: the
    query's OR-operands, each a sequence of (phrase number, negated); a phrase is marked
    where its operand holds for the row. None: every phrase is marked (a query of
    positive phrases joined by OR)."""

    __slots__ = ("phrases", "operands", "width", "open_mark", "close_mark", "ellipsis",
                 "_firsts", "_required", "_instance", "_instances")

    def __init__(self, phrases: Sequence[Phrase],
                 operands: Sequence[Sequence[tuple[int, bool]]] | None = None, *,
                 width: int = SNIPPET_TOKENS, open_mark: str = SNIPPET_OPEN,
                 close_mark: str = SNIPPET_CLOSE, ellipsis: str = SNIPPET_ELLIPSIS) -> None:
        self.phrases = tuple(phrases)
        self.operands = None if operands is None else tuple(tuple(o) for o in operands)
        self.width, self.open_mark, self.close_mark, self.ellipsis = (
            width, open_mark, close_mark, ellipsis)
        # a column holding none of these (as text) holds no instance
        self._firsts = tuple(dict.fromkeys(p.words[0] for p in self.phrases if p.words))
        # one operand naming every phrase, none negated (an AND query): all marked, or none
        self._required = None
        if self.operands is not None and len(self.operands) == 1 and not any(
                negated for _, negated in self.operands[0]):
            numbers = frozenset(number for number, _ in self.operands[0])
            if numbers == frozenset(range(len(self.phrases))):
                self._required = numbers
        # one phrase, marked wherever it occurs: ``_whole`` finds its instances in a
        # spaced column's text (``_InstanceFinder``)
        self._instance = None
        if len(self.phrases) == 1 and self.phrases[0].words and (
                self.operands is None or self._required is not None):
            self._instance = _InstanceFinder(self.phrases[0])
        # several phrases, each found so (``_whole_of_several``); None: a phrase has no
        # words, left to the general path
        self._instances = None
        if (self._instance is None and len(self.phrases) > 1
                and all(phrase.words for phrase in self.phrases)):
            self._instances = tuple(_InstanceFinder(phrase) for phrase in self.phrases)

    def _kept(self, found: set[int]) -> set[int] | None:
        """The phrases FTS5 reports instances of (None: all), of the phrases ``found`` in
        the row: those of the OR-operands the row satisfies (every positive phrase found
        in some column, no negated one); the phrases of an operand that fails are not
        marked, even where they occur."""
        if self.operands is None:
            return None
        if self._required is not None:
            return None if self._required <= found else set()
        kept: set[int] = set()
        for operand in self.operands:
            if all((number in found) != negated for number, negated in operand):
                kept.update(number for number, negated in operand if not negated)
        return kept

    def snippet(self, columns: Sequence[str | None]) -> str:
        """The snippet of the row whose indexed ``columns`` are given (None: empty)."""
        if not columns:
            return ""
        if self._instance is None and self._instances is None:
            return self._general(columns)
        # each text column's spaced form (``spaced_form``; None: split by the regex), made
        # once for both paths (a query that has no whole path splits inline: a list
        # made for it alone cost its hits 1 µs each)
        spaced = [spaced_form(text) if text and isinstance(text, str) else None
                  for text in columns]
        whole = (self._whole(columns, spaced) if self._instance is not None
                 else self._whole_of_several(columns, spaced))
        return self._general(columns, spaced) if whole is None else whole

    def _whole(self, columns: Sequence[str | None], spaced_forms: list) -> str | None:
        """The snippet of a one-phrase query where every text column is spaced
        (``spaced_form``) and every one holding the phrase no longer than the window: the
        column with the most instances (the first of equals: FTS5 scores such a column
        1,000 plus one per further instance, with no sentence bonus), whole, each run of
        overlapping instances marked. None where the general path must decide (a column
        split by the regex or longer than the window, no instance anywhere, a NUL in the
        text).

        A message of a few words is most search hits: this takes about 60 % of the
        general path's time there (docs/performance.md, issue 32)."""
        best, best_count, first = None, 0, self._firsts[0]
        for text, spaced in zip(columns, spaced_forms):
            if not text or not isinstance(text, str):
                continue
            if spaced is None:
                return None
            if first not in spaced:
                continue
            if len(spaced) > _WHOLE_CHARS * self.width:
                return None  # (as good as surely longer than the window)
            spans = self._instance.spans(spaced)
            if not spans:
                continue
            # (fewer than 2 × width characters hold at most width tokens)
            if len(spaced) >= 2 * self.width and len(spaced.split()) > self.width:
                return None
            if len(spans) > best_count:
                best, best_count = (text, spans), len(spans)
        if best is None or "\x00" in best[0]:  # (``_cut`` cuts each piece at a NUL)
            return None
        return self._marked(*best)

    def _whole_of_several(self, columns: Sequence[str | None],
                          spaced_forms: list) -> str | None:
        """``_whole`` for a query of several phrases (a boolean query): the column of the
        best score — 1,000 per phrase marked there, one per further instance (a window
        holding the whole column starts at its first token: no sentence bonus) — whole,
        the instances of the phrases FTS5 reports (``_kept``) marked. None where the
        general path must decide, as for ``_whole``.

        About three quarters of the general path's time for a short message (0.69–0.83,
        docs/performance.md, issue 32)."""
        patterns, width = self._instances, self.width
        held, found = [], set()
        for text, spaced in zip(columns, spaced_forms):
            if not text or not isinstance(text, str):
                continue
            if spaced is None:
                return None
            present = [number for number, phrase in enumerate(self.phrases)
                       if phrase.words[0] in spaced]
            if not present:
                continue
            if len(spaced) > _WHOLE_CHARS * width:
                return None  # (as good as surely longer than the window)
            spans = [(*span, number)
                     for number in present for span in patterns[number].spans(spaced)]
            if not spans:
                continue
            # (fewer than 2 × width characters hold at most width tokens)
            if len(spaced) >= 2 * width and len(spaced.split()) > width:
                return None
            found.update(number for _, _, number in spans)
            held.append((text, spans))
        kept = self._kept(found)
        best, best_score = None, 0
        for text, spans in held:
            if kept is not None:
                spans = [span for span in spans if span[2] in kept]
            score = _score(len({number for _, _, number in spans}), len(spans))
            if score > best_score:
                best, best_score = (text, spans), score
        if best is None or "\x00" in best[0]:  # (``_cut`` cuts each piece at a NUL)
            return None
        text, spans = best
        return self._marked(text, sorted((start, end) for start, end, _ in spans))

    def _marked(self, text: str, spans) -> str:
        """``text`` whole, each run of overlapping ``spans`` ((start, end), sorted) marked
        (the whole paths' snippet)."""
        if len(spans) == 1:  # most hits: one instance, written at once
            (start, end), = spans
            return (f"{text[:start]}{self.open_mark}{text[start:end]}{self.close_mark}"
                    f"{text[end:]}")
        out, offset = [], 0
        for start, end in _merged(spans):
            out += [text[offset:start], self.open_mark, text[start:end], self.close_mark]
            offset = end
        out.append(text[offset:])
        return "".join(out)

    def _general(self, columns: Sequence[str | None], spaced_forms: list | None = None) -> str:
        """The snippet by FTS5's steps: each column's instances, the best window, the cut
        (``spaced_forms``: each column's ``spaced_form``, where the caller has them)."""
        phrases, firsts = self.phrases, self._firsts
        parsed: list[tuple[Column | None, list]] = []
        for number, text in enumerate(columns):
            if not text or not isinstance(text, str):
                parsed.append((None, []))
                continue
            spaced = spaced_form(text) if spaced_forms is None else spaced_forms[number]
            if spaced is not None:
                for word in firsts:
                    if word in spaced:
                        break
                else:
                    parsed.append((None, []))  # no instance can be there
                    continue
            column = Column(text, spaced)
            parsed.append((column, _instances(column, phrases)))
        kept = self._kept({number for _, instances in parsed for _, number, _ in instances})
        if kept is not None:
            parsed = [(column, [i for i in instances if i[1] in kept])
                      for column, instances in parsed]
        best = (0, 0, 0)  # (score, column, start): the first column with the best window
        for number, (column, instances) in enumerate(parsed):
            if instances:
                score, start = self._best_window(column, instances)
                if score > best[0]:
                    best = (score, number, start)
        _, number, start = best
        column, instances = parsed[number]
        if column is None:  # no instance anywhere: the column's start
            text = columns[number]
            column = Column(text if isinstance(text, str) else "")
        return self._cut(column, instances, start)

    def _best_window(self, column: Column, instances) -> tuple[int, int]:
        """The score and start of the column's best window: the first of FTS5's
        candidates with the highest score."""
        width, size = self.width, len(column.tokens)
        if size <= width:
            # Every window holds the whole column and starts at its first token: the
            # score counts every instance (what the candidates below would find).
            return _score(len({phrase for _, phrase, _ in instances}), len(instances)), 0
        # The candidates, in FTS5's order: each instance's window, then the window of
        # the sentence it is in (a bonus for starting a sentence); the first best wins.
        windows = _Windows(instances, len(self.phrases), width, size)
        positions = windows.positions
        sentences = column.sentences(positions[-1])
        if len(positions) == 1:  # (the usual case, in short: the sentence's window if it
            at = positions[0]    # holds the instance, for its bonus, else its own)
            sentence = sentences[bisect.bisect_right(sentences, at) - 1]
            if sentence < at < sentence + width:
                return _PHRASE_SCORE + _bonus(sentence), sentence
            return _PHRASE_SCORE, windows.centred(at)
        around = [sentences[j - 1] for j in
                  map(bisect.bisect_right, itertools.repeat(sentences), positions)]
        in_sentence = [score + _bonus(sentence) if sentence < at else -1
                       for score, sentence, at in zip(windows.scores(around), around, positions)]
        candidates = list(itertools.chain.from_iterable(
            zip(windows.scores(positions), in_sentence)))
        best = max(candidates)
        i, of_sentence = divmod(candidates.index(best), 2)
        return best, around[i] if of_sentence else windows.centred(positions[i])

    def _cut(self, column: Column, instances, start: int) -> str:
        """The window of ``column`` from token ``start``, its instances marked."""
        text, size = column.text, len(column.tokens)
        open_mark, close_mark, ellipsis = self.open_mark, self.close_mark, self.ellipsis
        last = start + self.width - 1
        out = [ellipsis] if start > 0 else []
        # Only the window's ends and the marked runs' ends cut the text: jump between them.
        stop = min(last, size - 1)  # the window's last token inside the column
        # each place is counted from the last one found (``known``), not from the start
        known = (start, column.start_of(start)) if start else None
        offset = known[1] if start else 0
        # the instances' token runs, overlapping ones merged; a run begun before the
        # window is not marked
        for first, after in _merged([(at, at + length) for at, _, length in instances]):
            if first < start:
                continue
            if first > stop:
                break
            final = after - 1
            begin = column.start_of(first, known=known)
            known = (first, begin)
            out += [text[offset:begin], open_mark]
            offset = begin
            if final <= stop:
                end = column.end_of(final, known=known)
                out += [text[offset:end], close_mark]
                offset = end
                continue
            if stop == last:  # the run goes on past the window: closed at its end
                end = column.end_of(last, known=known)
                out += [text[offset:end], close_mark]
                offset = end
            break
        if stop == last:  # (after a run closed at the window's end this adds nothing)
            end = column.end_of(last, known=known)
            out.append(text[offset:end])
            offset = end
        if last >= size - 1:
            out.append(text[offset:])
        else:
            out.append(ellipsis)
        if "\x00" in text:
            # FTS5 appends each piece with printf's "%.*s", which stops at a NUL: a piece
            # holding one (the "\x00json:" multimodal marker) is cut there
            out = [piece.split("\x00", 1)[0] for piece in out]
        return "".join(out)


def snippet(columns: Sequence[str | None], phrases: Sequence[Phrase],
            operands: Sequence[Sequence[tuple[int, bool]]] | None = None, **marks) -> str:
    """One row's snippet (``SnippetQuery(phrases, operands, **marks).snippet(columns)``):
    for a page of rows, prepare the query once."""
    return SnippetQuery(phrases, operands, **marks).snippet(columns)
