"""The Telegram DM topic tables as their own Alembic branch (migrations/telegram_topics/,
version table alembic_version_telegram_topics): opt-in only, the main chain untouched,
upstream files that opted in adopted without loss, and a drift check that reports the
branch instead of ignoring it.

``upstream-0.19.0-v22-telegram-topics.db`` was written by upstream 0.19.0 itself
(tests/support/telegram_topics_fixture.py): the v22 fixture after enable/bind/disable.
A version-1 file is derived from it here the only way one can be (0.19.0 no longer
writes version 1): its bindings table rebuilt without ON DELETE CASCADE, key "1".
"""

from __future__ import annotations

import json
import logging
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
from pathlib import Path

import pytest
from conftest import copy_fixture
from support.migrations import connect_ro, file_digest, ordinary_tables, run_alembic, schema

from hermes_store import SessionDB, migrate, revisions
from hermes_store.errors import SchemaOutOfDateError, SchemaTooNewError

FIXTURE = "upstream-0.19.0-v22-telegram-topics"
TOPIC_TABLES = ("telegram_dm_topic_mode", "telegram_dm_topic_bindings")
VERSION_TABLE = "alembic_version_telegram_topics"
META = "telegram_dm_topic_schema_version"
BRANCH = ("-n", "telegram_topics")


def _names(path: Path) -> set[str]:
    with connect_ro(path) as conn:
        return {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}


def _topic_rows(path: Path) -> dict[str, list]:
    with connect_ro(path) as conn:
        # sorted: a rebuild may hand out new rowids; the rows themselves must not change
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TOPIC_TABLES}


def _meta(path: Path) -> str | None:
    with connect_ro(path) as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (META,)).fetchone()
    return row[0] if row else None


def _cascades(path: Path) -> bool:
    with connect_ro(path) as conn:
        keys = conn.execute("PRAGMA foreign_key_list('telegram_dm_topic_bindings')").fetchall()
    return [(k[2], k[6]) for k in keys] == [("sessions", "CASCADE")]


