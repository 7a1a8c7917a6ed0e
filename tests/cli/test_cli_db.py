"""`hermes-store db …` and `status`: revisions, check, backup, through the CLI runner."""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
from support.cli import *  # noqa: F403
from conftest import copy_fixture

from hermes_store import migrate, revisions

HEAD = migrate.head()


def test_upgrade_adopts_an_upstream_file_then_reports_nothing_to_do(cli, tmp_path):
    db = copy_fixture("upstream-0.18.1-v19", tmp_path)
    first = cli(db, "--json", "db", "upgrade")
    assert first.exit_code == 0, first.output
    data = parse_json(first)
    assert set(data) == {"path", "created", "adopted", "from", "to", "head", "telegram_topics"}
    assert (data["from"], data["to"], data["adopted"], data["created"]) == ("0019", HEAD, True, False)
    assert data["telegram_topics"] == {"from": None, "to": None}  # nobody opted in: not created
    assert migrate.current(db) == HEAD

    again = cli(db, "db", "upgrade")
    assert again.exit_code == 0
    assert "already at" in flat(again.stdout) and "nothing to do" in flat(again.stdout)
    assert_fits(again.stdout)


def test_upgrade_creates_a_missing_store_at_a_chosen_revision(cli, tmp_path):
    db = tmp_path / "new" / "state.db"
    result = cli(db, "--json", "db", "upgrade", "0022")
    assert result.exit_code == 0, result.output
    assert parse_json(result)["created"] is True
    assert migrate.current(db) == "0022"


def test_current_history_check_on_an_old_file(cli, tmp_path):
    db = copy_fixture("upstream-0.16.0-v14", tmp_path)
    before = db.read_bytes()

    current = cli(db, "--json", "db", "current")
    data = parse_json(current)
    assert set(data) == {"path", "revision", "head", "at_head", "schema_version", "managed_by", "exists"}
    assert (data["revision"], data["at_head"], data["schema_version"]) == ("0014", False, 14)
    assert data["managed_by"] == "upstream Hermes"

    history = cli(db, "db", "history", "--json")
    revisions = parse_json(history)["revisions"]
    assert [r["revision"] for r in revisions][:2] == ["0001", "0002"]
    assert revisions[-1]["revision"] == HEAD
    assert [r["revision"] for r in revisions if r["current"]] == ["0014"]
    human = cli(db, "db", "history")
    assert "0014" in human.stdout
    assert_fits(human.stdout)

    check = cli(db, "db", "check")
    assert check.exit_code == 1, "a file below head must fail the check"
    assert "NOT at head" in flat(check.stdout)
    assert_fits(check.stdout)
    assert db.read_bytes() == before, "read-only commands changed the file"


def test_check_passes_at_head_with_json_shape(cli, empty_store):
    result = cli(empty_store, "db", "check", "--json")
    assert result.exit_code == 0, result.output
    data = parse_json(result)
    assert set(data) == {"path", "revision", "head", "at_head", "drift", "full_text",
                         "telegram_topics", "ok"}
    assert data["ok"] is True and data["drift"] == [] and data["revision"] == HEAD
    assert data["telegram_topics"]["state"] == "absent" and data["telegram_topics"]["ok"] is True
    human = cli(empty_store, "db", "check")
    assert "at head" in flat(human.stdout) and "matches hermes_store.schema" in flat(human.stdout)
    assert_fits(human.stdout)


def test_current_and_history_at_head(cli, empty_store):
    data = parse_json(cli(empty_store, "--json", "db", "current"))
    assert set(data) == {"path", "revision", "head", "at_head", "schema_version", "managed_by", "exists"}
    assert (data["revision"], data["at_head"], data["schema_version"], data["managed_by"], data["exists"]) == (
        HEAD, True, 30, "hermes_store", True)
    assert cli(empty_store, "db", "current").stdout.strip() == f"{HEAD} (head)"
    history = parse_json(cli(empty_store, "--json", "db", "history"))
    assert set(history) == {"path", "current", "head", "revisions"}
    assert [r["revision"] for r in history["revisions"] if r["current"]] == [HEAD]


def test_upgrade_of_a_store_at_head_does_nothing(cli, empty_store):
    data = parse_json(cli(empty_store, "--json", "db", "upgrade"))
    assert (data["from"], data["to"], data["created"], data["adopted"]) == (HEAD, HEAD, False, False)
    assert data["telegram_topics"] == {"from": None, "to": None}
    human = cli(empty_store, "db", "upgrade")
    assert human.exit_code == 0 and "nothing to do" in flat(human.stdout)


