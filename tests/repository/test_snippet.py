"""``fts.snippet.snippet`` is SQLite's own ``snippet()``: generated rows and queries (phrases,
prefixes, AND, OR, NOT), the Python snippet against FTS5's on an in-memory table with the
word index's columns."""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_store.fts.query import SNIPPET_TOKENS
from hermes_store.fts.snippet import Phrase, SnippetQuery, snippet
from hermes_store.fts.tokens import Column, spaced_form

WORDS = ["docker", "compose", "deploy", "deploying", "chat", "send", "alpha", "beta",
         "gamma", "Docker", "DEPLOY", "x1", "42", "kube"]
SEPARATORS = [" ", " ", " ", "  ", ", ", ". ", ": ", "-", "_", "\n", ".", " (", ") ", "/"]


@pytest.fixture(scope="module")
def fts():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tool_name, tool_calls)")
    yield conn
    conn.close()


def sqlite_snippet(conn, columns, query: str) -> str | None:
    conn.execute("DELETE FROM t")
    conn.execute("INSERT INTO t (rowid, content, tool_name, tool_calls) VALUES (1, ?, ?, ?)",
                 columns)
    row = conn.execute(
        "SELECT snippet(t, -1, '>>>', '<<<', '...', ?) FROM t WHERE t MATCH ?",
        (SNIPPET_TOKENS, query)).fetchone()
    return None if row is None else row[0]


def text_of(parts) -> str:
    return "".join(word + sep for word, sep in parts)


# (a text may start with separators too: the first token is then not at offset 0)
LEADING = ["", "", " ", "  (", "\n", ". ", "-"]


def texts_of(words, separators, leading=LEADING, min_size=0, max_size=120):
    """Texts of ``words``, each followed by one of ``separators``, after a ``leading``."""
    return st.tuples(
        st.sampled_from(leading),
        st.lists(st.tuples(st.sampled_from(words), st.sampled_from(separators)),
                 min_size=min_size, max_size=max_size),
    ).map(lambda parts: parts[0] + text_of(parts[1]))


texts = texts_of(WORDS, SEPARATORS)
phrases = st.lists(st.sampled_from(WORDS[:9]), min_size=1, max_size=3).flatmap(
    lambda words: st.booleans().map(lambda prefix: (tuple(w.lower() for w in words), prefix)))


def fts5_phrase(words, prefix) -> str:
    return '"' + " ".join(words) + '"' + ("*" if prefix else "")


def assert_snippet_is_fts5s(fts, columns, query, joiner) -> None:
    """The Python snippet of ``columns`` for ``query`` (phrases joined by ``joiner``) is
    FTS5's, where the row matches."""
    want = sqlite_snippet(fts, columns, joiner.join(fts5_phrase(w, p) for w, p in query))
    if want is None:
        return  # the row does not match: no snippet to compare
    assert snippet(columns, [Phrase(w, p) for w, p in query]) == want


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=texts, tool_name=st.one_of(st.none(), st.sampled_from(WORDS)),
       tool_calls=st.one_of(st.none(), texts), query=st.lists(phrases, min_size=1, max_size=3),
       joiner=st.sampled_from([" ", " OR "]))
def test_the_snippet_is_fts5s(fts, content, tool_name, tool_calls, query, joiner):
    assert_snippet_is_fts5s(fts, (content, tool_name, tool_calls), query, joiner)


# Text beyond ASCII takes the other tokenizing path (offsets kept for every token): words
# of other scripts and cases (none with a diacritic, which FTS5 folds and the Python
# split keeps), CJK runs, and separators of other scripts.
UNICODE_WORDS = ["docker", "deploy", "x1", "记忆", "断裂", "привет", "Привет", "ДОМ", "дом",
                 "straße", "Ωmega"]
