"""The store's WAL checkpoints (decision D19): how the WAL-reset race is closed on a
library without the fix (SQLite 3.7.0-3.51.2; the standard library's 3.40.1 here).

The race needs a commit from another connection while a checkpoint runs. So:

* the store's connections never checkpoint on their own (``wal_autocheckpoint=0``);
* the store's own checkpoints (every ``checkpoint_every`` units, at close) run only while
  the database's writer lock is held for their whole run: a concurrent commit waits;
* when a writer holds the lock as a checkpoint is due, the checkpoint waits for it within
  the busy timeout, or is skipped — never SQLite's silent fall-back from FULL to an
  unlocked PASSIVE checkpoint, which the control below shows.

Probes use the store's own library (one SQLite per process); the checks of the main file
run in a child process, so that no descriptor of the live file is opened and closed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event

from hermes_store import SessionDB
from hermes_store.backends.sqlite.engine import WAL_SIZE_LIMIT
from hermes_store.backends.sqlite.library import connect
from hermes_store.units import RetryPolicy

WORKERS = Path(__file__).resolve().parents[2] / "support" / "workers"
REPO_ROOT = Path(__file__).resolve().parents[3]
#: the soak's length (the acceptance runs 60 s; set lower for a quick local look)
SOAK_SECONDS = float(os.environ.get("HERMES_TEST_CHECKPOINT_SOAK_SECONDS", "60"))


def _main_file_digest(path: Path) -> str:
    """sha256 of the database file alone (not its -wal), read by a child process."""
    code = ("import hashlib, sys\n"
            "print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=True).stdout.strip()


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, (size - 32) // (4096 + 24))


def _writer_lock(path: Path) -> str:
    """"held" when another connection holds the database's writer lock, else "free"."""
    probe = connect(str(path), isolation_level=None, timeout=0)
    try:
        try:
            probe.execute("BEGIN IMMEDIATE")
        except Exception as exc:  # the library's OperationalError: database is locked
            assert "locked" in str(exc) or "busy" in str(exc), exc
            return "held"
        probe.execute("ROLLBACK")
        return "free"
    finally:
        probe.close()


def _watch_checkpoints(engine, path: Path) -> list[tuple]:
    """Record (when, writer lock, time) just before and just after every checkpoint
    statement the store runs on ``engine``."""
    seen: list[tuple] = []

    def before(conn, cursor, statement, *rest):
        if "wal_checkpoint" in statement:
            seen.append(("before", _writer_lock(path), time.monotonic()))

    def after(conn, cursor, statement, *rest):
        if "wal_checkpoint" in statement:
            seen.append(("after", _writer_lock(path), time.monotonic()))

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    return seen


def _new_store(path: Path) -> Path:
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    return path


def test_the_stores_connections_never_checkpoint_on_their_own(tmp_path):
    path = _new_store(tmp_path / "state.db")
    before = _main_file_digest(path)
    db = SessionDB(path, retry=RetryPolicy(checkpoint_every=0))
    try:
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        raw = connect(":memory:")  # the package's raw connections too
        try:
            assert raw.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        finally:
            raw.close()
        for i in range(300):
            db.append_message("s", role="user", content=f"row {i} " + "payload " * 400)
        # SQLite's automatic checkpoint would have run at 1,000 frames
        assert _wal_frames(path) > 1500
        assert _main_file_digest(path) == before, "frames were copied back without the store"
    finally:
        db.close()
    assert _main_file_digest(path) != before  # close checkpointed: the oracle can tell


def test_a_checkpoint_holds_the_writer_lock_for_its_whole_run(tmp_path):
    path = _new_store(tmp_path / "state.db")
    db = SessionDB(path, retry=RetryPolicy(checkpoint_every=10))
    seen = _watch_checkpoints(db.engine, path)
    try:
        for i in range(30):
            db.append_message("s", role="user", content=f"row {i}")
        # one transaction holds the lock from before the checkpoint until after it
        assert [(w, lock) for w, lock, _ in seen] == [("before", "held"), ("after", "held")] * 3
        assert _writer_lock(path) == "free"  # and lets it go afterwards
    finally:
        db.close()
    assert [(w, lock) for w, lock, _ in seen[6:]] == [("before", "held"), ("after", "held")]


