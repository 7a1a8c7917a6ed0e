"""What upstream does on every open, and the steps it re-runs above the version it reads,
done by adoption too (issue 32; ``adopt.py``, revisions 0004/0012 ``heal_rows``).

Upstream's own tests stage files this way (``tests/agent/test_upstream_suite.py`` runs
them); these are the same differences on the package's own API.
"""

from __future__ import annotations

import json
import shutil

import pytest

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

from conftest import copy_fixture
from support.migrations import alembic_revision, connect_ro, run_alembic, schema_diff, schema_version

from hermes_store import SessionDB, migrate
from hermes_store.revisions import upstream_version


def test_rows_written_with_active_null_are_visible_after_adoption(tmp_path):
    """Upstream #51646: builds that added ``messages.active`` without its default wrote
    NULL, which every ``active = 1`` reader hides; upstream heals it on every open, so
    a file at v12 or later is healed by adoption (its upgrade never runs 0012 again)."""
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version VALUES (12);
            CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL,
                                   started_at REAL NOT NULL);
            CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
                                   session_id TEXT NOT NULL, role TEXT NOT NULL,
                                   content TEXT, timestamp REAL NOT NULL);
            ALTER TABLE messages ADD COLUMN active INTEGER;
            INSERT INTO sessions VALUES ('s1', 'discord', 1.0);
            INSERT INTO messages (session_id, role, content, timestamp)
                VALUES ('s1', 'user', 'written by a pre-fix build', 1.0);
        """)
    with SessionDB(db) as store:
        assert [m["content"] for m in store.get_messages("s1")] == ["written by a pre-fix build"]


def test_an_upstream_file_without_the_title_index_keeps_every_session(tmp_path):
    """A file upstream left without ``idx_sessions_title_unique`` and with duplicate
    titles is adopted as upstream opens it (older duplicates lose the title, the newest
    keeps it), instead of being refused."""
    db = copy_fixture("upstream-0.19.0-v22", tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX idx_sessions_title_unique")
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY rowid")]
        conn.execute("UPDATE sessions SET title = 'shared' WHERE id IN (?, ?)", ids[:2])
    sqlite3.connect(db).close()

    with SessionDB(db) as store:
        assert store.get_session_title(ids[0]) is None
        assert store.get_session_title(ids[1]) == "shared"
    with connect_ro(db) as conn:
        assert [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY rowid")] == ids
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' "
                            "AND name = 'idx_sessions_title_unique'").fetchone()


def _lowered(tmp_path, version: int):
    """A store at head whose ``schema_version`` another writer set back to ``version``."""
    db = tmp_path / "state.db"
    with SessionDB(db) as store:
        store.create_session("parent", "cli")
        store.create_session("delegate", "cli", parent_session_id="parent")
        store.create_session("gw", "telegram", model="m1")
        store.update_token_counts("gw", input_tokens=12, output_tokens=3, model="m1")
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "sessions.json").write_text(json.dumps(
        {"agent:main:telegram:dm:7": {"session_id": "gw", "display_name": "Ann",
                                      "origin": {"chat_id": "7"}}}))
    head_copy = tmp_path / "head.db"
    shutil.copyfile(db, head_copy)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM session_model_usage")
        conn.execute("UPDATE schema_version SET version = ?", (version,))
    sqlite3.connect(db).close()
    return db, head_copy


def test_a_store_whose_schema_version_was_set_back_replays_the_steps_above_it(tmp_path):
    """Upstream re-runs its data steps above the version its table holds; so does an
    open: the stamp goes back there and the revisions above replay (delegates tagged,
    usage seeded, sessions.json read), leaving the schema exactly head's."""
    db, head_copy = _lowered(tmp_path, 15)
    assert migrate.current(db) == "0015"

    with SessionDB(db) as store:
        config = json.loads(store.get_session("delegate")["model_config"])
        assert config["_delegate_from"] == "parent"
        assert store.get_session("gw")["display_name"] == "Ann"
    with sqlite3.connect(db) as conn:
        usage = conn.execute("SELECT model, input_tokens FROM session_model_usage").fetchall()
    assert usage == [("m1", 12)]
    assert schema_version(db) == [upstream_version(migrate.head())]
    assert alembic_revision(db) == migrate.current(db) == migrate.head()
    assert schema_diff(head_copy, db) == []


def test_alembic_upgrade_puts_back_an_index_another_tool_dropped(tmp_path):
    """A store at head whose unique title index a plain sqlite3 connection dropped (and
    then wrote duplicate titles): ``alembic upgrade head`` heals it as upstream's open
    does, the older duplicate losing its title, every session kept."""
    db = tmp_path / "state.db"
    with SessionDB(db) as store:
        for sid in ("older", "newer"):
            store.create_session(sid, "cli")
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX idx_sessions_title_unique")
        conn.execute("UPDATE sessions SET title = 'shared'")
    sqlite3.connect(db).close()

    run = run_alembic("upgrade", "head", db=db, home=tmp_path)
    assert run.returncode == 0, run.stderr
    with connect_ro(db) as conn:
        assert conn.execute("SELECT id, title FROM sessions ORDER BY rowid").fetchall() == [
            ("older", None), ("newer", "shared")]
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' "
                            "AND name = 'idx_sessions_title_unique'").fetchone()


def _drop_title_index_and_share_a_title(db) -> None:
    with SessionDB(db) as store:
        for sid in ("older", "newer"):
            store.create_session(sid, "cli")
            store.append_message(sid, "user", f"kept in {sid}")
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX idx_sessions_title_unique")
        conn.execute("UPDATE sessions SET title = 'shared'")
    sqlite3.connect(db).close()


def test_an_open_puts_back_an_index_another_tool_dropped(tmp_path):
    """The same file opened by ``SessionDB`` (upstream's
    ``test_duplicate_titles_are_repaired_without_deleting_sessions``): the open finds an
    index of head missing, heals the titles and puts the index back — whatever
    ``auto_upgrade`` says, as no schema version changes — and loses no session or
    message; titles stay unique afterwards."""
    db = tmp_path / "state.db"
    _drop_title_index_and_share_a_title(db)

    with SessionDB(db, auto_upgrade=False) as store:
        assert [s["id"] for s in store.list_sessions_rich(limit=10)] == ["newer", "older"]
        assert store.get_session("older")["title"] is None
        assert store.get_session("newer")["title"] == "shared"
        assert [m["content"] for m in store.get_messages("older")] == ["kept in older"]
        with pytest.raises(ValueError, match="already in use"):
            store.set_session_title("older", "shared")
    with connect_ro(db) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' "
                            "AND name = 'idx_sessions_title_unique'").fetchone()
    assert alembic_revision(db) == migrate.head()


def test_a_read_only_open_of_such_a_file_reads_it_and_changes_nothing(tmp_path):
    """Read-only, the store cannot heal the file: it reads it as it is (both sessions,
    both titles) and leaves it untouched for the next writable open."""
    db = tmp_path / "state.db"
    _drop_title_index_and_share_a_title(db)
    before = db.read_bytes()

    with SessionDB(db, read_only=True) as store:
        assert sorted(s["id"] for s in store.list_sessions_rich(limit=10)) == ["newer", "older"]
        assert store.get_session("older")["title"] == "shared"
    assert db.read_bytes() == before
