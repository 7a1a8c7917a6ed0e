"""The FTS5 query sanitizer: every input → output pair of api-catalog §7, the fixed cases,
and routing decisions. Each non-empty Latin output is also run through FTS5's MATCH on an
in-memory table with the head columns: a sanitized query must never be a syntax error."""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest

from hermes_store.fts import query as fq
from hermes_store.backends.sqlite.fts.ddl import FTS_TABLE, TRIGRAM_TABLE

# (input, 0.19.0 output) — where 0.19.0 produced a valid query we must produce the same
# text, byte for byte (api-catalog rows 1-27, 32-46, 56, 58, 60-67, 69-71).
UPSTREAM_PAIRS = [
    ("hello world", "hello world"),
    ("", ""),
    ("   ", ""),
    ("\t\n", ""),
    ('"exact phrase"', '"exact phrase"'),
    ('"unterminated', "unterminated"),
    ('say "hi" and "bye', 'say "hi" and  bye'),
    ('a "b c" "d', 'a "b c"  d'),
    ('""', '""'),
    ('he said "a-b" ok', 'he said "a-b" ok'),
    ("chat-send", '"chat-send"'),
    ("docker-compose-up", '"docker-compose-up"'),
    ("fix chat-send bug", 'fix "chat-send" bug'),
    ("chat-send OR deploy-prod", '"chat-send" OR "deploy-prod"'),
    ('"my chat-send thing"', '"my chat-send thing"'),
    ("P2.2", '"P2.2"'),
    ("simulate.p2.test.ts", '"simulate.p2.test.ts"'),
    ("my-app.config.ts", '"my-app.config.ts"'),
    ("snake_case_name", '"snake_case_name"'),
    ("foo_bar-baz.qux", '"foo_bar-baz.qux"'),
    ("hello AND", "hello"),
    ("OR world", "world"),
    ("NOT foo", "foo"),
    ("foo NOT", "foo"),
    ("AND", ""),
    ("and hello", "hello"),
    ("hello or", "hello"),
    ("C++", "C"),
    ("(problem", "problem"),
    ("problem)", "problem"),
    ("(a OR b)", "a OR b"),
    ("TODO: fix", "TODO  fix"),
    ("col:term", "col term"),
    ("***", ""),
    ("deploy*", "deploy*"),
    ("deploy**", "deploy*"),
    ("*deploy", "deploy"),
    ("* deploy", "deploy"),
    ("a * b", "a  b"),
    ("{test}", "test"),
    ("x^2", "x 2"),
    ("a+b", "a b"),
    ("NEAR(a b)", "NEAR a b"),
    ("v1.2.3", '"v1.2.3"'),
    ("1.5", '"1.5"'),
    ("3-4", '"3-4"'),
    ("_private", "_private"),
    ("__init__", '"__init__"'),
    ("émigré-café", '"émigré-café"'),
    ("记忆断裂", "记忆断裂"),
    ("广西 OR 桂林 OR 漓江", "广西 OR 桂林 OR 漓江"),
    ("100%完成", "100%完成"),
    ("mixed 中文 query-term", 'mixed 中文 "query-term"'),
    ('"a" OR "b"', '"a" OR "b"'),
    ('"a b" NOT c', '"a b" NOT c'),
]

# (input, 0.19.0 output that MATCH rejected → silent [], our output). Rows 28-31, 47-55,
# 57, 59, 68 of api-catalog and its "upstream newest" table.
FIXED = [
    ("a AND OR b", "a AND OR b", "a OR b"),
    ("hello AND AND", "hello AND", "hello"),
    ("AND OR hello", "OR hello", "hello"),
    ("hello NOT OR", "hello NOT", "hello"),
    ("a AND NOT b", "a AND NOT b", "a NOT b"),
    ("2+2=4", "2 2=4", "2 2 4"),
    ("foo@bar.com", 'foo@"bar.com"', 'foo "bar.com"'),
    ("gateway/run.py", 'gateway/"run.py"', 'gateway "run.py"'),
    ("path/to/file", "path/to/file", "path to file"),
    ("#hashtag", "#hashtag", "hashtag"),
    ("a & b", "a & b", "a   b"),
    ("$HOME", "$HOME", "HOME"),
    ("it's", "it's", "it s"),
    ("100%", "100%", "100"),
    ("50% off", "50% off", "50  off"),
    ("why?", "why?", "why"),
    ("wow!", "wow!", "wow"),
    ("a=b", "a=b", "a b"),
    ("x,y;z", "x,y;z", "x y z"),
    ("[bracket]", "[bracket]", "bracket"),
    ("<tag>", "<tag>", "tag"),
    ("~tilde", "~tilde", "tilde"),
    ("back\\slash", "back\\slash", "back slash"),
    ("`code`", "`code`", "code"),
    ("e.g.", '"e.g".', '"e.g"'),
    ("hello-", "hello-", "hello"),
    ("-hello", "-hello", "hello"),
    ("--", "--", ""),
    ("a-", "a-", "a"),
    ("a\x0bb", "a\x0bb", "a b"),
    # not syntax errors: see test_nul_and_surrogates
    ("hello\x00world", None, "hello"),
    ("bad\ud800text", None, "bad\ufffdtext"),
    ("deploy AND*", "deploy AND*", "deploy"),
]