UNICODE_SEPARATORS = SEPARATORS + ["。", "，", " — ", "\u3000", "…"]
unicode_texts = texts_of(UNICODE_WORDS, UNICODE_SEPARATORS, leading=LEADING + ["。"])
unicode_phrases = st.lists(st.sampled_from(UNICODE_WORDS), min_size=1, max_size=2).flatmap(
    lambda words: st.booleans().map(lambda prefix: (tuple(w.lower() for w in words), prefix)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=unicode_texts, tool_calls=st.one_of(st.none(), texts),
       query=st.lists(unicode_phrases, min_size=1, max_size=2),
       joiner=st.sampled_from([" ", " OR "]))
def test_the_snippet_is_fts5s_beyond_ascii(fts, content, tool_calls, query, joiner):
    assert_snippet_is_fts5s(fts, (content, None, tool_calls), query, joiner)


# A text mostly in ASCII (a log dump with a few words of other scripts) is split the fast
# way, its characters beyond ASCII written into the spaced form one by one.
MOSTLY_ASCII_WORDS = WORDS * 8 + UNICODE_WORDS
MOSTLY_ASCII_SEPARATORS = SEPARATORS * 4 + UNICODE_SEPARATORS
mostly_ascii_texts = texts_of(MOSTLY_ASCII_WORDS, MOSTLY_ASCII_SEPARATORS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=mostly_ascii_texts, tool_calls=st.one_of(st.none(), mostly_ascii_texts),
       query=st.lists(st.one_of(phrases, unicode_phrases), min_size=1, max_size=3),
       joiner=st.sampled_from([" ", " OR "]))
def test_the_snippet_is_fts5s_in_mostly_ascii_text(fts, content, tool_calls, query, joiner):
    assert_snippet_is_fts5s(fts, (content, None, tool_calls), query, joiner)


# Words whose lower case str.lower writes from the text around them (a final sigma) or
# as two characters (a dotted capital I): the fast split must leave such a text to the
# regex, whose tokens are lower-cased whole.
CASED_BY_CONTEXT = ["ΟΔΟΣ", "ΣΑΣ", "İstanbul", "İ"]


# long enough (≥ 60 words) that text beyond ASCII takes the fast split
@settings(max_examples=300, deadline=None)
@given(text=texts_of(MOSTLY_ASCII_WORDS + CASED_BY_CONTEXT, MOSTLY_ASCII_SEPARATORS,
                     min_size=60, max_size=200))
def test_the_fast_split_finds_the_regex_splits_tokens_and_places(text):
    fast, regex = Column(text), Column(text, None)
    assert fast.tokens == regex.tokens
    for i in range(len(regex.tokens)):
        assert (fast.start_of(i), fast.end_of(i)) == (regex.start_of(i), regex.end_of(i))
    assert fast.sentences(len(regex.tokens)) == regex.sentences(len(regex.tokens))
    for word in {t[:2] for t in regex.tokens}:
        assert fast.positions(word, True) == regex.positions(word, True)


# A one-phrase query over short columns takes ``SnippetQuery._whole``: the column with
# the most instances, whole, marked. Phrases of few words, repeated (overlapping
# instances: "chat chat" in "chat chat chat"), columns around the window's 40 tokens.
SHORT_WORDS = ["chat", "send", "Chat", "docker", "x1", "chats", "sender"]
short_texts = texts_of(SHORT_WORDS, SEPARATORS + ["\x00"], max_size=SNIPPET_TOKENS + 4)
one_phrase = st.lists(st.sampled_from(["chat", "send", "docker"]), min_size=1, max_size=3)


def spaced_forms(columns) -> list:
    """Each column's ``spaced_form``, as ``SnippetQuery.snippet`` hands them on."""
    return [spaced_form(text) if text else None for text in columns]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=short_texts, tool_name=st.one_of(st.none(), st.sampled_from(SHORT_WORDS)),
       tool_calls=st.one_of(st.none(), short_texts), words=one_phrase, prefix=st.booleans(),
       required=st.booleans())
def test_a_short_columns_snippet_is_the_general_paths(fts, content, tool_name, tool_calls,
                                                      words, prefix, required):
    query = SnippetQuery([Phrase(tuple(words), prefix)], [[(0, False)]] if required else None)
    columns = (content, tool_name, tool_calls)
    whole = query._whole(columns, spaced_forms(columns))
    if whole is not None:
        assert whole == query._general(columns, spaced_forms(columns))
        if "\x00" not in content + (tool_calls or ""):
            assert_snippet_is_fts5s(fts, columns, [(tuple(words), prefix)], " ")


# Several phrases (a boolean query) take such a path too (``_whole_of_several``): each
# column's instances of every phrase, those of the OR-operands the row satisfies marked
# (``operands``: AND, OR, NOT as ``fts/tsquery.operands`` writes them; None: every
# phrase, as an OR of them).
operand_lists = st.lists(
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=3),
    min_size=1, max_size=3)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=short_texts, tool_name=st.one_of(st.none(), st.sampled_from(SHORT_WORDS)),
       tool_calls=st.one_of(st.none(), short_texts),
       query=st.lists(st.tuples(one_phrase, st.booleans()), min_size=2, max_size=3),
       operands=st.one_of(st.none(), operand_lists))
def test_several_phrases_over_short_columns_take_the_general_paths_snippet(
        fts, content, tool_name, tool_calls, query, operands):
    phrases = [Phrase(tuple(words), prefix) for words, prefix in query]
    if operands is not None:
        operands = [[(number % len(phrases), negated) for number, negated in operand]
                    for operand in operands]
    query_ = SnippetQuery(phrases, operands)
    columns = (content, tool_name, tool_calls)
    whole = query_._whole_of_several(columns, spaced_forms(columns))
    if whole is not None:
        assert whole == query_._general(columns, spaced_forms(columns))
        if operands is None and "\x00" not in content + (tool_calls or ""):
            assert_snippet_is_fts5s(fts, columns, query, " OR ")


