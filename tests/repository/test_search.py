"""search_messages against real files: api-catalog §7 (shape, snippets, context, filters,
sorting, paging, visibility, CJK routing) and user-pain §4 (punctuated queries, bounded
short-CJK scan, fallback when an index is missing or damaged)."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB
from hermes_store.backends.sqlite.fts import ddl as fts_ddl

from support.repository import backend, db, db_path, db_target, reopen  # noqa: F401

RESULT_KEYS = {"id", "session_id", "role", "snippet", "timestamp", "tool_name", "source",
               "model", "session_started", "context"}


def ids(results):
    return [r["id"] for r in results]


def write_behind(db, sql, **params):
    """Plain SQL (``:name`` parameters) on the store's engine, outside the repository."""
    with db.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


@pytest.fixture
def corpus(db):
    """Two sessions on different platforms; timestamps fixed so sort order is known."""
    db.create_session("cli1", "cli", model="m-cli")
    db.create_session("tg1", "telegram", model="m-tg")
    m = {}
    m["q"] = db.append_message("cli1", "user", "How do I run docker compose locally?",
                               timestamp=100.0)
    m["a"] = db.append_message("cli1", "assistant", "Use docker compose up -d.",
                               tool_calls=[{"id": "c1", "type": "function", "function": {
                                   "name": "terminal", "arguments": '{"cmd": "kubectl apply"}'}}],
                               timestamp=101.0)
    m["t"] = db.append_message("cli1", "tool", "containers started", tool_call_id="c1",
                               tool_name="terminal", timestamp=102.0)
    m["tg"] = db.append_message("tg1", "user", "docker docker docker on telegram",
                                timestamp=50.0)
    return m


# --------------------------------------------------------------------------- shape


def test_result_shape_and_session_fields(db, corpus):
    results = db.search_messages("compose")
    assert ids(results) and all(set(r) == RESULT_KEYS for r in results)
    hit = next(r for r in results if r["id"] == corpus["q"])
    session = db.get_session("cli1")
    assert (hit["session_id"], hit["role"], hit["source"], hit["model"]) == (
        "cli1", "user", "cli", "m-cli")
    assert hit["session_started"] == session["started_at"]
    assert hit["timestamp"] == 100.0 and hit["tool_name"] is None


def test_snippet_marks_the_match(db, corpus):
    (hit,) = db.search_messages("locally")
    assert ">>>locally<<<" in hit["snippet"]


def test_long_message_snippet_is_cut_with_ellipsis(db):
    db.create_session("s", "cli")
    words = " ".join(f"w{i}" for i in range(100)) + " needle " + " ".join(
        f"v{i}" for i in range(100))
    db.append_message("s", "user", words)
    (hit,) = db.search_messages("needle")
    assert ">>>needle<<<" in hit["snippet"]
    assert hit["snippet"].startswith("...") and hit["snippet"].endswith("...")
    assert len(hit["snippet"].split()) <= 40


def test_tool_names_and_tool_call_arguments_are_searchable(db, corpus):
    assert set(ids(db.search_messages("terminal"))) == {corpus["a"], corpus["t"]}
    (hit,) = db.search_messages("kubectl")
    assert hit["id"] == corpus["a"] and ">>>kubectl<<<" in hit["snippet"]


# --------------------------------------------------------------------------- context


def test_context_is_previous_match_next_cut_to_200_chars(db):
    db.create_session("s", "cli")
    db.append_message("s", "user", "p" * 500, timestamp=1.0)
    db.append_message("s", "assistant", "the unicorn answer", timestamp=2.0)
    db.append_message("s", "user", [{"type": "text", "text": "see"},
                                    {"type": "image_url", "image_url": {"url": "u"}}],
                      timestamp=3.0)
    (hit,) = db.search_messages("unicorn")
    assert hit["context"] == [
        {"role": "user", "content": "p" * 200},
        {"role": "assistant", "content": "the unicorn answer"},
        {"role": "user", "content": "see"},
    ]


def test_context_at_the_ends_of_a_session_has_two_entries(db, corpus):
    (first,) = db.search_messages("locally")
    assert [c["role"] for c in first["context"]] == ["user", "assistant"]
    (last,) = db.search_messages("containers")
    assert [c["role"] for c in last["context"]] == ["assistant", "tool"]


def test_context_orders_neighbours_by_timestamp_and_ignores_active(db):
    db.create_session("s", "cli")
    db.append_message("s", "assistant", "the platypus", timestamp=20.0)
    db.append_message("s", "user", "image only", timestamp=10.0)
    late = db.append_message("s", "user", "later by clock", timestamp=30.0)
    write_behind(db, "UPDATE messages SET content = :c WHERE content = 'image only'",
                 c='\x00json:[{"type": "image_url", "image_url": {"url": "u"}}]')
    db.rewind_to_message("s", late)  # a rewound neighbour still gives context
    (hit,) = db.search_messages("platypus")
    assert hit["context"] == [
        {"role": "user", "content": "[multimodal content]"},
        {"role": "assistant", "content": "the platypus"},
        {"role": "user", "content": "later by clock"},
    ]


