"""Data migrations of revisions 0016-0030: seed rows at the revision before, upgrade,
check the data, downgrade, check the data came back.

Every test works on a real file through ``hermes_store.migrate`` (the packaged Alembic
scripts, the same env.py as the CLI); rows are seeded with plain sqlite3, the way an
older Hermes would have written them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
from pathlib import Path

import pytest

from hermes_store import migrate

TAG_RECORD_KEY = "hermes_store.v16_delegate_tags"


def _file_at(tmp_path: Path, revision: str) -> Path:
    path = tmp_path / "state.db"
    migrate.upgrade(path, revision)
    return path


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _columns(path: Path, table: str) -> list[str]:
    with _connect(path) as conn:
        return [r["name"] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _primary_key(path: Path, table: str) -> list[str]:
    with _connect(path) as conn:
        rows = [r for r in conn.execute(f'PRAGMA table_info("{table}")') if r["pk"]]
    return [r["name"] for r in sorted(rows, key=lambda r: r["pk"])]


def _has_table(path: Path, table: str) -> bool:
    with _connect(path) as conn:
        return conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone() is not None


def _meta(path: Path, key: str):
    with _connect(path) as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return row["value"] if row else None


def _add_session(conn, sid, *, source="cli", parent=None, model_config=None, title=None,
                 started_at=100.0, ended_at=None, end_reason=None, message_count=0, **extra):
    cols = {"id": sid, "source": source, "parent_session_id": parent, "model_config": model_config,
            "title": title, "started_at": started_at, "ended_at": ended_at,
            "end_reason": end_reason, "message_count": message_count, **extra}
    names = ", ".join(cols)
    marks = ", ".join("?" for _ in cols)
    conn.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(cols.values()))


def _add_message(conn, sid, role, content, ts=1.0):
    conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                 (sid, role, content, ts))


def _model_configs(path: Path) -> dict[str, str | None]:
    with _connect(path) as conn:
        return {r["id"]: r["model_config"] for r in conn.execute("SELECT id, model_config FROM sessions")}


# --------------------------------------------------------------------------- 0016


def _seed_delegate_candidates(path: Path) -> None:
    with _connect(path) as conn:
        # parents
        _add_session(conn, "root", ended_at=200.0, end_reason="user_exit", title="Root")
        _add_session(conn, "compressed", ended_at=150.0, end_reason="compression", title="C")
        _add_session(conn, "branched", ended_at=150.0, end_reason="branched", title="B")
        # children of every kind
        _add_session(conn, "delegate", parent="root", model_config='{"toolsets": ["file"]}')
        _add_session(conn, "delegate_null_cfg", parent="root")
        _add_session(conn, "already_tagged", parent="root",
                     model_config='{"_delegate_from": "somewhere-else"}')
        _add_session(conn, "compression_child", parent="compressed", started_at=151.0)
        _add_session(conn, "branch_marker", parent="root", model_config='{"_branched_from": "root"}')
        _add_session(conn, "branch_heuristic", parent="branched", started_at=160.0)
        _add_session(conn, "reset_marker", parent="root", model_config='{"_reset_from": "root"}')
        _add_session(conn, "malformed_cfg", parent="root", model_config="{not json")
        _add_session(conn, "array_cfg", parent="root", model_config="[1, 2]")
        # roots
        _add_session(conn, "orphan", message_count=3)
        _add_message(conn, "orphan", "user", "do it")
        _add_message(conn, "orphan", "tool", "done")
        _add_session(conn, "titled_root", title="Mine", message_count=2)
        _add_message(conn, "titled_root", "tool", "x")
        _add_session(conn, "chatty_root", message_count=26)
        _add_message(conn, "chatty_root", "tool", "x")
        _add_session(conn, "no_tool_root", message_count=1)
        _add_message(conn, "no_tool_root", "user", "hi")
        _add_session(conn, "root_with_child", message_count=1)
        _add_message(conn, "root_with_child", "tool", "x")
        _add_session(conn, "child_of_root_with_child", parent="root_with_child",
                     model_config='{"_branched_from": "root_with_child"}')


def test_0016_tags_delegate_children_and_orphaned_roots_and_gives_them_back(tmp_path):
    path = _file_at(tmp_path, "0015")
    _seed_delegate_candidates(path)
    before = _model_configs(path)

    migrate.upgrade(path, "0016")
    after = _model_configs(path)
    tagged = {sid: json.loads(cfg)["_delegate_from"] for sid, cfg in after.items()
              if before[sid] != cfg}
    assert tagged == {
        "delegate": "root",
        "delegate_null_cfg": "root",
        "orphan": "__orphaned__",
    }
    assert json.loads(after["delegate"]) == {"toolsets": ["file"], "_delegate_from": "root"}
    record = json.loads(_meta(path, TAG_RECORD_KEY))
    assert set(record) == set(tagged)

    migrate.downgrade(path, "0015")
    assert _model_configs(path) == before  # byte for byte, NULL stays NULL
    assert _meta(path, TAG_RECORD_KEY) is None


def test_0016_downgrade_removes_only_its_own_marker_from_rows_changed_since(tmp_path):
    path = _file_at(tmp_path, "0015")
    with _connect(path) as conn:
        _add_session(conn, "root")
        _add_session(conn, "delegate", parent="root", model_config='{"a": 1}')
        _add_session(conn, "retagged", parent="root", model_config='{"a": 1}')
    migrate.upgrade(path, "0016")
    with _connect(path) as conn:
        # newer code wrote another key; someone else re-pointed the other marker
        conn.execute("UPDATE sessions SET model_config = json_set(model_config, '$.b', 2) WHERE id = 'delegate'")
        conn.execute("""UPDATE sessions SET model_config = json_set(model_config, '$._delegate_from', 'x')
                        WHERE id = 'retagged'""")

    migrate.downgrade(path, "0015")
    configs = _model_configs(path)
    assert json.loads(configs["delegate"]) == {"a": 1, "b": 2}
    assert json.loads(configs["retagged"]) == {"a": 1, "_delegate_from": "x"}


def test_0016_reset_continuations_sharing_the_routing_key_stay_untagged(tmp_path):
    """A real file stamped 15 may already carry v17's session_key (D4): the reset rule
    that compares keys must then apply."""
    path = _file_at(tmp_path, "0015")
    with _connect(path) as conn:
        conn.execute("ALTER TABLE sessions ADD COLUMN session_key TEXT")
        _add_session(conn, "gw", ended_at=200.0, end_reason="idle", session_key="tg:1")
        _add_session(conn, "gw_next", parent="gw", session_key="tg:1")
        _add_session(conn, "gw_subagent", parent="gw", session_key="tg:1:sub")
    migrate.upgrade(path, "0016")
    configs = _model_configs(path)
    assert configs["gw_next"] is None
    assert json.loads(configs["gw_subagent"]) == {"_delegate_from": "gw"}


def test_0016_twice_tags_nothing_new_and_writes_no_record_on_a_clean_file(tmp_path):
    path = _file_at(tmp_path, "0015")
    with _connect(path) as conn:
        _add_session(conn, "root")
        _add_session(conn, "tagged_by_upstream", parent="root",
                     model_config='{"_delegate_from": "root"}')
    migrate.upgrade(path, "0016")
    assert _meta(path, TAG_RECORD_KEY) is None
    assert _model_configs(path)["tagged_by_upstream"] == '{"_delegate_from": "root"}'
    migrate.downgrade(path, "0015")
    assert _model_configs(path)["tagged_by_upstream"] == '{"_delegate_from": "root"}'


# --------------------------------------------------------------------------- 0018


def _write_sessions_json(path: Path, payload) -> Path:
    target = path.parent / "sessions" / "sessions.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(payload if isinstance(payload, str) else json.dumps(payload), encoding="utf-8")
    return target


def _gateway_rows(path: Path) -> dict[str, dict]:
    cols = [c for c in ("session_key", "chat_id", "chat_type", "thread_id", "display_name",
                        "origin_json", "expiry_finalized") if c in _columns(path, "sessions")]
    with _connect(path) as conn:
        return {r["id"]: {c: r[c] for c in cols}
                for r in conn.execute(f"SELECT id, {', '.join(cols)} FROM sessions")}


def test_0018_backfills_only_null_columns_from_sessions_json(tmp_path, caplog):
    path = _file_at(tmp_path, "0017")
    with _connect(path) as conn:
        _add_session(conn, "g1", source="telegram")
        _add_session(conn, "g2", source="telegram", session_key="keep-me", chat_id="77")
        _add_session(conn, "g3", source="discord")
    origin = {"platform": "telegram", "chat_id": "1", "thread_id": "t9", "user_name": "Ålice"}
    _write_sessions_json(path, {
        "_version": 3,
        "agent:main:telegram:dm:1": {"session_id": "g1", "origin": origin, "chat_type": "dm",
                                     "display_name": "Ålice", "expiry_finalized": True},
        "agent:main:telegram:dm:2": {"session_id": "g2", "session_key": "other",
                                     "origin": {"chat_id": "88"}, "display_name": "Bob",
                                     "memory_flushed": False},
        "broken": "not an entry",
        "no_session": {"origin": {"chat_id": "3"}},
    })
    with caplog.at_level(logging.WARNING):
        migrate.upgrade(path, "0018")
    rows = _gateway_rows(path)
    assert rows["g1"] == {
        "session_key": "agent:main:telegram:dm:1", "chat_id": "1", "chat_type": "dm",
        "thread_id": "t9", "display_name": "Ålice", "origin_json": json.dumps(origin),
        "expiry_finalized": 1,
    }
    assert rows["g2"]["session_key"] == "keep-me" and rows["g2"]["chat_id"] == "77"
    assert rows["g2"]["display_name"] == "Bob" and rows["g2"]["expiry_finalized"] == 0
    assert rows["g3"] == {"session_key": None, "chat_id": None, "chat_type": None,
                          "thread_id": None, "display_name": None, "origin_json": None,
                          "expiry_finalized": 0}
    assert "2 entries" in caplog.text and "sessions.json" in caplog.text

    migrate.downgrade(path, "0017")
    assert {"display_name", "origin_json", "expiry_finalized"}.isdisjoint(_columns(path, "sessions"))
    # v17 columns keep what the backfill found (documented rule)
    assert _gateway_rows(path)["g1"]["session_key"] == "agent:main:telegram:dm:1"


@pytest.mark.parametrize("payload", ["{not json", "[1, 2, 3]", b"\xff\xfe\x00garbage"])
def test_0018_garbled_sessions_json_is_logged_and_skipped(tmp_path, caplog, payload):
    path = _file_at(tmp_path, "0017")
    with _connect(path) as conn:
        _add_session(conn, "g1", source="telegram")
    target = path.parent / "sessions" / "sessions.json"
    target.parent.mkdir(parents=True)
    target.write_bytes(payload if isinstance(payload, bytes) else payload.encode())
    with caplog.at_level(logging.WARNING):
        assert migrate.upgrade(path, "0018") == "0018"
    assert "v18 backfill skipped" in caplog.text and str(target) in caplog.text
    assert _gateway_rows(path)["g1"]["display_name"] is None


def test_0018_without_sessions_json_adds_the_columns_quietly(tmp_path, caplog):
    path = _file_at(tmp_path, "0017")
    with caplog.at_level(logging.WARNING):
        migrate.upgrade(path, "0018")
    assert {"display_name", "origin_json", "expiry_finalized"} <= set(_columns(path, "sessions"))
    assert "v18" not in caplog.text


# --------------------------------------------------------------------------- 0020


def _usage(path: Path) -> list[dict]:
    with _connect(path) as conn:
        return [dict(r) for r in conn.execute("SELECT * FROM session_model_usage ORDER BY session_id, model")]


def test_0020_seeds_one_usage_row_per_session_with_tokens(tmp_path):
    path = _file_at(tmp_path, "0019")
    with _connect(path) as conn:
        _add_session(conn, "s1", model="m1", billing_provider="openrouter", input_tokens=10,
                     output_tokens=5, api_call_count=2, estimated_cost_usd=0.5,
                     cost_status="estimated", cost_source="pricing", started_at=100.0,
                     ended_at=200.0)
        _add_session(conn, "s_zero", model="m1", input_tokens=0, output_tokens=0)
        _add_session(conn, "s_cache_only", cache_read_tokens=7, started_at=300.0)
        sessions_before = [tuple(r) for r in conn.execute("SELECT * FROM sessions ORDER BY id")]

    migrate.upgrade(path, "0020")
    rows = _usage(path)
    assert [(r["session_id"], r["model"]) for r in rows] == [("s1", "m1"), ("s_cache_only", "unknown")]
    s1, cache_only = rows
    assert (s1["billing_provider"], s1["billing_base_url"], s1["billing_mode"]) == ("openrouter", "", "")
    assert (s1["input_tokens"], s1["output_tokens"], s1["api_call_count"]) == (10, 5, 2)
    assert (s1["estimated_cost_usd"], s1["actual_cost_usd"]) == (0.5, 0)
    assert (s1["cost_status"], s1["cost_source"]) == ("estimated", "pricing")
    assert (s1["first_seen"], s1["last_seen"]) == (100.0, 200.0)
    assert (cache_only["cache_read_tokens"], cache_only["first_seen"], cache_only["last_seen"]) == (7, 300.0, 300.0)
    assert _primary_key(path, "session_model_usage") == [
        "session_id", "model", "billing_provider", "billing_base_url", "billing_mode"]

    migrate.downgrade(path, "0019")
    assert not _has_table(path, "session_model_usage")
    with _connect(path) as conn:
        assert [tuple(r) for r in conn.execute("SELECT * FROM sessions ORDER BY id")] == sessions_before


def test_0020_keeps_usage_rows_newer_code_already_wrote(tmp_path):
    """Upstream creates declared tables on every open (D4): the seed must not double."""
    path = _file_at(tmp_path, "0019")
    with _connect(path) as conn:
        _add_session(conn, "s1", model="m1", input_tokens=10)
        conn.execute("""CREATE TABLE session_model_usage (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            model TEXT NOT NULL, billing_provider TEXT NOT NULL DEFAULT '',
            billing_base_url TEXT NOT NULL DEFAULT '', billing_mode TEXT NOT NULL DEFAULT '',
            api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
            estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
            cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
            PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode))""")
        conn.execute("INSERT INTO session_model_usage (session_id, model, input_tokens) VALUES ('s1', 'm1', 99)")
    migrate.upgrade(path, "0020")
    assert [(r["session_id"], r["input_tokens"]) for r in _usage(path)] == [("s1", 99)]


# --------------------------------------------------------------------------- 0022


def _add_usage(conn, sid, model, *, task=None, provider="", **values):
    cols = {"session_id": sid, "model": model, "billing_provider": provider, **values}
    if task is not None:
        cols["task"] = task
    conn.execute(f"INSERT INTO session_model_usage ({', '.join(cols)}) VALUES "
                 f"({', '.join('?' for _ in cols)})", list(cols.values()))


def test_0022_rebuilds_the_key_with_task_and_folds_tasks_back_on_downgrade(tmp_path, caplog):
    path = _file_at(tmp_path, "0021")
    with _connect(path) as conn:
        _add_session(conn, "s1")
        _add_session(conn, "s2")
        _add_usage(conn, "s1", "m1", provider="p", input_tokens=10, api_call_count=1,
                   estimated_cost_usd=0.25, cost_status="estimated", first_seen=5.0, last_seen=6.0)
        _add_usage(conn, "s2", "m2", output_tokens=3)
    migrate.upgrade(path, "0022")
    assert _primary_key(path, "session_model_usage") == [
        "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task"]
    assert [(r["session_id"], r["task"], r["input_tokens"], r["output_tokens"]) for r in _usage(path)] == [
        ("s1", "", 10, 0), ("s2", "", 0, 3)]
    with _connect(path) as conn:
        indexes = {r["name"] for r in conn.execute("PRAGMA index_list('session_model_usage')")}
        assert {"idx_session_model_usage_session", "idx_session_model_usage_model"} <= indexes
        # v22 code accounts auxiliary calls apart
        _add_usage(conn, "s1", "m1", provider="p", task="vision", input_tokens=4, api_call_count=2,
                   estimated_cost_usd=0.5, cost_status="unknown", first_seen=1.0, last_seen=9.0)
        _add_usage(conn, "s2", "m3", task="title_generation", input_tokens=1)

    with caplog.at_level(logging.WARNING):
        migrate.downgrade(path, "0021")
    assert "2 auxiliary-task usage rows folded" in caplog.text
    assert _primary_key(path, "session_model_usage") == [
        "session_id", "model", "billing_provider", "billing_base_url", "billing_mode"]
    assert "task" not in _columns(path, "session_model_usage")
    folded = {(r["session_id"], r["model"]): r for r in _usage(path)}
    s1 = folded[("s1", "m1")]
    assert (s1["input_tokens"], s1["api_call_count"], s1["estimated_cost_usd"]) == (14, 3, 0.75)
    assert (s1["cost_status"], s1["first_seen"], s1["last_seen"]) == ("estimated", 1.0, 9.0)
    assert folded[("s2", "m3")]["input_tokens"] == 1
    assert folded[("s2", "m2")]["output_tokens"] == 3


def test_0022_keeps_task_values_of_a_plain_task_column(tmp_path):
    """Installs stamped below 22 that already got the declared ``task`` column (#73823)."""
    path = _file_at(tmp_path, "0021")
    with _connect(path) as conn:
        _add_session(conn, "s1")
        conn.execute("ALTER TABLE session_model_usage ADD COLUMN task TEXT NOT NULL DEFAULT ''")
        _add_usage(conn, "s1", "m1", task="compression", input_tokens=2)
    migrate.upgrade(path, "0022")
    assert [(r["task"], r["input_tokens"]) for r in _usage(path)] == [("compression", 2)]


def test_0022_leaves_a_table_already_keyed_by_task_alone(tmp_path):
    path = _file_at(tmp_path, "0022")
    with _connect(path) as conn:
        _add_session(conn, "s1")
        _add_usage(conn, "s1", "m1", task="vision", input_tokens=2)
    migrate.downgrade(path, "0021")  # folds...
    migrate.upgrade(path, "0022")
    assert [(r["task"], r["input_tokens"]) for r in _usage(path)] == [("", 2)]
    with _connect(path) as conn:
        _add_usage(conn, "s1", "m1", task="vision", input_tokens=5)
        conn.execute("UPDATE alembic_version SET version_num = '0021'")  # replay 0022 on a v22 table
    migrate.upgrade(path, "0022")
    assert [(r["task"], r["input_tokens"]) for r in _usage(path)] == [("", 2), ("vision", 5)]


def test_0022_does_not_copy_usage_rows_of_missing_sessions_and_says_so(tmp_path, caplog):
    path = _file_at(tmp_path, "0021")
    with _connect(path) as conn:  # plain sqlite3: foreign keys off, as in other tools
        _add_session(conn, "s1")
        _add_usage(conn, "s1", "m1", input_tokens=1)
        _add_usage(conn, "gone", "m1", input_tokens=2)
    with caplog.at_level(logging.WARNING):
        migrate.upgrade(path, "0022")
    assert [r["session_id"] for r in _usage(path)] == ["s1"]
    assert "1 session_model_usage rows belong to no existing session" in caplog.text


# --------------------------------------------------------------------------- 0025

PROMPTS = ["You are Hermes.", "Du bist Hermes — 日本語も話す 🚀", "x" * 20_000]


def test_0025_moves_prompts_into_system_prompts_and_back(tmp_path):
    path = _file_at(tmp_path, "0024")
    with _connect(path) as conn:
        conn.execute("BEGIN")
        # more sessions than one batch, three distinct prompts, some without any
        for i in range(1_203):
            prompt = None if i % 10 == 0 else PROMPTS[i % 3]
            _add_session(conn, f"s{i:05d}", system_prompt=prompt)
        conn.execute("COMMIT")
        before = {r["id"]: r["system_prompt"] for r in conn.execute("SELECT id, system_prompt FROM sessions")}

    migrate.upgrade(path, "0025")
    hashes = {hashlib.sha256(p.encode("utf-8")).hexdigest(): p for p in PROMPTS}
    with _connect(path) as conn:
        stored = {r["hash"]: r["prompt"] for r in conn.execute("SELECT hash, prompt FROM system_prompts")}
        rows = {r["id"]: (r["system_prompt"], r["system_prompt_hash"])
                for r in conn.execute("SELECT id, system_prompt, system_prompt_hash FROM sessions")}
        fks = [tuple(r)[2:5] for r in conn.execute("PRAGMA foreign_key_list(sessions)")]
        indexes = {r["name"] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert stored == hashes
    for sid, prompt in before.items():
        expected_hash = hashlib.sha256(prompt.encode("utf-8")).hexdigest() if prompt else None
        assert rows[sid] == (None, expected_hash)
    assert ("system_prompts", "system_prompt_hash", "hash") in fks
    assert {"idx_sessions_system_prompt_hash", "idx_messages_assistant_calls_by_session"} <= indexes

    migrate.downgrade(path, "0024")
    with _connect(path) as conn:
        after = {r["id"]: r["system_prompt"] for r in conn.execute("SELECT id, system_prompt FROM sessions")}
    assert after == before
    assert "system_prompt_hash" not in _columns(path, "sessions")
    assert not _has_table(path, "system_prompts")


def test_0025_downgrade_of_a_file_built_from_head_ddl(tmp_path):
    """A file written from the head Core metadata in one CREATE TABLE declares the
    prompt-hash foreign key as a table constraint, which SQLite's DROP COLUMN refuses;
    its downgrade below v25 must still work, keep every row and the other keys."""
    from hermes_store import display_order, schema
    from hermes_store.backends.sqlite.engine import create_engine
    from hermes_store.backends.sqlite.fts import ddl

    path = tmp_path / "state.db"
    engine = create_engine(path)
    with engine.begin() as conn:
        schema.metadata.create_all(conn)
        ddl.create_fts(conn, cjk=False)
        display_order.create_display_triggers(conn)
        conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (30)")
        ddl.stamp_storage_version(conn)
        conn.exec_driver_sql("INSERT INTO system_prompts VALUES ('h1', 'the prompt')")
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, system_prompt_hash) "
                             "VALUES ('s1', 'cli', 1, 'h1')")
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, parent_session_id) "
                             "VALUES ('s2', 'cli', 2, 's1')")
        conn.exec_driver_sql("INSERT INTO messages (session_id, role, content, timestamp) "
                             "VALUES ('s2', 'user', 'hello there', 3)")
        table_sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'sessions'").scalar()
    engine.dispose()
    assert "FOREIGN KEY(system_prompt_hash)" in table_sql.replace(" (", "(")

    migrate.upgrade(path)  # adopted as an upstream v30 file
    migrate.downgrade(path, "0024")
    with _connect(path) as conn:
        assert conn.execute("SELECT system_prompt FROM sessions WHERE id = 's1'").fetchone()[0] == "the prompt"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        fks = [tuple(r)[2:5] for r in conn.execute("PRAGMA foreign_key_list(sessions)")]
        assert fks == [("sessions", "parent_session_id", "id")]
        assert conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'hello'").fetchall() != []
    assert "system_prompt_hash" not in _columns(path, "sessions")


