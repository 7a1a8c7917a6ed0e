"""PostgreSQL under the agent (issue 16, item 5): with ``HERMES_STATE_DATABASE_URL`` set,
every store the agent opens for its own home is that database — also where it passes
the default file explicitly (the API server, the ACP adapter) — and what the agent does
with ``db.db_path`` fits a server database."""

from __future__ import annotations

import asyncio
import os

import pytest

from hermes_store.agent import hermes_state as ours


@pytest.fixture
def on_server(pg_url, hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_STATE_DATABASE_URL", pg_url)
    return pg_url


def test_every_spelling_of_the_default_path_opens_the_server(on_server, hermes_home):
    first = ours.SessionDB()
    first.create_session("s1", "cli", model="m")
    first.append_message("s1", "user", "hello")
    # the API server: SessionDB(db_path=home / "state.db"); ACP: get_hermes_home() / "state.db"
    spellings = [hermes_home / "state.db", str(hermes_home / "state.db"),
                 hermes_home / "sub" / ".." / "state.db", ours._env_home() / "state.db"]
    for given in spellings:
        db = ours.SessionDB(db_path=given)
        try:
            assert db.target.is_postgresql, given
            assert [m["content"] for m in db.get_messages("s1")] == ["hello"]
        finally:
            db.close()
    with ours.SessionDB(db_path=ours.DEFAULT_DB_PATH) as db:
        assert db.target.is_postgresql and db.get_session("s1") is not None
    assert not (hermes_home / "state.db").exists()  # no file was created beside it
    first.close()


def test_another_profiles_file_stays_a_file(on_server, tmp_path):
    other = tmp_path / "profiles" / "work" / "state.db"
    with ours.SessionDB(db_path=other) as db:
        assert db.target.is_sqlite and db.db_path == other
        db.create_session("w1", "cli")
    with ours.SessionDB() as server:
        assert server.get_session("w1") is None


def test_async_gateway_store_is_the_server(on_server):
    async def run():
        adb = ours.AsyncSessionDB(ours.SessionDB())
        await adb.create_session("g1", "telegram")
        found = await adb.get_session("g1")
        adb._db.close()
        return found["source"], adb._db.target.is_postgresql

    assert asyncio.run(run()) == ("telegram", True)


def test_db_path_on_the_server_is_no_file(on_server):
    db = ours.SessionDB()
    try:
        path = db.db_path
        assert path.exists() is False and path.is_file() is False
        assert "postgresql" in str(path) and "@" in str(path)
        with pytest.raises(FileNotFoundError, match="PostgreSQL database, not a file"):
            os.path.getsize(path)
        # the agent's `sessions stats` and `sessions optimize`, as they read db_path:
        size = os.path.getsize(path) / 1e6 if path.exists() else 0.0
        assert size == 0.0
        assert db.vacuum() >= 0
    finally:
        db.close()


def test_password_is_masked_in_db_path(pg_server, pg_url, monkeypatch, hermes_home):
    url = pg_url.replace("postgres@", "postgres:s3cret@")
    monkeypatch.setenv("HERMES_STATE_DATABASE_URL", url)
    try:
        db = ours.SessionDB()
    except Exception as exc:  # a server without password auth accepts it too
        pytest.fail(f"opening with a password in the URL failed: {exc}")
    try:
        assert "s3cret" not in str(db.db_path) and "s3cret" not in repr(db.db_path)
    finally:
        db.close()


def test_default_db_path_exists_for_the_server(on_server, monkeypatch, hermes_home):
    assert ours.DEFAULT_DB_PATH.exists() is True  # it stands for the server database
    assert (hermes_home / "state.db").exists() is False  # a plain Path is the plain file
    monkeypatch.delenv("HERMES_STATE_DATABASE_URL")
    assert ours.DEFAULT_DB_PATH.exists() is ours.DEFAULT_DB_PATH.is_file()


def test_health_helpers_answer_for_the_server(on_server, hermes_home):
    ours.SessionDB().close()
    default = hermes_home / "state.db"
    assert ours._db_opens_cleanly(default) is None
    assert ours.repair_state_db_schema(default) == {
        "repaired": True, "strategy": "already_healthy", "backup_path": None, "error": None}
    assert not default.exists()


def test_without_the_variable_the_default_is_the_file(hermes_home, monkeypatch):
    monkeypatch.delenv("HERMES_STATE_DATABASE_URL", raising=False)
    with ours.SessionDB(db_path=hermes_home / "state.db") as db:
        assert db.target.is_sqlite and db.db_path == hermes_home / "state.db"
        assert db.db_path.exists()
