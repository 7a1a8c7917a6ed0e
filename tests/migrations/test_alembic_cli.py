"""The real `alembic` command line, run from the repository root (alembic.ini there)."""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import sqlalchemy as sa

from support.migrations import file_digest, fts_integrity_errors, fts_tables, connect_ro, run_alembic

from hermes_store import migrate
from hermes_store.revisions import upstream_version


def test_upgrade_head_on_an_empty_file_then_current_reports_head(tmp_path):
    db = tmp_path / "state.db"
    db.touch()  # an existing, empty file is a fresh database

    up = run_alembic("upgrade", "head", db=db, home=tmp_path)
    assert up.returncode == 0, up.stderr

    cur = run_alembic("current", db=db, home=tmp_path)
    assert cur.returncode == 0, cur.stderr
    assert cur.stdout.split()[:2] == [migrate.head(), "(head)"], cur.stdout
    with connect_ro(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(upstream_version(migrate.head()),)]
        assert set(fts_tables(conn)) >= {"messages_fts", "messages_fts_trigram"}
    assert fts_integrity_errors(db) == []


def test_head_is_schema_version_30():
    # 0030a and 0030b are the store's own steps after upstream's v30 (docs/migrations.md)
    assert migrate.head() == "0030b" and upstream_version(migrate.head()) == 30


def test_without_x_db_the_file_is_hermes_home_state_db(tmp_path):
    home = tmp_path / "home"
    result = run_alembic("upgrade", "0003", db=None, home=home)
    assert result.returncode == 0, result.stderr
    with connect_ro(home / "state.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0003",)


def test_x_db_accepts_a_sqlalchemy_url(tmp_path):
    db = tmp_path / "url.db"
    result = run_alembic("upgrade", "0002", db=f"sqlite:///{db}", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert migrate.current(db) == "0002"


def test_current_on_an_upstream_file_does_not_adopt_it(tmp_path):
    from conftest import copy_fixture

    db = copy_fixture("upstream-0.16.0-v14", tmp_path)
    before = file_digest(db)
    result = run_alembic("current", db=db, home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert file_digest(db) == before
    assert migrate.current(db) == "0014"  # what adoption will stamp


def test_cli_refuses_a_newer_file_with_a_clear_message_and_leaves_it_alone(tmp_path):
    db = tmp_path / "newer.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (31)")
    before = file_digest(db)
    result = run_alembic("upgrade", "head", db=db, home=tmp_path)
    assert result.returncode != 0
    assert "newer" in result.stderr and "not changed" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert file_digest(db) == before


def test_a_database_the_cli_creates_is_private_to_its_owner(tmp_path):
    db = tmp_path / "new" / "state.db"
    result = run_alembic("upgrade", "0001", db=db, home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert db.stat().st_mode & 0o777 == 0o600


# --------------------------------------------------------------------------- alembic check


def _alembic_check(db, home):
    result = run_alembic("check", db=db, home=home)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_alembic_check_compares_a_file_and_reports_drift(tmp_path):
    db = tmp_path / "state.db"
    migrate.upgrade(db)
    clean = _alembic_check(db, tmp_path)
    assert clean.returncode == 0 and "No new upgrade operations detected" in clean.stdout
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX idx_messages_session")
    drifted = _alembic_check(db, tmp_path)
    assert drifted.returncode != 0
    assert "New upgrade operations detected" in drifted.stderr
    assert "idx_messages_session" in drifted.stderr
    assert migrate.current(db) == migrate.head()  # compared, never migrated


def test_alembic_check_compares_a_server_database_and_reports_drift(pg_url, pg_server, tmp_path):
    clean = _alembic_check(pg_url, tmp_path)
    assert clean.returncode == 0 and "No new upgrade operations detected" in clean.stdout
    with pg_server.connect(sa.engine.make_url(pg_url).database) as conn:
        conn.execute("DROP INDEX idx_messages_session")
    drifted = _alembic_check(pg_url, tmp_path)
    assert drifted.returncode != 0
    assert "New upgrade operations detected" in drifted.stderr
    assert "idx_messages_session" in drifted.stderr


def test_alembic_check_of_an_empty_database_creates_nothing(pg_empty_url, tmp_path):
    result = _alembic_check(pg_empty_url, tmp_path)
    assert result.returncode != 0 and "not up to date" in result.stderr
    assert migrate.current(pg_empty_url) is None
