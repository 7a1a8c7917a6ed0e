"""Head FTS layout: the DDL equals the reference, and the indexes stay right under writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

# head_engine is a fixture: importing it makes it available to this module's tests
from support.head import add_message, add_session, build_head, head_engine, indexed_ids, match
from hermes_store.backends.sqlite.engine import create_engine
from hermes_store.connections import writer
from hermes_store.backends.sqlite.fts import ddl
from hermes_store.backends.sqlite.fts import maintenance as fts5_maintenance
from hermes_store.fts import maintenance
from support import schema_dump

HEAD_REFERENCE = Path(__file__).parents[2] / "data" / "head-v30-reference.schema.json"
CJK_OBJECTS = [
    "triggers.messages_fts_cjk_delete",
    "triggers.messages_fts_cjk_insert",
    "triggers.messages_fts_cjk_update",
    "views.messages_fts_cjk_src",
    "virtual_tables.messages_fts_cjk",
]
LIMIT = ddl.TOOL_CONTENT_PREFIX_CHARS


def _prepared(dump):
    return schema_dump._prepare(dump, column_order=True, schema_only=False, ignore_meta=[])


# --------------------------------------------------------------------------- DDL


def test_head_file_equals_reference_except_the_optional_cjk_objects(tmp_path):
    path = tmp_path / "state.db"
    build_head(path).dispose()

    lines = schema_dump.diff(_prepared(schema_dump.load(str(HEAD_REFERENCE))),
                             _prepared(schema_dump.load(str(path))))

    # Only objects present in the reference and absent here, each reported whole.
    assert all(line.startswith("- ") for line in lines), lines
    assert sorted(line[2:].split(" = ")[0] for line in lines) == CJK_OBJECTS


def test_cjk_ddl_matches_reference_text():
    reference = schema_dump.load(str(HEAD_REFERENCE))
    view, table, triggers = ddl.cjk_ddl()
    assert schema_dump.normalize_sql(view) == reference["views"][ddl.CJK_SRC_VIEW]["sql"]
    assert schema_dump.normalize_sql(table) == reference["virtual_tables"][ddl.CJK_TABLE]["sql"]
    assert set(triggers) == set(ddl.CJK_TRIGGERS)
    for name, sql in triggers.items():
        assert schema_dump.normalize_sql(sql) == reference["triggers"][name]["sql"]


def test_create_fts_is_idempotent(head_engine):
    with head_engine.begin() as conn:
        before = conn.exec_driver_sql("SELECT type, name, sql FROM sqlite_master ORDER BY name").all()
        assert ddl.create_fts(conn) == []
        after = conn.exec_driver_sql("SELECT type, name, sql FROM sqlite_master ORDER BY name").all()
    assert before == after


def test_is_fts_object_names_what_autogenerate_must_skip(head_engine):
    with head_engine.connect() as conn:
        names = set(conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars())
    fts_names = {n for n in names if ddl.is_fts_object(n)}
    assert {"messages_fts", "messages_fts_data", "messages_fts_idx", "messages_fts_config",
            "messages_fts_docsize", "messages_fts_trigram", "messages_fts_trigram_data",
            "messages_fts_src", "messages_fts_trigram_src", "messages_fts_insert"} <= fts_names
    assert ddl.is_fts_object("messages_fts_cjk_content")
    for ordinary in ("messages", "sessions", "state_meta", "messages_fts_backup",
                     "idx_messages_session", "messages_display_order_insert"):
        assert not ddl.is_fts_object(ordinary)


# --------------------------------------------------------------------------- behaviour


def test_writes_of_every_kind_keep_both_indexes_consistent(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        user = add_message(conn, "s", "hello world")
        tool = add_message(conn, "s", "x" * (LIMIT + 50) + " tail", role="tool", tool_name="grep")
        assistant = add_message(conn, "s", None, role="assistant", tool_calls='[{"name":"grep"}]')
        spare = add_message(conn, "s", "to be deleted")

        conn.exec_driver_sql("UPDATE messages SET content = 'hello again' WHERE id = ?", (user,))
        conn.exec_driver_sql("UPDATE messages SET role = 'user' WHERE id = ?", (tool,))
        conn.exec_driver_sql("UPDATE messages SET role = 'tool' WHERE id = ?", (user,))
        conn.exec_driver_sql("UPDATE messages SET tool_calls = NULL WHERE id = ?", (assistant,))
        conn.exec_driver_sql("UPDATE messages SET active = 0 WHERE id = ?", (assistant,))
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (spare,))

        assert maintenance.integrity_check(conn) == []
        assert indexed_ids(conn, ddl.FTS_TABLE) == {user, tool, assistant}
        # the former tool row is now a user row: indexed in full, in both indexes
        assert indexed_ids(conn, ddl.TRIGRAM_TABLE) == {tool, assistant}
        assert match(conn, ddl.FTS_TABLE, "tail") == {tool}


def test_tool_rows_are_cut_in_messages_fts_and_absent_from_trigram(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        head_word, tail_word = "needleatstart", "needlepastlimit"
        body = head_word + " " + "y" * (LIMIT - len(head_word) - 1)
        assert len(body) == LIMIT
        tool = add_message(conn, "s", body + " " + tail_word, role="tool", tool_name="shell")
        long_user = add_message(conn, "s", body + " " + tail_word)

        assert match(conn, ddl.FTS_TABLE, head_word) == {tool, long_user}
        assert match(conn, ddl.FTS_TABLE, tail_word) == {long_user}
        assert match(conn, ddl.FTS_TABLE, "tool_name:shell") == {tool}
        assert match(conn, ddl.TRIGRAM_TABLE, '"needlestart"') == set()
        assert match(conn, ddl.TRIGRAM_TABLE, head_word) == {long_user}
        assert indexed_ids(conn, ddl.TRIGRAM_TABLE) == {long_user}
        assert maintenance.integrity_check(conn) == []


@pytest.mark.parametrize(
    "source, model_config, in_trigram",
    [
        ("cli", None, True),
        ("telegram", {"model": "x"}, True),
        ("cli", {"_branched_from": "p"}, True),  # a branch continuation stays searchable
        ("cli", "not json {", True),              # malformed JSON must not fail the write
        ("cron", None, False),
        ("subagent", None, False),
        ("cli", {"_delegate_from": "parent"}, False),
    ],
)
def test_trigram_index_follows_the_session_rule(head_engine, source, model_config, in_trigram):
    with head_engine.begin() as conn:
        add_session(conn, "s", source=source, model_config=model_config)
        mid = add_message(conn, "s", "searchable words here")
        assert (indexed_ids(conn, ddl.TRIGRAM_TABLE) == {mid}) is in_trigram
        assert indexed_ids(conn, ddl.FTS_TABLE) == {mid}  # the word index takes everything
        conn.exec_driver_sql("UPDATE messages SET content = 'changed words' WHERE id = ?", (mid,))
        assert maintenance.integrity_check(conn) == []
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (mid,))
        assert indexed_ids(conn, ddl.TRIGRAM_TABLE) == set()
        assert maintenance.integrity_check(conn) == []


def test_cjk_text_is_found_through_the_trigram_index(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        cjk = add_message(conn, "s", "今天天气很好，我们去公园散步吧")
        add_message(conn, "s", "an english sentence")
        assert match(conn, ddl.TRIGRAM_TABLE, "天气很好") == {cjk}
        assert match(conn, ddl.TRIGRAM_TABLE, "公园散") == {cjk}


def _set_gate(conn, high_water, progress):
    for key, value in ((ddl.REBUILD_HIGH_WATER_KEY, high_water),
                       (ddl.REBUILD_PROGRESS_KEY, progress)):
        conn.exec_driver_sql("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                             (key, str(value)))


def test_rebuild_gate_keeps_triggers_off_rows_not_yet_backfilled(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        ids = [add_message(conn, "s", f"word{i} common") for i in range(4)]
        # A backfill in progress: ids 3..4 were dropped from the index and not re-added.
        first, second, third, fourth = ids
        high_water, progress = fourth, second
        for table in (ddl.FTS_TABLE, ddl.TRIGRAM_TABLE):
            for mid in (third, fourth):
                row = conn.exec_driver_sql(
                    "SELECT content, tool_name, tool_calls FROM messages WHERE id = ?", (mid,)
                ).one()
                columns = "rowid, content, tool_name" + (", tool_calls" if table == ddl.FTS_TABLE else "")
                values = (mid, *row) if table == ddl.FTS_TABLE else (mid, *row[:2])
                marks = ", ".join("?" for _ in values)
                conn.exec_driver_sql(
                    f"INSERT INTO {table}({table}, {columns}) VALUES ('delete', {marks})", values
                )
        _set_gate(conn, high_water, progress)

        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (third,))        # in (P, H]
        conn.exec_driver_sql("UPDATE messages SET content = 'word3 edited' WHERE id = ?", (fourth,))
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (first,))        # <= P
        fifth = add_message(conn, "s", "word5 common")                              # > H

        for table in (ddl.FTS_TABLE, ddl.TRIGRAM_TABLE):
            assert indexed_ids(conn, table) == {second, fifth}
        problems = maintenance.integrity_check(conn)
        assert len(problems) == 1 and problems[0].startswith("rebuild pending")

        assert maintenance.rebuild(conn) == [ddl.FTS_TABLE, ddl.TRIGRAM_TABLE]
        keys = set(conn.exec_driver_sql("SELECT key FROM state_meta").scalars())
        assert keys == {ddl.FTS_STORAGE_VERSION_KEY}
        assert maintenance.integrity_check(conn) == []
        for table in (ddl.FTS_TABLE, ddl.TRIGRAM_TABLE):
            assert indexed_ids(conn, table) == {second, fourth, fifth}
        assert match(conn, ddl.FTS_TABLE, "edited") == {fourth}


def test_integrity_check_reports_an_index_that_missed_a_write(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        mid = add_message(conn, "s", "original text")
        conn.exec_driver_sql("DROP TRIGGER messages_fts_update")
        conn.exec_driver_sql("UPDATE messages SET content = 'silently changed' WHERE id = ?", (mid,))
        problems = maintenance.integrity_check(conn)
        assert any("messages_fts_update" in p for p in problems)
        assert any(p.startswith("messages_fts: integrity-check failed") for p in problems)
        assert not any(p.startswith("messages_fts_trigram:") for p in problems)
        # the transaction is still usable after the failed check
        assert maintenance.rebuild(conn)
        ddl.create_fts(conn)
        assert maintenance.integrity_check(conn) == []


def test_optimize_merges_in_bounded_steps_and_keeps_the_index_right(head_engine):
    for batch in range(40):  # one transaction per batch: one FTS5 segment each
        with head_engine.begin() as conn:
            if batch == 0:
                add_session(conn, "s")
            for i in range(5):
                add_message(conn, "s", f"batch{batch} item{i} shared vocabulary")
    with head_engine.connect() as conn:
        segments_before = conn.exec_driver_sql("SELECT count(*) FROM messages_fts_data").scalar()

    calls = 0
    finished = False
    while not finished:
        calls += 1
        assert calls < 100, "optimize never reported completion"
        with head_engine.begin() as conn:
            finished = fts5_maintenance.optimize(conn, pages=8, steps=2)

    with head_engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM messages_fts_data").scalar() < segments_before
        assert maintenance.integrity_check(conn) == []
        assert len(match(conn, ddl.FTS_TABLE, "vocabulary")) == 200
        assert len(match(conn, ddl.TRIGRAM_TABLE, "batch17")) == 5
        with pytest.raises(ValueError):
            fts5_maintenance.optimize(conn, steps=0)


def test_fts_sizes_with_and_without_dbstat(head_engine, monkeypatch):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        for i in range(20):
            add_message(conn, "s", f"some words to index number {i}")
        measured = maintenance.fts_sizes(conn)
        has_dbstat = fts5_maintenance._dbstat_bytes(conn, [f"{ddl.FTS_TABLE}_data"]) is not None
        monkeypatch.setattr(fts5_maintenance, "_DBSTAT", "no_such_dbstat_table")
        estimated = maintenance.fts_sizes(conn)
    assert set(measured) == set(estimated) == {ddl.FTS_TABLE, ddl.TRIGRAM_TABLE}
    if not has_dbstat:  # pysqlite3's wheel has no dbstat: both are the estimate
        assert measured == estimated
        pytest.skip("this SQLite library has no dbstat; the default library (the standard one) measures it")
    page_size = 4096
    for table in measured:
        assert measured[table] >= page_size  # at least one page per shadow table
        assert 0 < estimated[table] <= measured[table]


# --------------------------------------------------------------------------- create / drop


def _fts_objects(conn):
    return {n for n in conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars()
            if ddl.is_fts_object(n)}


def test_drop_then_create_fills_the_index_from_existing_messages(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        kept = add_message(conn, "s", "survives the drop")
        ddl.drop_fts(conn)
        assert _fts_objects(conn) == set()
        later = add_message(conn, "s", "written without an index")

        assert ddl.create_fts(conn) == [ddl.FTS_TABLE, ddl.TRIGRAM_TABLE]
        assert match(conn, ddl.FTS_TABLE, "survives") == {kept}
        assert match(conn, ddl.TRIGRAM_TABLE, "without an ind") == {later}
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (kept,))
        assert maintenance.integrity_check(conn) == []


def test_create_without_fill_gates_existing_rows_until_rebuild(head_engine):
    with head_engine.begin() as conn:
        add_session(conn, "s")
        old = add_message(conn, "s", "an old message")
        ddl.drop_fts(conn)
        ddl.create_fts(conn, fill=False)
        new = add_message(conn, "s", "a new message")
        conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (old,))  # gated: no 'delete'
        assert indexed_ids(conn, ddl.FTS_TABLE) == {new}
        assert maintenance.integrity_check(conn)[0].startswith("rebuild pending")
        maintenance.rebuild(conn)
        assert maintenance.integrity_check(conn) == []


# --------------------------------------------------------------------------- optional cjk


def test_cjk_index_is_absent_where_its_tokenizer_is(head_engine):
    with head_engine.begin() as conn:
        # probed twice in one transaction: a failed probe must leave nothing behind
        assert not ddl.cjk_tokenizer_available(conn)
        assert not ddl.cjk_tokenizer_available(conn)
        assert ddl.fts5_available(conn)
        assert ddl.cjk_tokenizer_available(conn, "unicode61")
        assert not (_fts_objects(conn) & {ddl.CJK_TABLE, ddl.CJK_SRC_VIEW, *ddl.CJK_TRIGGERS})
        add_session(conn, "s")
        add_message(conn, "s", "writes work without the cjk index")
        assert maintenance.integrity_check(conn) == []


def test_cjk_index_when_a_tokenizer_is_there(tmp_path):
    # Stand-in: the stock unicode61 tokenizer under the cjk index's name and triggers.
    engine = build_head(tmp_path / "state.db", cjk=True, cjk_tokenizer="unicode61")
    with engine.begin() as conn:
        assert {ddl.CJK_TABLE, ddl.CJK_SRC_VIEW, *ddl.CJK_TRIGGERS} <= _fts_objects(conn)
        add_session(conn, "s")
        user = add_message(conn, "s", "cjk indexed row")
        tool = add_message(conn, "s", "tool output", role="tool")
        conn.exec_driver_sql("UPDATE messages SET role = 'tool' WHERE id = ?", (user,))
        conn.exec_driver_sql("UPDATE messages SET role = 'user' WHERE id = ?", (tool,))
        assert indexed_ids(conn, ddl.CJK_TABLE) == {tool}
        assert maintenance.integrity_check(conn) == []
        assert maintenance.rebuild(conn) == list(ddl.FTS_TABLES)
        assert fts5_maintenance.optimize(conn, steps=50)
        assert set(maintenance.fts_sizes(conn)) == set(ddl.FTS_TABLES)
    engine.dispose()


def _pretend_cjk_tokenizer(path):
    """Make a unicode61 stand-in cjk index claim the real, unloadable tokenizer — the
    state of a file written on a machine that had it."""
    from hermes_store.backends.sqlite.library import dbapi as _dbapi
    sqlite3 = _dbapi()

    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA writable_schema = ON")
    raw.execute("UPDATE sqlite_master SET sql = replace(sql, 'unicode61', ?) WHERE name = ?",
                (ddl.CJK_TOKENIZER, ddl.CJK_TABLE))
    raw.execute("PRAGMA writable_schema = OFF")
    raw.close()


def test_a_cjk_index_from_another_machine_is_detached_not_fatal(tmp_path):
    path = tmp_path / "state.db"
    engine = build_head(path, cjk=True, cjk_tokenizer="unicode61")
    with engine.begin() as conn:
        add_session(conn, "s")
    engine.dispose()
    _pretend_cjk_tokenizer(path)

    engine = writer(create_engine(path))
    with pytest.raises(sa.exc.OperationalError, match="no such tokenizer"):
        with engine.begin() as conn:
            add_message(conn, "s", "fails while the cjk triggers are attached")

    with engine.begin() as conn:
        assert not ddl.table_usable(conn, ddl.CJK_TABLE)
        assert ddl.create_fts(conn) == []  # probes: tokenizer absent -> detach
        mid = add_message(conn, "s", "writes work again")
        meta = dict(conn.exec_driver_sql("SELECT key, value FROM state_meta").all())
        assert meta[ddl.CJK_STALE_KEY] == "1"
        problems = maintenance.integrity_check(conn)
        assert problems == [f"{ddl.CJK_TABLE}: stale (its triggers were detached); "
                            "rebuild the full-text index (hermes_store.fts.maintenance.rebuild)"]
        assert maintenance.rebuild(conn) == [ddl.FTS_TABLE, ddl.TRIGRAM_TABLE]
        assert match(conn, ddl.FTS_TABLE, "again") == {mid}

        ddl.drop_fts(conn)  # works although FTS5 cannot load the cjk table
        assert _fts_objects(conn) == set()
        assert ddl.CJK_STALE_KEY not in dict(
            conn.exec_driver_sql("SELECT key, value FROM state_meta").all())
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    engine.dispose()
