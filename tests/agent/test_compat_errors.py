"""Errors the agent catches (issue 16, item 3), and threads that never share a
transaction through the raw connection (item 2).

Where upstream 0.19.0 raises ``sqlite3.DatabaseError``/``OperationalError``/
``IntegrityError``, the agent's ``except sqlite3.…`` still catches ours, and ours keep
the package's class and message.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from hermes_store.agent import hermes_state as ours
from hermes_store.units import RetryPolicy
from hermes_store.errors import (
    HermesStoreError,
    NotADatabaseError,
    SessionNotFoundError,
    StoreBusyError,
    StoreClosedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    TitleError,
)
from support.upstream_state import load_hermes_state

ENGINES = ("sqlite", "postgresql")


@pytest.fixture
def upstream():
    return load_hermes_state()


@pytest.fixture(autouse=True)
def _clear_init_errors():
    yield
    ours._set_last_init_error(None)


@pytest.fixture(params=ENGINES)
def target(request, tmp_path):
    return tmp_path / "state.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_a_file_that_is_not_a_database(upstream, tmp_path):
    for module in (ours, upstream):
        path = tmp_path / f"{module.__name__}.db"
        path.write_bytes(b"not sqlite " * 400)
        with pytest.raises(sqlite3.DatabaseError) as caught:
            module.SessionDB(db_path=path)
    assert isinstance(caught.value, sqlite3.DatabaseError)  # upstream's
    with pytest.raises(NotADatabaseError) as mine:
        ours.SessionDB(db_path=tmp_path / "hermes_store.agent.hermes_state.db")
    assert isinstance(mine.value, sqlite3.DatabaseError)
    assert not isinstance(mine.value, sqlite3.OperationalError)
    assert "hermes-store recover" in str(mine.value)
    assert type(mine.value).__name__ == "NotADatabaseError"


def test_read_only_open_of_a_missing_file(upstream, tmp_path):
    for module in (ours, upstream):
        with pytest.raises(sqlite3.OperationalError):
            module.SessionDB(db_path=tmp_path / "missing.db", read_only=True)
    with pytest.raises(StoreNotFoundError) as caught:
        ours.SessionDB(db_path=tmp_path / "missing.db", read_only=True)
    assert isinstance(caught.value, FileNotFoundError)
    assert not (tmp_path / "missing.db").exists()


def test_writes_to_a_read_only_store(upstream, tmp_path):
    for module in (ours, upstream):
        path = tmp_path / f"{module.__name__}.db"
        module.SessionDB(db_path=path).close()
        db = module.SessionDB(db_path=path, read_only=True)
        with pytest.raises(sqlite3.OperationalError):
            db.create_session("s1", "cli")
        with pytest.raises(sqlite3.OperationalError):
            db._conn.execute("UPDATE sessions SET title = 'x'")
        assert db._conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
        db.close()
    db = ours.SessionDB(db_path=tmp_path / "hermes_store.agent.hermes_state.db", read_only=True)
    with pytest.raises(StoreReadOnlyError, match="read-only"):
        db._execute_write(lambda conn: conn.execute("DELETE FROM sessions"))
    db.close()


def test_a_missing_parent_is_an_integrity_error_on_both(upstream, tmp_path):
    for module in (ours, upstream):
        db = module.SessionDB(db_path=tmp_path / f"{module.__name__}.db")
        with pytest.raises(sqlite3.IntegrityError):
            db.create_session("child", "cli", parent_session_id="nobody")
        db.close()
    with ours.SessionDB(db_path=tmp_path / "x.db") as db:
        with pytest.raises(SessionNotFoundError) as caught:
            db.create_session("child", "cli", parent_session_id="nobody")
        assert isinstance(caught.value, KeyError) and "nobody" in str(caught.value)


def test_title_errors_stay_value_errors_as_upstreams(upstream, tmp_path):
    for module in (ours, upstream):
        db = module.SessionDB(db_path=tmp_path / f"{module.__name__}.db")
        db.create_session("a", "cli")
        db.create_session("b", "cli")
        db.set_session_title("a", "Same")
        with pytest.raises(ValueError) as caught:
            db.set_session_title("b", "Same")
        assert not isinstance(caught.value, sqlite3.Error)
        db.close()
    assert isinstance(caught.value, ValueError)
    with ours.SessionDB(db_path=tmp_path / "ours2.db") as db:
        db.create_session("a", "cli")
        with pytest.raises(TitleError):
            db.set_session_title("a", "x" * 500)


def test_closed_store(upstream, tmp_path):
    for module in (upstream, ours):
        db = module.SessionDB(db_path=tmp_path / f"{module.__name__}.db")
        kept = db._conn
        db.close()
        assert db._conn is None  # the agent's getattr(db, "_conn", None) falls back
    with pytest.raises(sqlite3.ProgrammingError) as caught:
        kept.execute("SELECT 1")
    assert isinstance(caught.value, StoreClosedError)
    with pytest.raises(sqlite3.ProgrammingError):
        db.get_session("x")


_HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def test_a_locked_store_is_an_operational_error(tmp_path):
    path = tmp_path / "state.db"
    db = ours.SessionDB(db_path=path, retry=RetryPolicy(attempts=2, busy_timeout=0.05))
    db.create_session("s1", "cli")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path), "5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for attempt in (lambda: db.set_session_title("s1", "T"),
                        lambda: db._conn.execute("UPDATE sessions SET title = 'T'"),
                        lambda: db._execute_write(lambda c: c.execute("DELETE FROM sessions"))):
            with pytest.raises(sqlite3.OperationalError) as caught:
                attempt()
            assert isinstance(caught.value, StoreBusyError)
            assert "busy" in str(caught.value)
        # reads go on: WAL readers never wait for the writer
        assert db._conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    finally:
        holder.kill()
        holder.wait()
    db.close()


def test_a_busy_unit_is_retried_whole_and_runs_its_statements_once_committed(tmp_path):
    path = tmp_path / "state.db"
    db = ours.SessionDB(db_path=path)
    db.create_session("s1", "cli")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    runs = []
    try:
        assert holder.stdout.readline().strip() == "locked"

        def unit(conn):
            runs.append(1)
            n = conn.execute("SELECT message_count FROM sessions WHERE id = ?", ("s1",)).fetchone()[0]
            conn.execute("UPDATE sessions SET message_count = ? WHERE id = ?", (n + 1, "s1"))
            return n + 1

        assert db._execute_write(unit) == 1
    finally:
        holder.wait()
    assert db.get_session("s1")["message_count"] == 1
    assert len(runs) == 1  # BEGIN IMMEDIATE waited: the body ran once, after the lock
    db.close()


def test_statement_errors_are_sqlite3_classes_on_both_engines(target):
    db = ours.SessionDB(target)
    db.create_session("s1", "cli")
    conn = db._conn
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)", ("s1", "x", 1.0))
    with pytest.raises(sqlite3.OperationalError, match="nope"):
        conn.execute("SELECT * FROM nope")
    with pytest.raises(sqlite3.OperationalError, match="no_such_column|does not exist|no such column"):
        conn.execute("SELECT no_such_column FROM sessions")
    with pytest.raises(sqlite3.ProgrammingError, match="Incorrect number of bindings"):
        conn.execute("SELECT * FROM sessions WHERE id = ?", ())
    with pytest.raises(sqlite3.ProgrammingError, match="one statement"):
        conn.execute("SELECT 1; SELECT 2")
    with pytest.raises(sqlite3.ProgrammingError, match="transaction control"):
        conn.execute("BEGIN IMMEDIATE")
    # inside a unit the agent's except sqlite3.IntegrityError sees it, and the unit goes on
    def unit(c):
        try:
            c.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)", ("s1", "x", 1.0))
        except sqlite3.IntegrityError:
            pass
        c.execute("UPDATE sessions SET title = ? WHERE id = ?", ("kept", "s1"))
        return "done"

    if not db.target.is_postgresql:  # a failed statement aborts a PostgreSQL transaction
        assert db._execute_write(unit) == "done"
        assert db.get_session("s1")["title"] == "kept"
    with pytest.raises(sqlite3.IntegrityError):
        db._execute_write(lambda c: c.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)", ("s1", "x", 1.0)))
    db.close()


def test_constructs_postgresql_cannot_answer_are_named(pg_url):
    db = ours.SessionDB(pg_url)
    for sql, named in [("SELECT id FROM sessions WHERE title LIKE ?", "LIKE"),
                       ("SELECT datetime(started_at, 'unixepoch') FROM sessions", "datetime()"),
                       ("INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                        "INSERT OR IGNORE"),
                       ("SELECT rowid FROM sessions", "rowid"),
                       ("SELECT max(input_tokens, output_tokens) FROM sessions", "max("),
                       ("SELECT name FROM sqlite_master", "sqlite_master"),
                       ("SELECT group_concat(id) FROM sessions", "group_concat()"),
                       ("SELECT SUM(input_tokens) / COUNT(*) FROM sessions", "division")]:
        params = ("x",) * sql.count("?")
        with pytest.raises(sqlite3.NotSupportedError) as caught:
            db._conn.execute(sql, params)
        assert named in str(caught.value) and "PostgreSQL" in str(caught.value)
    assert db.session_count() == 0  # nothing ran
    db.close()


def test_a_server_that_is_not_there(monkeypatch):
    url = "postgresql+psycopg://hermes@/nodb?host=/nonexistent-socket-dir&connect_timeout=2"
    with pytest.raises(sqlite3.OperationalError) as caught:
        ours.SessionDB(url)
    assert isinstance(caught.value, HermesStoreError)
    assert ours.get_last_init_error().startswith(type(caught.value).__name__ + ": ")
    assert "Session database not available: " in ours.format_session_db_unavailable()


# --------------------------------------------------------------------------- threads

def test_threads_never_share_a_transaction_through_conn(target):
    """A thread inside ``_execute_write`` holds its unit open; another thread's raw
    reads see only what was committed, and its raw write waits for the unit (upstream's
    one shared connection would put it inside the other thread's transaction)."""
    db = ours.SessionDB(target)
    db.create_session("s1", "cli")
    inside, release, done = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def unit(conn):
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", ("uncommitted", "s1"))
        inside.set()
        assert release.wait(10)
        return conn.execute("SELECT title FROM sessions WHERE id = ?", ("s1",)).fetchone()[0]

    def writer():
        seen["unit"] = db._execute_write(unit)

    def other():
        assert inside.wait(10)
        seen["read"] = db._conn.execute("SELECT title FROM sessions WHERE id = ?", ("s1",)).fetchone()[0]
        started = time.monotonic()
        db._conn.execute("UPDATE sessions SET model = ? WHERE id = ?", ("m2", "s1"))
        seen["waited"] = time.monotonic() - started
        done.set()

    a, b = threading.Thread(target=writer), threading.Thread(target=other)
    a.start(), b.start()
    assert inside.wait(10)
    time.sleep(0.3)
    assert "read" in seen and seen["read"] is None and not done.is_set()  # the write waits
    release.set()
    a.join(10), b.join(10)
    assert seen["unit"] == "uncommitted"
    assert seen["waited"] >= 0.2
    row = db.get_session("s1")
    assert (row["title"], row["model"]) == ("uncommitted", "m2")
    db.close()