@pytest.fixture(scope="module")
def fts():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls)")
    conn.execute("INSERT INTO messages_fts VALUES ('hello world', 'terminal', '[]')")
    yield conn
    conn.close()


def assert_valid_match(conn, expression):
    conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                 (expression,)).fetchone()


@pytest.mark.parametrize("given, expected", UPSTREAM_PAIRS)
def test_upstream_pairs(fts, given, expected):
    out = fq.sanitize_fts5_query(given)
    assert out == expected
    if out and not fq.contains_cjk(out):
        assert_valid_match(fts, out)


@pytest.mark.parametrize("given, upstream, expected", FIXED)
def test_fixed_cases(fts, given, upstream, expected):
    out = fq.sanitize_fts5_query(given)
    assert out == expected
    if upstream:  # what 0.19.0 produced really is rejected by FTS5 ...
        with pytest.raises(sqlite3.OperationalError):
            assert_valid_match(fts, upstream)
    if out:  # ... and ours is accepted
        assert_valid_match(fts, out)


def test_nul_and_surrogates(fts):
    # a NUL ends the query at the C level (only "hello" is searched), so 0.19.0 finds
    # what the text before the NUL finds; the sanitizer cuts there too (issue 10 #2) ...
    assert fts.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                       ("hello\x00zzz",)).fetchone() == (1,)
    assert fq.sanitize_fts5_query("hello\x00zzz") == "hello"
    assert fts.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                       (fq.sanitize_fts5_query("hello\x00zzz"),)).fetchone() == (1,)
    # ... and a lone surrogate cannot even be bound (0.19.0's search raised)
    with pytest.raises(UnicodeEncodeError):
        assert_valid_match(fts, "bad\ud800text")


def test_truncation():
    assert len(fq.sanitize_fts5_query("word " * 1000)) == fq.MAX_FTS5_QUERY_CHARS
    assert fq.sanitize_fts5_query("word " * 1000).endswith("d word wor")
    assert len(fq.sanitize_fts5_query("a" * 3000)) == fq.MAX_FTS5_QUERY_CHARS
    # the cut leaves one '"', dropped as unpaired
    assert fq.sanitize_fts5_query("x" * 2047 + '"tail phrase"') == "x" * 2047


def test_percent_survives_only_while_the_query_is_cjk(fts):
    # U+3000 counts as CJK but strip() removes it: the '%' must go with it
    out = fq.sanitize_fts5_query("\u3000 50%")
    assert out == "50" and not fq.contains_cjk(out)
    assert_valid_match(fts, out)


@pytest.mark.parametrize(
    "text, cjk, count",
    [("", False, 0), ("abc", False, 0), ("émigré", False, 0), ("記", True, 1),
     ("한국어", True, 3), ("ひらがな", True, 4), ("カタカナ", True, 4), ("、", True, 1),
     ("\U00020000", True, 1), ("Agent通信协", True, 3)],
)
def test_cjk_detection(text, cjk, count):
    assert fq.contains_cjk(text) is cjk
    assert fq.count_cjk(text) == count


BOTH = {FTS_TABLE, TRIGRAM_TABLE}


@pytest.mark.parametrize(
    "query, route, match",
    [
        ("docker compose", fq.ROUTE_FTS, "docker compose"),
        ("记忆断裂", fq.ROUTE_TRIGRAM, '"记忆断裂"'),
        ("Agent通信协", fq.ROUTE_TRIGRAM, '"Agent通信协"'),
        ("记忆系统 OR 断裂连接", fq.ROUTE_TRIGRAM, '"记忆系统" OR "断裂连接"'),
        ('"记忆 系统"', fq.ROUTE_TRIGRAM, '"记忆 系统"'),
        ("记忆*", fq.ROUTE_LIKE, ""),  # two characters once the '*' is gone
        ("记忆", fq.ROUTE_LIKE, ""),
        ("广西 OR 桂林 OR 漓江", fq.ROUTE_LIKE, ""),  # every term must have 3 CJK chars
        ("A通信", fq.ROUTE_LIKE, ""),  # 3 characters but only 2 of them CJK (upstream rule)
        ("AI 记忆系统", fq.ROUTE_LIKE, ""),  # "AI" can never match a trigram index
    ],
)
def test_routing(query, route, match):
    plan = fq.plan_search(fq.sanitize_fts5_query(query), BOTH)
    assert plan.route == route
    assert plan.match == match


def test_routing_without_indexes():
    assert fq.plan_search("记忆断裂", {FTS_TABLE}).route == fq.ROUTE_LIKE
    assert fq.plan_search("docker", set()).route == fq.ROUTE_LIKE
    assert fq.plan_search("", BOTH) is None
    assert fq.plan_search("docker", {FTS_TABLE}).retry_trigram is None


def test_like_terms_are_or_ed_substrings():
    plan = fq.plan_search(fq.sanitize_fts5_query('记忆 OR "断 裂" 100%完成'), BOTH)
    assert plan.like_terms == ("记忆", "断 裂", "100%完成")


def test_latin_queries_carry_a_trigram_retry_only_for_long_terms():
    assert fq.plan_search("youer", BOTH).retry_trigram == '"youer"'
    assert fq.plan_search("go fast", BOTH).retry_trigram is None