# --------------------------------------------------------------------------- filters


def test_source_filter(db, corpus):
    assert set(ids(db.search_messages("docker"))) == {corpus["q"], corpus["a"], corpus["tg"]}
    assert ids(db.search_messages("docker", source_filter=["telegram"])) == [corpus["tg"]]
    assert db.search_messages("docker", source_filter=[]) == []  # empty list: nothing


def test_exclude_sources(db, corpus):
    assert corpus["tg"] not in ids(db.search_messages("docker", exclude_sources=["telegram"]))
    assert len(db.search_messages("docker", exclude_sources=[])) == 3  # empty: no exclusion


def test_filter_values_with_lone_surrogates_match_like_stored_text(db, corpus):
    db.create_session("odd", "src\ud800")  # stored as "src\ufffd"
    odd = db.append_message("odd", "user", "docker elsewhere")
    assert ids(db.search_messages("docker", source_filter=["src\ud800"])) == [odd]
    assert ids(db.search_messages("docker", role_filter=["\ud800"])) == []
    assert odd not in ids(db.search_messages("docker", exclude_sources=["src\ud800"]))


def test_a_filter_given_as_a_named_tuple_reaches_the_search(db, corpus):
    """The API boundary rebuilds the plain containers it scrubs; a tuple subclass cannot
    be rebuilt from one iterable and is handed on (the search scrubs its items itself)."""
    from typing import NamedTuple

    class Sources(NamedTuple):
        first: str
        second: str

    db.create_session("odd", "src\ud800")  # stored as "src\ufffd"
    odd = db.append_message("odd", "user", "docker elsewhere")
    found = db.search_messages("docker", source_filter=Sources("telegram", "src\ud800"))
    assert set(ids(found)) == {corpus["tg"], odd}


def test_role_filter(db, corpus):
    assert set(ids(db.search_messages("docker", role_filter=["user"]))) == {
        corpus["q"], corpus["tg"]}
    assert len(db.search_messages("docker", role_filter=[])) == 3  # empty: all roles


def test_rewound_rows_hidden_compacted_rows_kept(db):
    db.create_session("s", "cli")
    kept = db.append_message("s", "user", "walrus one")
    db.archive_and_compact("s", [{"role": "user", "content": "walrus summary"}])
    rewound = db.append_message("s", "user", "walrus two")
    db.rewind_to_message("s", rewound)
    visible = set(ids(db.search_messages("walrus")))
    assert kept in visible and rewound not in visible and len(visible) == 2
    assert rewound in ids(db.search_messages("walrus", include_inactive=True))


def test_rows_marked_hidden_for_display_are_not_found(db):
    db.create_session("s", "cli")
    hidden = db.append_message("s", "user", "secret lemur")
    write_behind(db, "UPDATE messages SET display_kind = 'hidden' WHERE id = :id", id=hidden)
    assert db.search_messages("lemur") == []
    assert ids(db.search_messages("lemur", include_inactive=True)) == [hidden]


# --------------------------------------------------------------------------- sort / paging


def test_default_order_is_relevance(db, corpus):
    assert ids(db.search_messages("docker"))[0] == corpus["tg"]  # three hits in one row


@pytest.mark.parametrize("sort", ["newest", " NEWEST ", "Newest"])
def test_sort_newest(db, corpus, sort):
    assert ids(db.search_messages("docker", sort=sort)) == [corpus["a"], corpus["q"], corpus["tg"]]


def test_sort_oldest_and_unknown(db, corpus):
    oldest_first = [corpus["tg"], corpus["q"], corpus["a"]]
    assert ids(db.search_messages("docker", sort="oldest")) == oldest_first
    assert ids(db.search_messages("docker", sort="sideways")) == ids(db.search_messages("docker"))


def _write_before(db, write, last):
    """Run ``write`` (on another store) just before the search's SELECT for which
    ``last(statement)`` holds, once; returns the SELECTs seen."""
    selects = []

    def before(conn, cursor, statement, parameters, context, executemany):
        # (a first page on PostgreSQL opens with its CTEs)
        if statement.lstrip().startswith(("SELECT messages", "WITH ")):
            selects.append(statement)
            if last(statement) and write not in selects:
                selects.append(write)
                write()

    sa.event.listen(db.engine, "before_cursor_execute", before)
    return selects


@pytest.mark.sqlite_only("PostgreSQL reads the page and its rows in one statement "
                         "(tests/backends/postgresql/test_store.py)")