def test_a_commit_that_arrives_during_a_checkpoint_waits_for_it(tmp_path):
    path = _new_store(tmp_path / "state.db")
    db = SessionDB(path, retry=RetryPolicy(checkpoint_every=0))
    for i in range(200):  # a WAL worth copying back
        db.append_message("s", role="user", content=f"row {i} " + "payload " * 200)
    engine = db.engine
    times: dict[str, float] = {}
    other = {}

    def commit_from_another_connection():
        conn = connect(str(path), isolation_level=None, timeout=10)
        try:
            times["attempt"] = time.monotonic()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO state_meta(key, value) VALUES ('probe', 'x')")
            conn.execute("COMMIT")
            times["committed"] = time.monotonic()
        finally:
            conn.close()

    def before(conn, cursor, statement, *rest):
        if "wal_checkpoint" in statement:
            other["thread"] = threading.Thread(target=commit_from_another_connection)
            other["thread"].start()
            while "attempt" not in times:
                time.sleep(0.001)
            time.sleep(0.05)  # the other connection is in its busy wait now

    def after(conn, cursor, statement, *rest):
        if "wal_checkpoint" in statement:
            times["checkpointed"] = time.monotonic()

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    db.close()  # the checkpoint at close
    other["thread"].join(15)
    assert times["attempt"] < times["checkpointed"] < times["committed"]