def test_a_boolean_querys_short_row_takes_the_whole_column_path():
    # "kubernetes OR swarm NOT docker": kubernetes, or swarm without docker
    phrases = [Phrase(("kubernetes",)), Phrase(("swarm",)), Phrase(("docker",))]
    query = SnippetQuery(phrases, [[(0, False)], [(1, False), (2, True)]])
    both = ("Move the swarm to Kubernetes, not docker swarm.", None, None)
    assert query._whole_of_several(both, spaced_forms(both)) == \
        "Move the swarm to >>>Kubernetes<<<, not docker swarm."
    swarm = ("docker_swarm", "swarm", "kubernetes swarm")
    assert query._whole_of_several(swarm, spaced_forms(swarm)) == ">>>kubernetes<<< swarm"
    for columns in (both, swarm):
        assert query.snippet(columns) == query._general(columns, spaced_forms(columns))
    long = ("swarm " + "word " * 60, None, None)
    assert query._whole_of_several(long, spaced_forms(long)) is None  # the window decides


def test_a_short_row_takes_the_whole_column_path():
    query = SnippetQuery([Phrase(("chat", "send"))], [[(0, False)]])
    columns = ("Use chat-send, then chat send again.", None, '{"tool": "chat_send"}')
    assert query._whole(columns, spaced_forms(columns)) == \
        "Use >>>chat-send<<<, then >>>chat send<<< again."
    assert query.snippet(columns) == query._general(columns, spaced_forms(columns))
    long = ("chat send " + "word " * 60, None, None)
    assert query._whole(long, spaced_forms(long)) is None  # the window decides
    for words in (SNIPPET_TOKENS - 2, SNIPPET_TOKENS - 1):  # the window's size, one more
        columns = ("chat send " + "w " * words, None, None)
        whole = query._whole(columns, spaced_forms(columns))
        assert (whole is None) == (words + 2 > SNIPPET_TOKENS)
        assert query.snippet(columns) == query._general(columns, spaced_forms(columns))


def test_text_cased_by_context_short_or_mostly_beyond_ascii_takes_the_regex_split():
    log = "docker compose up " * 20
    assert Column(log + "ΟΔΟΣ ok")._offsets is not None
    assert Column(log + "İstanbul ok")._offsets is not None
    assert Column("记忆断裂 " * 80 + "docker")._offsets is not None  # a CJK text
    assert Column("docker 日志")._offsets is not None  # short
    mostly_ascii = Column(log + "日志")
    assert mostly_ascii._offsets is None and mostly_ascii.tokens[-1] == "日志"


def test_only_the_phrases_of_a_satisfied_operand_are_marked():
    # "docker build OR exit code" on "docker-compose failed: exit code 137": the row
    # holds (exit AND code), not (docker AND build): docker stays unmarked. (FTS5 marks
    # the phrases whose iterators stand on the row: in a table of many rows, those of
    # the operands the row satisfies — tests/backends/postgresql/test_fts_search.py holds the
    # two equal over its corpus; in a table of one row, every phrase the row holds.)
    phrases = [Phrase(("docker",)), Phrase(("build",)), Phrase(("exit",)), Phrase(("code",))]
    operands = [[(0, False), (1, False)], [(2, False), (3, False)]]
    text = "docker-compose failed: exit code 137"
    assert snippet((text, None, None), phrases, operands) == \
        "docker-compose failed: >>>exit<<< >>>code<<< 137"
    assert snippet((text, None, None), phrases) == \
        ">>>docker<<<-compose failed: >>>exit<<< >>>code<<< 137"
    # a negated phrase is never marked; an operand it spoils marks nothing
    phrases = [Phrase(("exit",)), Phrase(("docker",)), Phrase(("code",))]
    assert snippet((text, None, None), phrases, [[(0, False), (1, True)], [(2, False)]]) == \
        "docker-compose failed: exit >>>code<<< 137"


@pytest.mark.parametrize("columns, query, phrases", [
    (("Use docker compose up now.", None, None), '"docker compose"', [Phrase(("docker", "compose"))]),
    (("a chat-send tool", None, None), '"chat send"', [Phrase(("chat", "send"))]),
    ((" ".join(f"w{i}" for i in range(200)) + " docker end.", None, None), "docker",
     [Phrase(("docker",))]),
    (("First sentence here. " + "filler " * 60 + "Second: deploying it. " + "tail " * 60,
      None, None), "deploy*", [Phrase(("deploy",), prefix=True)]),
    (("nothing relevant", "docker_run", '{"name": "docker"}'), "docker", [Phrase(("docker",))]),
    (("", None, None), "docker", [Phrase(("docker",))]),
    # instances found where the first word starts a token only, overlapping ones merged
    (("chat chat chat send", None, None), '"chat chat"', [Phrase(("chat", "chat"))]),
    (("rechat send; chatsend; chat  send", None, None), '"chat send"',
     [Phrase(("chat", "send"))]),
    (("chat send, chat-sending, chat sender", None, None), '"chat send"*',
     [Phrase(("chat", "send"), prefix=True)]),
])
def test_examples_against_fts5(fts, columns, query, phrases):
    want = sqlite_snippet(fts, columns, query)
    got = snippet(columns, phrases)
    if want is not None:
        assert got == want
    else:
        assert got == (columns[0] or "")[: len(got)]


def test_a_row_without_any_instance_gets_its_contents_start():
    text = " ".join(f"w{i}" for i in range(100))
    assert snippet((text, None, None), [Phrase(("docker",))]) == \
        " ".join(f"w{i}" for i in range(SNIPPET_TOKENS)) + "..."