# --------------------------------------------------------------------------- 0030


def test_0030_keeps_a_non_empty_delivery_outbox_on_downgrade_and_completes_an_old_one(tmp_path):
    path = _file_at(tmp_path, "0029")
    with _connect(path) as conn:  # the 13-column table 0.19.0's gateway creates lazily
        conn.execute("""CREATE TABLE delivery_obligations (
            obligation_id TEXT PRIMARY KEY, session_key TEXT NOT NULL, platform TEXT NOT NULL,
            chat_id TEXT NOT NULL, thread_id TEXT, content TEXT NOT NULL, state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL,
            owner_pid INTEGER, owner_started_at INTEGER, last_error TEXT)""")
        conn.execute("""INSERT INTO delivery_obligations (obligation_id, session_key, platform, chat_id,
                        content, state, created_at, updated_at)
                        VALUES ('o1', 'k', 'telegram', '1', 'hello', 'pending', 1, 1)""")
    migrate.upgrade(path, "0030")
    assert len(_columns(path, "delivery_obligations")) == 19
    with _connect(path) as conn:
        row = conn.execute("SELECT content, delivery_fence FROM delivery_obligations").fetchone()
    assert tuple(row) == ("hello", 0)

    migrate.downgrade(path, "0029")
    assert _has_table(path, "delivery_obligations")
    with _connect(path) as conn:
        assert conn.execute("SELECT content FROM delivery_obligations").fetchone()[0] == "hello"

    with _connect(path) as conn:
        conn.execute("DELETE FROM delivery_obligations")
    migrate.upgrade(path, "0030")
    migrate.downgrade(path, "0029")
    assert not _has_table(path, "delivery_obligations")