@pytest.mark.sqlite_only("revisions below 0030 exist for files only (PostgreSQL: test_cli_postgres)")
def test_downgrade_asks_and_a_no_changes_nothing(cli, empty_store):
    refused = cli(empty_store, "db", "downgrade", "0029", input="n\n")
    assert refused.exit_code == 7
    assert migrate.current(empty_store) == HEAD

    done = cli(empty_store, "--json", "db", "downgrade", "0029", "--yes")
    assert done.exit_code == 0, done.output
    assert parse_json(done)["to"] == "0029"
    assert migrate.current(empty_store) == "0029"


def test_db_current_of_a_missing_file_is_not_found_as_status_says(cli, tmp_path):
    missing = tmp_path / "nothing-here.db"
    for args in (["db", "current"], ["--json", "db", "current"], ["status"]):
        result = cli(missing, *args)
        assert result.exit_code == 3, (args, result.output)
    assert parse_json(cli(missing, "--json", "db", "current"))["exists"] is False
    assert not missing.exists()  # read-only: nothing was created


def test_status_of_the_default_store_and_of_a_missing_one(cli, hermes_home, head_templates):
    missing = cli(None, "--json", "status")
    assert missing.exit_code == 3
    assert parse_json(missing)["exists"] is False

    copy_db(head_templates["rich"], hermes_home / "state.db")
    result = cli(None, "status", "--json")
    assert result.exit_code == 0
    data = parse_json(result)
    assert set(data) == {
        "path", "backend", "exists", "size_bytes", "wal_bytes", "revision", "head", "at_head",
        "schema_version", "journal_mode", "sqlite_library", "filesystem", "sessions", "messages",
        "fts_stale",
    }
    assert data["path"] == str(hermes_home / "state.db") and data["backend"] == "sqlite"
    assert (data["revision"], data["schema_version"], data["sessions"], data["messages"]) == (HEAD, 30, 6, 41)
    human = cli(None, "status")
    assert f"{revisions.head()} (head)" in flat(human.stdout)
    assert_fits(human.stdout)


def test_status_json_shape_on_each_engine(cli, store, backend):
    data = parse_json(cli(store, "--json", "status"))
    assert set(data) == {
        "path", "backend", "exists", "size_bytes", "wal_bytes", "revision", "head", "at_head",
        "schema_version", "journal_mode", "sqlite_library", "filesystem", "sessions", "messages",
        "fts_stale",
    }
    assert (data["backend"], data["exists"], data["revision"], data["at_head"]) == (backend, True, HEAD, True)
    assert (data["schema_version"], data["sessions"], data["messages"]) == (30, 6, 41)
    assert data["size_bytes"] > 0
    if backend == "sqlite":
        assert data["path"] == str(store) and data["journal_mode"] == "wal"
        assert isinstance(data["wal_bytes"], int)
    else:  # a server keeps its own journal: nothing to report
        assert data["path"].startswith("postgresql+psycopg://postgres@/")
        assert (data["journal_mode"], data["wal_bytes"]) == (None, None)
        assert (data["sqlite_library"], data["filesystem"]) == (None, None)
    human = cli(store, "status")
    assert f"{revisions.head()} (head)" in flat(human.stdout)
    assert_fits(human.stdout)


@pytest.mark.sqlite_only("db backup copies a SQLite file (PostgreSQL: its refusal, test_cli_postgres)")
def test_backup_is_consistent_while_a_writer_holds_an_open_transaction(cli, store, tmp_path):
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO sessions (id, source, started_at) VALUES ('uncommitted', 'cli', 1)")
    try:
        dest = tmp_path / "backup.db"
        result = cli(store, "--json", "db", "backup", dest)
        assert result.exit_code == 0, result.output
    finally:
        writer.execute("COMMIT")
        writer.close()
    data = parse_json(result)
    assert set(data) == {"source", "dest", "bytes", "pages", "integrity", "sessions", "messages", "seconds"}
    assert (data["integrity"], data["sessions"], data["messages"]) == ("ok", 6, 41)
    copy = sqlite3.connect(dest)
    ids = {r[0] for r in copy.execute("SELECT id FROM sessions")}
    assert "uncommitted" not in ids and len(ids) == 6
    assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    copy.close()
    assert oct(dest.stat().st_mode & 0o777) == "0o600"

    refused = cli(store, "db", "backup", dest)
    assert refused.exit_code == 8
    assert "already exists" in flat(refused.stderr)
    assert cli(store, "db", "backup", dest, "--force").exit_code == 0