@pytest.mark.parametrize("query, sort", [("docker", "newest"), ("记忆", None)])
def test_a_page_and_its_rows_are_read_in_one_snapshot(db, query, sort):
    # a time-ordered page (and the short-CJK scan) reads ids first, then their rows: a
    # change committed in between must not show
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "docker 记忆 first", timestamp=1.0)
    hit = db.append_message("s", "user", "docker 记忆 second", timestamp=2.0)
    with reopen(db) as other:
        selects = _write_before(db, lambda: write_behind(
            other, "UPDATE messages SET content = :text WHERE id = :id",
            text="changed meanwhile", id=hit), last=lambda statement: "prev_message" in statement)
        found = db.search_messages(query, sort=sort)
    assert len(selects) == 3 and callable(selects[2])  # the write ran in between
    assert ids(found) == [hit, first]
    assert found[0]["context"][1]["content"] == "docker 记忆 second"
    assert db.search_messages(query, sort=sort)[0]["context"][1]["content"] == "changed meanwhile"


def test_a_word_search_retried_on_the_trigram_index_reads_one_snapshot(db):
    # nothing matches the word, so the trigram index is asked: a change committed
    # before that second statement must not show
    db.create_session("s", "cli")
    wanted = db.append_message("s", "user", "修改youer服务端配置")
    with reopen(db) as other:
        selects = _write_before(db, lambda: write_behind(
            other, "UPDATE messages SET content = :text WHERE id = :id",
            text="changed meanwhile", id=wanted), last=lambda statement: "trigram" in statement)
        found = db.search_messages("youer")
    assert any(callable(s) for s in selects)  # the write ran before the trigram statement
    assert ids(found) == [wanted] and found[0]["context"][0]["content"] == "修改youer服务端配置"
    assert db.search_messages("youer") == []


def test_paging(db, corpus):
    every = ids(db.search_messages("docker", sort="newest"))
    assert ids(db.search_messages("docker", sort="newest", limit=2)) == every[:2]
    assert ids(db.search_messages("docker", sort="newest", limit=2, offset=2)) == every[2:]
    assert db.search_messages("docker", limit=2, offset=3) == []
    assert db.search_messages("docker", limit=0) == []
    assert ids(db.search_messages("docker", sort="newest", limit=-1)) == every


# --------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("query", ["", "   ", "AND", "***", "()", '"', ":", "\x00", "--"])
def test_queries_with_nothing_to_search_return_empty(db, corpus, query):
    assert db.search_messages(query) == []


@pytest.mark.parametrize(
    "query, text",
    [
        ("foo@bar.com", "mail foo@bar.com today"),
        ("gateway/run.py", "edit gateway/run.py please"),
        ("it's", "it's broken"),
        ("50% off", "get 50% off"),
        ("C++", "C++ templates"),
        ("e.g.", "e.g. this one"),
        ("#123", "see issue #123"),
        ("ok?", "is it ok?"),
        ("a AND OR zebu", "a zebu"),
        ("hello NOT OR", "hello there"),
    ],
)
def test_punctuated_queries_find_their_message(db, query, text):
    # 0.19.0 returned [] for every one of these (MATCH syntax error swallowed)
    db.create_session("s", "cli")
    wanted = db.append_message("s", "user", text)
    db.append_message("s", "user", "unrelated filler")
    assert ids(db.search_messages(query)) == [wanted]


# --------------------------------------------------------------------------- CJK routing


@pytest.fixture
def cjk(db):
    db.create_session("zh", "cli")
    return {
        "broken": db.append_message("zh", "user", "我们讨论记忆断裂问题", timestamp=10.0),
        "system": db.append_message("zh", "assistant", "记忆系统需要重新设计", timestamp=20.0),
        "link": db.append_message("zh", "user", "断裂连接已经修复", timestamp=30.0),
        "agent": db.append_message("zh", "user", "Agent通信协议文档", timestamp=40.0),
        "pct": db.append_message("zh", "user", "任务100%完成了", timestamp=50.0),
        "pct_decoy": db.append_message("zh", "user", "任务100X完成了", timestamp=60.0),
    }


def test_cjk_three_chars_uses_trigram_with_markers(db, cjk):
    (hit,) = db.search_messages("记忆断裂")
    assert hit["id"] == cjk["broken"] and ">>>记忆断裂<<<" in hit["snippet"]
    (agent,) = db.search_messages("Agent通信协")
    assert agent["id"] == cjk["agent"] and ">>>" in agent["snippet"]


def test_cjk_boolean_operators_on_trigram(db, cjk):
    assert set(ids(db.search_messages("记忆系统 OR 断裂连接"))) == {cjk["system"], cjk["link"]}
    assert db.search_messages("记忆系统 断裂连接") == []  # implicit AND


