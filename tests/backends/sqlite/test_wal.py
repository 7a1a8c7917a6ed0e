"""Issue 5, item 4: the write-ahead log under long readers and a live writer.

* Another program holding a read snapshot for a long time does not make the store's
  writes fail (WAL: readers and one writer coexist); once it lets go, the store's own
  periodic PASSIVE checkpoint copies the log back into the database and the log file
  stops growing.
* ``close()`` checkpoints PASSIVE only: it never TRUNCATEs (or RESTARTs) the log while
  another process is writing — the cause of upstream's torn B-trees (#45383, #80255).
"""

from __future__ import annotations

import os
import re
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from support import reliability as rs
from hermes_store import SessionDB


def _rows_in_main_file_alone(path, tmp_path) -> int:
    """Messages present in the database file itself, ignoring the -wal."""
    alone = tmp_path / "main-only.db"
    shutil.copyfile(path, alone)
    conn = sqlite3.connect(f"file:{alone}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


def test_long_reader_does_not_fail_writers_and_log_is_checkpointed_after(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    wal = f"{path}-wal"
    db = SessionDB(path)
    db.create_session("busy", source="gateway")
    # An idle connection from "another program" keeps SQLite from checkpointing and
    # deleting the log on last close, so what we see is the store's own doing.
    keeper = sqlite3.connect(str(path))
    keeper.execute("SELECT 1").fetchone()
    reader = rs.spawn("long_reader", path, stdin=subprocess.PIPE)
    try:
        rs.wait_for_line(reader, "holding")
        for i in range(150):  # several checkpoint intervals, all behind the reader
            db.append_message("busy", role="user", content=f"while reading {i} " + "y" * 2000)
        size_during = os.path.getsize(wal)
        assert size_during > 150 * 2000, "the reader did not pin the log; nothing was tested"
        reader.stdin.write("release\n")
        reader.stdin.flush()
        rs.wait_for_line(reader, "stable")
        rs.finish(reader)
        assert reader.returncode == 0

        for i in range(60):  # past the next checkpoint interval
            db.append_message("busy", role="user", content=f"after reading {i} " + "z" * 2000)
        assert _rows_in_main_file_alone(path, tmp_path) >= 150, (
            "no checkpoint reached the database file after the reader ended")
        size_after = os.path.getsize(wal)
        for i in range(100):  # enough writes to grow the log by megabytes, were it not reused
            db.append_message("busy", role="user", content=f"later {i} " + "w" * 2000)
        assert os.path.getsize(wal) <= size_after, "the log is not reused: it keeps growing"

        conn = rs.engine_of(db).raw_connection()
        try:
            limit = conn.execute("PRAGMA journal_size_limit").fetchone()[0]
        finally:
            conn.close()
        assert limit >= 0, ("journal_size_limit is unset (-1): PASSIVE checkpoints never shrink "
                            "the -wal file, so one long reader leaves it large forever")
    finally:
        if reader.poll() is None:
            reader.kill()
        keeper.close()
        db.close()
    rs.assert_store_whole(path)


@pytest.fixture
def traced_sql():
    """Every SQL statement any pooled connection of this process runs (raw DBAPI included)."""
    statements: list[str] = []

    def on_connect(dbapi_conn, _record):
        if isinstance(dbapi_conn, sqlite3.Connection):
            dbapi_conn.set_trace_callback(statements.append)

    event.listen(Pool, "connect", on_connect)
    try:
        yield statements
    finally:
        event.remove(Pool, "connect", on_connect)


def test_close_never_truncates_the_log_under_a_live_writer(tmp_path, traced_sql):
    path = rs.fresh_store_file(tmp_path / "state.db")
    with SessionDB(path) as db:
        db.create_session("cli", source="cli")
    writer = rs.spawn("busy_writer", path, "gateway-session", stdin=subprocess.PIPE)
    try:
        rs.wait_for_line(writer, "writing")
        for round_ in range(5):  # short-lived CLI/cron stores opening and closing
            db = SessionDB(path)
            db.append_message("cli", role="user", content=f"cli round {round_}")
            traced_sql.clear()
            db.close()
            db.close()  # idempotent
            checkpoints = [s for s in traced_sql if "wal_checkpoint" in s.lower()]
            forbidden = [s for s in checkpoints
                         if re.search(r"wal_checkpoint\s*\(\s*'?(truncate|restart|full)", s, re.I)]
            assert not forbidden, f"close() ran {forbidden} while another process writes"
            assert os.path.exists(f"{path}-wal"), "close() removed the live writer's log"
        assert writer.poll() is None, "the live writer died while stores were closed"
    finally:
        out, err = writer.communicate(input="", timeout=60)  # closing stdin stops it
    assert writer.returncode == 0, err
    assert rs.json_lines(out)[-1]["written"] > 0
    rs.assert_store_whole(path)
    with SessionDB(path) as db:
        assert db.message_count("cli") == 5
