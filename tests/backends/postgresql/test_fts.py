"""PostgreSQL full-text layout (fts/postgres.py): layout 3's scope, the maintained
column and flag, index use, and the upkeep counterparts."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from hermes_store import schema
from hermes_store.backends.postgresql import engine as postgres
from hermes_store.backends.sqlite.fts import ddl
from hermes_store.backends.postgresql.fts import ddl as fp
from hermes_store.backends.postgresql.fts import maintenance as fm
from hermes_store.location import resolve

M, S = schema.messages, schema.sessions
LIMIT = ddl.TOOL_CONTENT_PREFIX_CHARS


@pytest.fixture
def engine(pg_url):
    engine = postgres.create_engine(resolve(pg_url), poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


def add_session(conn, session_id, *, source="cli", model_config=None):
    if isinstance(model_config, dict):
        model_config = json.dumps(model_config)
    conn.execute(S.insert().values(id=session_id, source=source, model_config=model_config,
                                   started_at=1.0))


def add_message(conn, session_id, content, *, role="user", **values) -> int:
    values.setdefault("timestamp", 1.0)
    return conn.execute(M.insert().values(session_id=session_id, role=role, content=content,
                                          **values)).inserted_primary_key[0]


def words(conn, query: str) -> set[int]:
    """Rows of the word index matching a tsquery (the layer search will build)."""
    return set(conn.exec_driver_sql(
        f"SELECT id FROM messages WHERE {fp.DOCUMENT_COLUMN} @@ to_tsquery('simple', %(q)s)",
        {"q": query}).scalars())


def substring(conn, needle: str) -> set[int]:
    return set(conn.exec_driver_sql(
        f"SELECT id FROM messages WHERE {fp.TRIGRAM_SCOPE_COLUMN} "
        f"AND {fp.TRIGRAM_DOCUMENT_FUNCTION}(content, tool_name) ILIKE %(p)s",
        {"p": f"%{needle}%"}).scalars())


def in_trigram_scope(conn) -> set[int]:
    return set(conn.exec_driver_sql(
        f"SELECT id FROM messages WHERE {fp.TRIGRAM_SCOPE_COLUMN}").scalars())


# --------------------------------------------------------------------------- word index


def test_the_word_index_tokenizes_like_unicode61(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        chain = add_message(conn, "s", "see my-app.config.ts and snake_case_name, P2.2")
        mixed = add_message(conn, "s", "Deploy the SERVER now")
        tool = add_message(conn, "s", None, role="assistant",
                           tool_calls='[{"function": {"name": "grep_files"}}]')
        named = add_message(conn, "s", "output", role="tool", tool_name="shell_exec")
        cjk = add_message(conn, "s", "今天天气很好")
        assert words(conn, "config") == {chain}          # a host/file token to PG's parser
        assert words(conn, "snake & case & name") == {chain}
        assert words(conn, "p2 <-> 2") == {chain}
        assert words(conn, "deploy & server") == {mixed}  # case-folded, no stemming
        assert words(conn, "deploys") == set()
        assert words(conn, "grep") == {tool}             # tool_calls
        assert words(conn, "shell") == {named}           # tool_name
        assert words(conn, "今天天气很好") == {cjk}        # a CJK run is one token, as in FTS5
        assert words(conn, "depl:*") == {mixed}


def test_tool_rows_are_cut_in_the_word_index_and_absent_from_trigram(engine):
    head_word, tail_word = "needleatstart", "needlepastlimit"
    body = head_word + " " + "y" * (LIMIT - len(head_word) - 1)
    assert len(body) == LIMIT
    with engine.begin() as conn:
        add_session(conn, "s")
        tool = add_message(conn, "s", body + " " + tail_word, role="tool", tool_name="shell")
        long_user = add_message(conn, "s", body + " " + tail_word)
        assert words(conn, head_word) == {tool, long_user}
        assert words(conn, tail_word) == {long_user}
        assert substring(conn, head_word) == {long_user}
        assert in_trigram_scope(conn) == {long_user}


def test_a_document_too_big_for_a_tsvector_is_indexed_by_its_longest_prefix(engine):
    # ~2 MB of distinct words: a tsvector holds 1 MiB; the write must not fail
    text = " ".join(f"w{i:07d}x" for i in range(220_000))
    with engine.begin() as conn:
        add_session(conn, "s")
        big = add_message(conn, "s", text)
        assert conn.execute(sa.select(M.c.content).where(M.c.id == big)).scalar() == text
        assert words(conn, "w0000001x") == {big}
        assert words(conn, "w0219999x") == set()


def test_compacted_and_rewound_rows_stay_in_both_indexes(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        mid = add_message(conn, "s", "archived words here")
        conn.execute(M.update().where(M.c.id == mid).values(active=0, compacted=1))
        assert words(conn, "archived") == {mid} and substring(conn, "chived wo") == {mid}
        conn.execute(M.update().where(M.c.id == mid).values(active=0, compacted=0))
        assert words(conn, "archived") == {mid} and substring(conn, "chived wo") == {mid}


# --------------------------------------------------------------------------- trigram scope


@pytest.mark.parametrize(
    "source, model_config, in_scope",
    [
        ("cli", None, True),
        ("telegram", {"model": "x"}, True),
        ("cli", {"_branched_from": "p"}, True),
        ("cli", "not json {", True),                    # malformed JSON must not fail the write
        ("cli", '"_delegate_from"', True),              # JSON, but not an object
        ("cli", {"_delegate_from": None}, True),        # JSON null is "absent", as json_extract
        ("cron", None, False),
        ("subagent", None, False),
        ("cli", {"_delegate_from": "parent"}, False),
    ],
)
def test_the_trigram_scope_follows_the_session_rule(engine, source, model_config, in_scope):
    with engine.begin() as conn:
        add_session(conn, "s", source=source, model_config=model_config)
        mid = add_message(conn, "s", "searchable words here")
        add_message(conn, "s", "tool output words", role="tool")
        assert (in_trigram_scope(conn) == {mid}) is in_scope
        assert (substring(conn, "chable wor") == {mid}) is in_scope
        assert mid in words(conn, "searchable")
        assert fm.integrity_check(conn) == []


def test_the_scope_follows_later_changes_of_role_and_session(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        add_session(conn, "c", source="cron")
        mid = add_message(conn, "s", "words", role="tool")
        assert in_trigram_scope(conn) == set()
        conn.execute(M.update().where(M.c.id == mid).values(role="user"))
        assert in_trigram_scope(conn) == {mid}
        conn.execute(S.update().where(S.c.id == "s").values(source="cron"))
        assert in_trigram_scope(conn) == set()
        conn.execute(S.update().where(S.c.id == "s").values(
            source="cli", model_config=json.dumps({"_delegate_from": "p"})))
        assert in_trigram_scope(conn) == set()
        conn.execute(S.update().where(S.c.id == "s").values(model_config=None))
        assert in_trigram_scope(conn) == {mid}
        conn.execute(M.update().where(M.c.id == mid).values(session_id="c"))
        assert in_trigram_scope(conn) == set()
        assert fm.integrity_check(conn) == []


def test_json_text_reads_a_top_level_key_or_null(engine):
    cases = [('{"_delegate_from": "p"}', "p"), ('{"_delegate_from": 3}', "3"),
             ('{"a": {"_delegate_from": "p"}}', None), ("not json {_delegate_from", None),
             ('["_delegate_from"]', None), (None, None), ('{"x": 1}', None)]
    with engine.connect() as conn:
        for doc, expected in cases:
            got = conn.exec_driver_sql(
                f"SELECT {fp.JSON_TEXT_FUNCTION}(%(d)s, '_delegate_from')", {"d": doc}).scalar()
            assert got == expected, doc


# --------------------------------------------------------------------------- index use


def _plan(conn, sql: str, params: dict) -> str:
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    return "\n".join(conn.exec_driver_sql("EXPLAIN " + sql, params).scalars())


def test_queries_in_the_documented_shape_use_the_indexes(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        add_message(conn, "s", "some words")
        word_plan = _plan(conn, f"SELECT id FROM messages WHERE {fp.DOCUMENT_COLUMN} "
                                "@@ to_tsquery('simple', %(q)s)", {"q": "words"})
        trigram_plan = _plan(conn, f"SELECT id FROM messages WHERE {fp.TRIGRAM_SCOPE_COLUMN} AND "
                                   f"{fp.TRIGRAM_DOCUMENT_FUNCTION}(content, tool_name) "
                                   "ILIKE %(p)s", {"p": "%ome wo%"})
    assert f"Bitmap Index Scan on {fp.WORD_INDEX}" in word_plan
    assert f"Bitmap Index Scan on {fp.TRIGRAM_INDEX}" in trigram_plan


# --------------------------------------------------------------------------- upkeep


def test_integrity_check_finds_and_rebuild_repairs(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        good = add_message(conn, "s", "fine")
        assert fm.integrity_check(conn) == []
        # a row written while the scope trigger was away
        conn.exec_driver_sql(f"ALTER TABLE messages DISABLE TRIGGER {fp.MESSAGE_SCOPE_TRIGGER}")
        stray = add_message(conn, "s", "missed")
        conn.exec_driver_sql(f"ALTER TABLE messages ENABLE TRIGGER {fp.MESSAGE_SCOPE_TRIGGER}")
        conn.exec_driver_sql(f"DROP INDEX {fp.TRIGRAM_INDEX}")
        problems = fm.integrity_check(conn)
        assert any("1 message(s) with a wrong trigram scope" in p for p in problems)
        assert any(p.startswith(f"{fp.TRIGRAM_INDEX}: missing") for p in problems)
        seen = []
        assert fm.rebuild(conn, progress=lambda *a: seen.append(a)) == list(fp.FTS_INDEXES)
        assert seen == [(fp.WORD_INDEX, 1, 2), (fp.TRIGRAM_INDEX, 2, 2)]
        assert fm.integrity_check(conn) == []
        assert in_trigram_scope(conn) == {good, stray}


def test_optimize_and_sizes(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        for i in range(50):
            add_message(conn, "s", f"message number {i} with some words")
        assert fm.optimize(conn) is True
        sizes = fm.fts_sizes(conn)
    assert set(sizes) == set(fp.FTS_INDEXES) and all(v > 0 for v in sizes.values())


def test_create_fts_is_idempotent_and_fills_existing_rows(engine):
    with engine.begin() as conn:
        add_session(conn, "s")
        add_session(conn, "c", source="cron")
        kept = add_message(conn, "s", "kept words")
        add_message(conn, "c", "cron words")
        fp.create_fts(conn)  # again, on the head: nothing changes
        assert words(conn, "words") == {kept, kept + 1} and in_trigram_scope(conn) == {kept}
        fp.drop_fts(conn)
        assert fm.integrity_check(conn) != []
        fp.create_fts(conn)  # over existing rows: column computed, flags set from sessions
        assert words(conn, "words") == {kept, kept + 1} and in_trigram_scope(conn) == {kept}
        assert fm.integrity_check(conn) == []


def test_is_fts_object_names_what_schema_comparison_must_skip():
    for name in (*fp.FTS_INDEXES, *fp.FTS_COLUMNS, *fp.FTS_FUNCTIONS, *fp.FTS_TRIGGERS):
        assert fp.is_fts_object(name)
    for ordinary in ("messages", "sessions", "idx_messages_session", "content"):
        assert not fp.is_fts_object(ordinary)


def test_the_repositorys_json_text_reads_markers_alike_on_postgresql(engine):
    from hermes_store.sql.constructs import json_text

    with engine.begin() as conn:
        add_session(conn, "d", model_config={"_delegate_from": "p"})
        add_session(conn, "b", model_config={"_branched_from": "p"})
        add_session(conn, "x", model_config="not json {")
        add_session(conn, "n")
        delegates = conn.execute(sa.select(S.c.id).where(
            json_text(S.c.model_config, "_delegate_from").is_not(None))).scalars().all()
        parents = conn.execute(sa.select(json_text(S.c.model_config, "_branched_from"))
                               .where(S.c.id == "b")).scalar()
    assert delegates == ["d"] and parents == "p"