def _make_version_1(path: Path) -> None:
    """Rebuild the bindings table to upstream's version-1 shape (no ON DELETE), key "1"."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript("""
            BEGIN;
            CREATE TABLE v1 (chat_id TEXT NOT NULL, thread_id TEXT NOT NULL, user_id TEXT NOT NULL,
                session_key TEXT NOT NULL, session_id TEXT NOT NULL REFERENCES sessions(id),
                managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL NOT NULL,
                updated_at REAL NOT NULL, PRIMARY KEY (chat_id, thread_id));
            INSERT INTO v1 SELECT * FROM telegram_dm_topic_bindings;
            DROP TABLE telegram_dm_topic_bindings;
            ALTER TABLE v1 RENAME TO telegram_dm_topic_bindings;
            CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session ON telegram_dm_topic_bindings(session_id);
            CREATE INDEX idx_telegram_dm_topic_bindings_user ON telegram_dm_topic_bindings(user_id, chat_id);
            UPDATE state_meta SET value = '1' WHERE key = 'telegram_dm_topic_schema_version';
            COMMIT;
        """)
    finally:
        conn.close()


def _main_rows(path: Path) -> dict[str, list]:
    """Every row of the main chain's tables (the branch's own tables left out)."""
    with connect_ro(path) as conn:
        return {
            t: conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall()
            for t in ordinary_tables(conn)
            if t not in (*TOPIC_TABLES, VERSION_TABLE)
        }


@pytest.fixture
def head_file(tmp_path) -> Path:
    path = tmp_path / "state.db"
    migrate.upgrade(path)
    return path


# --------------------------------------------------------------------------- the main chain

def test_the_main_chain_keeps_one_head_and_never_creates_the_topic_tables(tmp_path):
    heads = run_alembic("heads", db=None, home=tmp_path)
    assert heads.returncode == 0, heads.stderr
    assert heads.stdout.split() == [migrate.head(), "(head)"]
    assert revisions.upstream_version(migrate.head()) == 30  # the topic tables are no version

    by_cli = tmp_path / "cli.db"
    assert run_alembic("upgrade", "head", db=by_cli, home=tmp_path).returncode == 0
    by_python = tmp_path / "python.db"
    migrate.upgrade(by_python)
    by_store = tmp_path / "store.db"
    SessionDB(by_store).close()
    for path in (by_cli, by_python, by_store):
        assert not _names(path) & {*TOPIC_TABLES, VERSION_TABLE}, path
        assert _meta(path) is None
        check = migrate.check(path)
        assert check.ok and check.telegram_topics.state == "absent"


def test_the_branch_has_its_own_linear_history():
    assert migrate.telegram_topics_head() == "t002"
    assert [rev for rev, _ in migrate.telegram_topics_history()] == ["t001", "t002"]
    assert migrate.TELEGRAM_TOPICS_DIR.parent == migrate.MIGRATIONS_DIR


# --------------------------------------------------------------------------- alembic CLI

def test_alembic_commands_on_the_branch(tmp_path, head_file):
    home = tmp_path
    main_before = _main_rows(head_file)

    up = run_alembic(*BRANCH, "upgrade", "head", db=head_file, home=home)
    assert up.returncode == 0, up.stderr
    assert set(TOPIC_TABLES) <= _names(head_file) and _cascades(head_file)
    assert _meta(head_file) == "2"

    current = run_alembic(*BRANCH, "current", db=head_file, home=home)
    assert current.returncode == 0, current.stderr
    assert current.stdout.split()[:2] == ["t002", "(head)"]
    history = run_alembic(*BRANCH, "history", db=head_file, home=home)
    assert "t001 -> t002 (head)" in history.stdout and "<base> -> t001" in history.stdout

    down = run_alembic(*BRANCH, "downgrade", "t001", db=head_file, home=home)
    assert down.returncode == 0, down.stderr
    assert not _cascades(head_file) and _meta(head_file) == "1"
    assert migrate.telegram_topics_current(head_file) == "t001"

    base = run_alembic(*BRANCH, "downgrade", "base", db=head_file, home=home)
    assert base.returncode == 0, base.stderr
    assert not _names(head_file) & set(TOPIC_TABLES) and _meta(head_file) is None
    assert migrate.telegram_topics_current(head_file) is None

    # The main chain never moved.
    assert migrate.current(head_file) == migrate.head()
    with connect_ro(head_file) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(30,)]
    assert _main_rows(head_file) == main_before


def test_the_branch_refuses_a_file_whose_main_chain_is_not_at_head(tmp_path):
    path = copy_fixture("upstream-0.19.0-v22", tmp_path)
    before = file_digest(path)
    result = run_alembic(*BRANCH, "upgrade", "head", db=path, home=tmp_path)
    assert result.returncode != 0
    assert "hermes-store db upgrade" in result.stderr and "Traceback" not in result.stderr
    assert file_digest(path) == before
    with pytest.raises(SchemaOutOfDateError, match="main schema at head"):
        migrate.upgrade_telegram_topics(path)
    assert file_digest(path) == before


def test_stairway_keeps_every_binding_across_t002_down_and_up(head_file):
    migrate.upgrade_telegram_topics(head_file)
    with SessionDB(head_file) as db:
        for sid in ("a", "b"):
            db.create_session(sid, "telegram", user_id="7")
        db.enable_telegram_topic_mode(chat_id="1", user_id="7")
        db.bind_telegram_topic(chat_id="1", thread_id="1", user_id="7", session_key="k", session_id="a")
        db.bind_telegram_topic(chat_id="1", thread_id="2", user_id="7", session_key="k", session_id="b")
    rows = _topic_rows(head_file)
    assert migrate.downgrade_telegram_topics(head_file, "t001") == "t001"
    assert _topic_rows(head_file) == rows and not _cascades(head_file)
    assert migrate.upgrade_telegram_topics(head_file) == "t002"
    assert _topic_rows(head_file) == rows and _cascades(head_file)
    assert migrate.check(head_file).ok


# --------------------------------------------------------------------------- adoption

def test_an_upstream_file_that_opted_in_is_adopted_on_open_without_loss(tmp_path):
    path = copy_fixture(FIXTURE, tmp_path)
    rows = _topic_rows(path)
    assert len(rows["telegram_dm_topic_bindings"]) == 3 and len(rows["telegram_dm_topic_mode"]) == 2
    state = migrate.inspect_telegram_topics(path)
    assert (state.kind, state.revision, state.meta_version) == ("upstream", "t002", "2")

    with SessionDB(path) as db:
        assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is True
        assert db.is_telegram_topic_mode_enabled(chat_id="200", user_id="8") is False
        assert db.get_telegram_topic_binding(chat_id="100", thread_id="12")["managed_mode"] == "manual"
        assert [s["id"] for s in db.list_unlinked_telegram_sessions_for_user(chat_id="100", user_id="7")] == ["tg_lobby"]

    assert migrate.current(path) == migrate.head()
    assert migrate.inspect_telegram_topics(path).kind == "alembic"
    assert migrate.telegram_topics_current(path) == "t002"
    assert _topic_rows(path) == rows
    assert _meta(path) == "2"  # upstream Hermes still reads its own version
    assert migrate.check(path).ok


def test_plain_alembic_upgrade_leaves_the_branch_for_its_own_command(tmp_path):
    path = copy_fixture(FIXTURE, tmp_path)
    rows = _topic_rows(path)
    assert run_alembic("upgrade", "head", db=path, home=tmp_path).returncode == 0
    topics = migrate.check(path).telegram_topics
    assert (topics.state, topics.revision, topics.ok) == ("upstream", "t002", True)
    assert VERSION_TABLE not in _names(path)
    result = run_alembic(*BRANCH, "upgrade", "head", db=path, home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert migrate.inspect_telegram_topics(path).kind == "alembic"
    assert _topic_rows(path) == rows


def test_a_version_1_file_is_rebuilt_with_cascade_and_keeps_every_row(tmp_path):
    path = copy_fixture(FIXTURE, tmp_path)
    _make_version_1(path)
    rows = _topic_rows(path)
    assert not _cascades(path)
    assert migrate.telegram_topics_current(path) == "t001"

    with SessionDB(path) as db:
        assert db.get_telegram_topic_binding_by_session(session_id="tg_topic_a")["thread_id"] == "11"
        # with version 1's plain key this delete would fail on the foreign key
        assert db.delete_session("tg_topic_a") is True
        assert db.get_telegram_topic_binding(chat_id="100", thread_id="11") is None

    assert _cascades(path) and _meta(path) == "2"
    assert migrate.telegram_topics_current(path) == "t002"
    kept = _topic_rows(path)
    assert kept["telegram_dm_topic_mode"] == rows["telegram_dm_topic_mode"]
    assert kept["telegram_dm_topic_bindings"] == [r for r in rows["telegram_dm_topic_bindings"] if r[4] != "tg_topic_a"]
    assert migrate.check(path).ok


def test_the_rebuild_drops_only_bindings_whose_session_is_gone_and_says_so(head_file, caplog):
    migrate.upgrade_telegram_topics(head_file, "t001")
    with SessionDB(head_file) as db:
        db.create_session("alive", "telegram")
    conn = sqlite3.connect(head_file, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # how an orphan could ever get there
        for thread, sid in (("1", "alive"), ("2", "gone")):
            conn.execute("INSERT INTO telegram_dm_topic_bindings VALUES ('c', ?, 'u', 'k', ?, 'auto', 1.0, 1.0)",
                         (thread, sid))
    finally:
        conn.close()
    with caplog.at_level(logging.WARNING):
        assert migrate.upgrade_telegram_topics(head_file) == "t002"
    assert [r[4] for r in _topic_rows(head_file)["telegram_dm_topic_bindings"]] == ["alive"]
    assert "1 binding(s) of sessions that no longer exist" in caplog.text


def test_topic_tables_of_a_newer_hermes_are_refused_and_left_alone(tmp_path, head_file):
    migrate.upgrade_telegram_topics(head_file)
    conn = sqlite3.connect(head_file)
    conn.execute("DROP TABLE alembic_version_telegram_topics")
    conn.execute("UPDATE state_meta SET value = '3' WHERE key = ?", (META,))
    conn.commit()
    conn.close()
    before = file_digest(head_file)
    result = run_alembic(*BRANCH, "upgrade", "head", db=head_file, home=tmp_path)
    assert result.returncode != 0 and "newer" in result.stderr
    assert file_digest(head_file) == before
    with pytest.raises(SchemaTooNewError):
        migrate.check(head_file)
    with SessionDB(head_file) as db:  # the store itself still opens ...
        with pytest.raises(SchemaTooNewError):  # ... but will not touch those tables
            db.apply_telegram_topic_migration()
    assert VERSION_TABLE not in _names(head_file) and _meta(head_file) == "3"


# --------------------------------------------------------------------------- the drift check

def test_check_reports_the_branch_behind_and_its_drift(tmp_path):
    path = copy_fixture(FIXTURE, tmp_path)
    _make_version_1(path)
    migrate.upgrade(path)  # the main chain only
    result = migrate.check(path)
    topics = result.telegram_topics
    assert result.at_head and result.drift == []
    assert (topics.state, topics.revision, topics.at_head) == ("upstream", "t001", False)
    assert "add_fk telegram_dm_topic_bindings(session_id) -> sessions(id) ON DELETE CASCADE" in topics.drift
    assert not topics.ok and not result.ok


def test_check_reports_hand_made_drift_and_a_wrong_meta_key(head_file):
    migrate.upgrade_telegram_topics(head_file)
    conn = sqlite3.connect(head_file)
    conn.execute("DROP INDEX idx_telegram_dm_topic_bindings_user")
    conn.execute("UPDATE state_meta SET value = '1' WHERE key = ?", (META,))
    conn.execute("CREATE TABLE telegram_dm_topic_bindings_new (x)")  # an interrupted rebuild
    conn.commit()
    conn.close()
    result = migrate.check(head_file)
    assert result.drift == ["remove_table telegram_dm_topic_bindings_new"]
    assert result.telegram_topics.drift == [
        "add_index idx_telegram_dm_topic_bindings_user on telegram_dm_topic_bindings(user_id, chat_id)",
        "state_meta telegram_dm_topic_schema_version is '1', expected '2' (upstream Hermes reads it)",
    ]
    assert not result.ok


def test_db_check_and_db_upgrade_cli_show_the_branch(tmp_path, head_file):
    from typer.testing import CliRunner

    from hermes_store.cli import app

    def run(path, *args):
        return CliRunner().invoke(app, ["--db", str(path), *args], env={"COLUMNS": "200"})

    absent = run(head_file, "db", "check", "--json")
    assert absent.exit_code == 0, absent.output
    assert json.loads(absent.stdout)["telegram_topics"]["state"] == "absent"

    v1 = copy_fixture(FIXTURE, tmp_path)
    _make_version_1(v1)
    migrate.upgrade(v1)
    behind = run(v1, "db", "check", "--json")
    assert behind.exit_code == 1
    report = json.loads(behind.stdout)["telegram_topics"]
    assert (report["state"], report["revision"], report["head"], report["ok"]) == ("upstream", "t001", "t002", False)
    human = run(v1, "db", "check")
    assert "telegram topic tables: t001, behind t002" in human.stdout and human.exit_code == 1

    upgraded = run(v1, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert "Telegram topic tables: t001 -> t002 (head)" in upgraded.stdout
    again = run(v1, "db", "check")
    assert again.exit_code == 0 and "telegram topic tables: t002 (head)" in again.stdout


# --------------------------------------------------------------------------- fidelity

def test_the_tables_we_create_equal_the_tables_upstream_created(tmp_path, head_file):
    migrate.upgrade_telegram_topics(head_file)
    ours, theirs = schema(head_file), schema(copy_fixture(FIXTURE, tmp_path))

    def topic_part(dump):
        return {
            "tables": {k: v for k, v in dump["tables"].items() if k in TOPIC_TABLES},
            "indexes": {k: v for k, v in dump["indexes"].items() if v["table"] in TOPIC_TABLES},
        }

    assert topic_part(ours) == topic_part(theirs)
    assert len(topic_part(ours)["indexes"]) == 4


def test_branch_revisions_are_frozen_and_numbered_by_topic_schema_version():
    import ast

    files = sorted((migrate.TELEGRAM_TOPICS_DIR / "versions").glob("t[0-9][0-9][0-9]_*.py"))
    assert [f.name[:4] for f in files] == ["t001", "t002"]
    forbidden = ("hermes_store.schema", "hermes_store.telegram_schema", "hermes_store.repository",
                 "hermes_store.store", "hermes_store.fts")
    for n, path in enumerate(files, start=1):
        tree = ast.parse(path.read_text())
        assert f"Telegram DM topic schema version {n}" in (ast.get_docstring(tree) or ""), path.name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(forbidden), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(forbidden) for a in node.names), path.name


def test_recover_carries_the_topic_tables_with_their_indexes_and_stamp(tmp_path):
    from hermes_store.backends.sqlite.files.recovery import recover

    path = copy_fixture(FIXTURE, tmp_path)
    SessionDB(path).close()  # adopted: main chain and branch stamped
    rows = _topic_rows(path)
    report = recover(path, tmp_path / "recovered.db")
    assert report.complete and report.verified
    out = tmp_path / "recovered.db"
    assert _topic_rows(out) == rows
    assert migrate.telegram_topics_current(out) == "t002" and _meta(out) == "2"
    check = migrate.check(out)
    assert check.telegram_topics.drift == [] and check.ok  # the UNIQUE index came along
    with SessionDB(out) as db:
        from hermes_store.errors import InvalidArgumentError

        with pytest.raises(InvalidArgumentError):  # the one-topic-per-session rule holds
            db.bind_telegram_topic(chat_id="100", thread_id="99", user_id="7", session_key="k",
                                   session_id="tg_topic_a")


def test_adoption_heals_what_the_upstream_tables_lack(tmp_path):
    path = copy_fixture(FIXTURE, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX idx_telegram_dm_topic_bindings_user")
    conn.commit()
    conn.close()
    rows = _topic_rows(path)
    SessionDB(path).close()
    assert "idx_telegram_dm_topic_bindings_user" in _names(path)
    assert _topic_rows(path) == rows
    assert migrate.check(path).ok