def _hold_writer_lock(path: Path, seconds: float, done: dict) -> threading.Thread:
    """Another connection takes the writer lock, writes, and commits after ``seconds``."""
    conn = connect(str(path), isolation_level=None, timeout=5, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO state_meta(key, value) VALUES ('busy-writer', 'x')")

    def finish():
        time.sleep(seconds)
        done["committed"] = time.monotonic()
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def test_a_checkpoint_due_while_a_writer_is_busy_waits_for_the_lock(tmp_path):
    path = _new_store(tmp_path / "state.db")
    db = SessionDB(path, retry=RetryPolicy(checkpoint_every=0, busy_timeout=3.0))
    for i in range(50):
        db.append_message("s", role="user", content=f"row {i}")
    seen = _watch_checkpoints(db.engine, path)
    done: dict = {}
    writer = _hold_writer_lock(path, 0.3, done)
    db.close()
    writer.join(10)
    assert [(w, lock) for w, lock, _ in seen] == [("before", "held"), ("after", "held")]
    assert seen[0][2] > done["committed"]  # it began only once the busy writer was done


def test_a_checkpoint_that_cannot_get_the_lock_is_skipped(tmp_path):
    path = _new_store(tmp_path / "state.db")
    db = SessionDB(path, retry=RetryPolicy(checkpoint_every=0, busy_timeout=0.2))
    for i in range(50):
        db.append_message("s", role="user", content=f"row {i} " + "payload " * 50)
    seen = _watch_checkpoints(db.engine, path)
    before = _main_file_digest(path)
    done: dict = {}
    writer = _hold_writer_lock(path, 1.5, done)
    db.close()  # its checkpoint cannot have the lock within 0.2 s
    assert seen == []  # no checkpoint statement ran at all
    assert _main_file_digest(path) == before  # nothing was copied back
    writer.join(10)
    with SessionDB(path, read_only=True) as check:
        assert len(check.get_messages("s")) == 50


def test_control_sqlite_turns_a_full_checkpoint_it_cannot_lock_into_a_passive_one(tmp_path):
    """Why asking SQLite for FULL is not enough (``wal.c``: a FULL, RESTART or TRUNCATE
    checkpoint that cannot get the writer lock carries on as PASSIVE): with a writer
    busy, ``wal_checkpoint(FULL)`` reports busy, yet it copied frames back — without
    the lock, while that writer could commit."""
    path = _new_store(tmp_path / "state.db")
    db = SessionDB(path, retry=RetryPolicy(checkpoint_every=0))
    for i in range(50):
        db.append_message("s", role="user", content=f"row {i} " + "payload " * 50)
    done: dict = {}
    writer = _hold_writer_lock(path, 0.5, done)
    raw = connect(str(path), isolation_level=None, timeout=0.05)
    try:
        busy, log, checkpointed = raw.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
    finally:
        raw.close()
    writer.join(10)
    db.close()
    assert busy == 1 and log > 0 and checkpointed == log


def test_soak_writers_readers_and_checkpoints(tmp_path):
    """4 writer processes, 2 readers, a checkpoint every 50 units each, for 60 s: the
    file and its full-text indexes stay whole, nothing acknowledged is lost, and the WAL
    stays under journal_size_limit plus one checkpoint's worth."""
    path = _new_store(tmp_path / "state.db")
    with SessionDB(path, retry=RetryPolicy(checkpoint_every=0)) as db:  # one unit's WAL
        frames = _wal_frames(path)
        db.append_message("s", role="assistant", content="lorem ipsum " * 40, tool_calls=[
            {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}])
        unit_bytes = max(1, _wal_frames(path) - frames) * (4096 + 24)
    writers_n, every = 4, RetryPolicy().checkpoint_every
    bound = WAL_SIZE_LIMIT + writers_n * every * unit_bytes * 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))}

    def spawn(script, *args):
        return subprocess.Popen([sys.executable, str(WORKERS / script), str(path), *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    writers = [spawn("checkpoint_writer.py", i, SOAK_SECONDS) for i in range(writers_n)]
    readers = [spawn("checkpoint_reader.py", SOAK_SECONDS) for _ in range(2)]
    largest, stop = [0], threading.Event()

    def watch_wal():
        wal = Path(f"{path}-wal")
        while not stop.is_set():
            try:
                largest[0] = max(largest[0], wal.stat().st_size)
            except FileNotFoundError:
                pass
            time.sleep(0.01)

    watcher = threading.Thread(target=watch_wal)
    watcher.start()
    acknowledged, outputs = [], []
    try:
        for proc in writers + readers:
            out, err = proc.communicate(timeout=SOAK_SECONDS + 120)
            outputs.append((proc.args[2], proc.returncode, err[-2000:]))
            for line in out.splitlines():
                row = json.loads(line)
                if "id" in row:
                    acknowledged.append(row)
    finally:
        stop.set()
        watcher.join()
        for proc in writers + readers:
            if proc.poll() is None:
                proc.kill()
    assert all(code == 0 for _, code, _ in outputs), outputs
    assert len(acknowledged) > 100 * writers_n, "too few writes to have tested anything"
    # the figures docs/reliability.md quotes (pytest -s shows them)
    print(f"\nsoak {SOAK_SECONDS:g} s: {len(acknowledged)} acknowledged writes, largest -wal "
          f"{largest[0] / 2**20:.1f} MiB (bound {bound / 2**20:.1f} MiB)")
    assert largest[0] <= bound, (largest[0], bound)

    check = ("import json, sqlite3, sys\n"
             "c = sqlite3.connect(sys.argv[1])\n"
             "rows = dict(c.execute('SELECT id, content FROM messages'))\n"
             "print(json.dumps({'integrity': c.execute('PRAGMA integrity_check').fetchone()[0],\n"
             "                  'rows': {str(k): v for k, v in rows.items()}}))\n")
    got = json.loads(subprocess.run([sys.executable, "-c", check, str(path)], capture_output=True,
                                    text=True, check=True).stdout)
    assert got["integrity"] == "ok"
    missing = [a for a in acknowledged
               if not (got["rows"].get(str(a["id"])) or "").startswith(a["marker"] + " ")
               and got["rows"].get(str(a["id"])) != a["marker"] + " "]
    assert missing == []
    with SessionDB(path) as db:
        assert db.fts_integrity_check() == []
        last = acknowledged[-1]["marker"]
        assert any(hit["session_id"] == acknowledged[-1]["session"]
                   for hit in db.search_messages(f'"{last}"', limit=50))