def test_cjk_quoted_phrase_on_trigram(db, cjk):
    # upstream stripped only the outer quotes and searched for a literal '"'
    assert set(ids(db.search_messages('"记忆系统" OR "断裂连接"'))) == {cjk["system"], cjk["link"]}


def test_short_cjk_terms_use_the_like_scan_or_ed(db, cjk):
    hits = db.search_messages("记忆 断裂")
    assert ids(hits) == [cjk["link"], cjk["system"], cjk["broken"]]  # newest first
    assert all(">>>" not in h["snippet"] for h in hits)  # LIKE snippets carry no markers
    assert ids(db.search_messages("广西 OR 桂林 OR 记忆")) == [cjk["system"], cjk["broken"]]


def test_like_scan_escapes_wildcards(db, cjk):
    assert ids(db.search_messages("100%完成")) == [cjk["pct"]]


def test_like_scan_snippet_starts_near_the_first_term(db):
    db.create_session("zh", "cli")
    db.append_message("zh", "user", "x" * 300 + "记忆" + "y" * 300)
    (hit,) = db.search_messages("记忆")
    assert hit["snippet"] == "x" * 40 + "记忆" + "y" * 78  # 120 chars from 40 before


def test_like_scan_applies_visibility_and_filters(db, cjk):
    db.rewind_to_message("zh", cjk["link"])  # hides link, agent, pct, pct_decoy
    assert ids(db.search_messages("断裂")) == [cjk["broken"]]
    assert cjk["link"] in ids(db.search_messages("断裂", include_inactive=True))
    assert db.search_messages("断裂", source_filter=["telegram"]) == []
    assert db.search_messages("断裂", role_filter=["assistant"]) == []


def test_like_scan_is_bounded_to_the_newest_rows(db, cjk):
    db.short_query_scan_rows = 2  # only the two newest message ids are examined
    assert db.search_messages("记忆") == []  # the matches are older than the window
    assert ids(db.search_messages("完成")) == [cjk["pct_decoy"], cjk["pct"]]


def test_trigram_leaves_out_cron_sessions_like_upstream(db):
    db.create_session("job", "cron")
    db.append_message("job", "user", "定时任务记忆断裂")
    assert db.search_messages("记忆断裂") == []  # not in the trigram index (by design)
    assert len(db.search_messages("记忆")) == 1  # the bounded LIKE scan reads every row


def test_latin_word_glued_to_cjk_is_found_through_trigram(db):
    db.create_session("s", "cli")
    wanted = db.append_message("s", "user", "修改youer服务端配置")
    assert ids(db.search_messages("youer")) == [wanted]


def test_latin_retry_does_not_replace_real_results_on_later_pages(db):
    db.create_session("s", "cli")
    db.append_message("s", "user", "kestrel flight")
    db.append_message("s", "user", "关于kestrelx的问题")
    assert len(db.search_messages("kestrel")) == 1  # the exact token wins
    assert db.search_messages("kestrel", offset=1) == []


# --------------------------------------------------------------------------- degraded


def test_missing_index_falls_back_to_the_bounded_scan(db, corpus):
    if db.engine.dialect.name == "postgresql":
        from hermes_store.backends.postgresql.fts import ddl as fts_postgres

        db._write(fts_postgres.drop_fts)
    else:
        db._write(fts_ddl.drop_fts)
    assert set(ids(db.search_messages("docker"))) == {corpus["q"], corpus["a"], corpus["tg"]}


@pytest.mark.sqlite_only("damages an FTS5 shadow table (PostgreSQL's GIN index cannot be "
                         "damaged this way, and its conditions work without the index)")
def test_damaged_index_falls_back_and_logs(db, corpus, caplog):
    write_behind(db, "DELETE FROM messages_fts_data WHERE id > 10")
    with caplog.at_level(logging.WARNING, logger="hermes_store.repository.search"):
        hits = db.search_messages("docker")
    assert set(ids(hits)) == {corpus["q"], corpus["a"], corpus["tg"]}
    assert "bounded LIKE scan" in caplog.text


def test_read_only_store_searches(db, corpus):
    db.close()
    with reopen(db, read_only=True) as ro:
        assert set(ids(ro.search_messages("docker"))) == {corpus["q"], corpus["a"], corpus["tg"]}


# --------------------------------------------------------------------------- class helpers


def test_sanitizer_and_cjk_helpers_are_exposed_on_the_class():
    assert SessionDB._sanitize_fts5_query("chat-send") == '"chat-send"'
    assert SessionDB.sanitize_fts5_query("hello AND") == "hello"
    assert SessionDB._contains_cjk("漢") and SessionDB._contains_cjk("한국어")
    assert not SessionDB._contains_cjk("") and not SessionDB._contains_cjk("émigré")
    assert SessionDB._count_cjk("Agent通信协议") == 4
    assert SessionDB._count_cjk("ひらがなカタカナ") == 8
