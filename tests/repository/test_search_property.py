"""Property tests: no query text, however hostile, makes search raise or reach FTS5 in a
form it rejects (which 0.19.0 swallowed into a silent empty result) — nor, on
PostgreSQL, ``to_tsquery`` or a LIKE pattern."""

from __future__ import annotations

import logging
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_store import SessionDB
from hermes_store.fts import query as fq
from hermes_store.backends.sqlite.fts.ddl import FTS_TABLE, TRIGRAM_TABLE

from support.repository import copy_head

RESULT_KEYS = {"id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
               "model", "session_started", "context"}

PIECES = [
    "AND", "OR", "NOT", "NEAR", "and", "or", " AND ", " OR ", " NOT ", "NEAR(", "*", "**",
    '"', '""', "'", "(", ")", "[", "]", "{", "}", "<", ">", ":", "^", "+", "-", ".", "_",
    "%", "\\", "/", "@", "#", "$", "&", "|", "~", "!", "?", "=", ",", ";", "`",
    "\x00", "\x01", "\x0b", "\x1a", "\x7f", "\t", "\n", "\r", "\u3000", "\u00a0", "\u200b",
    "\ud800", "\udfff", "\U0001f600", "é", "记忆", "断裂", "记忆断裂", "한국어", "カタカナ",
    "docker", "compose", "chat-send", "P2.2", "foo@bar.com", "100%完成",
]

queries = st.lists(
    st.one_of(
        st.sampled_from(PIECES),
        # any code point, surrogates and controls included
        st.text(alphabet=st.characters(exclude_categories=()), max_size=6),
    ),
    max_size=14,
).map("".join)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request, tmp_path_factory):
    """One store per engine for the module (PostgreSQL: a database at head taken from
    the test server's template and given back afterwards)."""
    if request.param == "sqlite":
        target = copy_head(tmp_path_factory.mktemp("prop") / "state.db")
    else:
        server = request.getfixturevalue("pg_server")
        template = request.getfixturevalue("pg_template")
        name = template.take()
        request.addfinalizer(lambda: template.give_back(name))
        target = server.url(name)
    db = SessionDB(target)
    db.create_session("s1", "cli")
    db.create_session("s2", "telegram")
    db.create_session("job", "cron")
    for sid, text in [("s1", "run docker compose up"), ("s1", "记忆断裂问题"),
                      ("s2", "chat-send foo@bar.com P2.2"), ("job", "100%完成 한국어"),
                      ("s2", "a (b) [c] {d} \"e\" 'f' * % _ - ."), ("s1", "")]:
        db.append_message(sid, "user", text, tool_calls=[{"q": text}] if text else None)
    db.append_message("s1", "tool", "tool output docker", tool_name="terminal")
    yield db
    db.close()


@pytest.fixture(scope="module")
def fts5():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls)")
    conn.execute("CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name, "
                 "tokenize='trigram')")
    yield conn
    conn.close()


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=queries,
    sort=st.sampled_from([None, "newest", "oldest", " Oldest ", "bogus"]),
    limit=st.sampled_from([None, -1, 0, 1, 5, 20]),
    offset=st.integers(min_value=0, max_value=3),
    sources=st.sampled_from([None, [], ["cli"], ["telegram", "cron"]]),
    roles=st.sampled_from([None, [], ["user"], ["tool", "assistant"]]),
    include_inactive=st.booleans(),
)
def test_search_never_raises_and_never_falls_back(store, query, sort, limit, offset, sources,
                                                  roles, include_inactive):
    watcher = _Warnings()
    logger = logging.getLogger("hermes_store.repository.search")
    logger.addHandler(watcher)
    try:
        results = store.search_messages(
            query, source_filter=sources, role_filter=roles, limit=limit, offset=offset,
            sort=sort, include_inactive=include_inactive)
    finally:
        logger.removeHandler(watcher)
    assert isinstance(results, list)
    assert all(set(r) == RESULT_KEYS for r in results)
    assert watcher.records == []  # no MATCH error had to be papered over


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=queries)
def test_every_planned_match_is_valid_fts5(fts5, query):
    sanitized = fq.sanitize_fts5_query(query)
    plan = fq.plan_search(sanitized, {FTS_TABLE, TRIGRAM_TABLE})
    if plan is None:
        return
    checks = {fq.ROUTE_FTS: "messages_fts", fq.ROUTE_TRIGRAM: "messages_fts_trigram"}
    if plan.route in checks:
        table = checks[plan.route]
        fts5.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (plan.match,))
    if plan.retry_trigram:
        fts5.execute("SELECT count(*) FROM messages_fts_trigram WHERE messages_fts_trigram "
                     "MATCH ?", (plan.retry_trigram,))
