"""Issue 31, row 5 (upstream #100436, #100871): a "disk I/O error" for a read-only opener.

Upstream's read-only openers (``mode=ro``) met a transient ``SQLITE_IOERR`` while
another process checkpointed or reset the WAL: a read-only connection cannot rebuild the
``-shm`` itself. A read-only store therefore tries such a read again on the same
connection, within a bounded budget (``RetryPolicy.io_attempts`` tries,
``io_pause`` apart: 3 x 50 ms), then raises ``StoreIOError`` naming the file. A
writable store is never retried: its I/O errors are real.

How the fault is caused. On Linux/ext4 with SQLite 3.40.1 no interleaving of writers
resetting the WAL (TRUNCATE checkpoints, the last connection's close unlinking
``-wal``/``-shm``) and ``mode=ro`` readers produced an ``SQLITE_IOERR`` here (0 in about
800 000 reads; readers of another user saw ``SQLITE_READONLY_RECOVERY`` and
``SQLITE_READONLY_DIRECTORY`` instead). So the tests cause a real ``SQLITE_IOERR_SHMOPEN``
("disk I/O error") from SQLite's own code: a FIFO where the ``-shm`` goes, which SQLite
opens and then fails to ``ftruncate``. It is persistent while the FIFO is there, and
transient when another process (``workers/shm_watch.py``) removes it as soon as SQLite
first opened it. That process also counts SQLite's attempts (each opens the ``-shm``
once, seen through inotify); a statement listener counts them on the store's side.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import event

from hermes_store import RetryPolicy, SessionDB, errors
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="inotify counts SQLite's attempts (Linux)")

SESSION = "s1"
#: a budget with room for the clearing process on a loaded machine (same rule, longer pause)
PATIENT = RetryPolicy(io_attempts=3, io_pause=0.25)


@pytest.fixture
def store(tmp_path) -> tuple[Path, Oracle]:
    """A store with acknowledged messages, closed: no ``-shm`` is mapped by anyone."""
    path = rs.fresh_store_file(tmp_path / "state.db")
    oracle = Oracle()
    with SessionDB(path) as db:
        assert oracle.create_session(db, SESSION)
        for n in range(3):
            assert isinstance(oracle.append(db, SESSION, f"needle {n}"), int)
    return path, oracle


def _block_shm(path: Path) -> Path:
    """A FIFO where the ``-shm`` goes (a leftover one removed first: nothing maps it)."""
    shm = Path(f"{path}-shm")
    if shm.exists():
        shm.unlink()
    os.mkfifo(shm)
    return shm


def _watch(shm: Path, mode: str) -> subprocess.Popen:
    watcher = rs.spawn("shm_watch", shm, mode, stdin=subprocess.PIPE)
    rs.wait_for_line(watcher, "watching")
    return watcher


def _opens(watcher: subprocess.Popen) -> int:
    out, err = rs.finish(watcher, timeout=60)
    assert watcher.returncode == 0, err
    return rs.json_lines(out)[-1]["opens"]


def _statements(db: SessionDB) -> list[str]:
    seen: list[str] = []
    event.listen(db.engine, "before_cursor_execute",
                 lambda conn, cursor, sql, *rest: seen.append(sql))
    return seen


def _reads(db: SessionDB) -> dict:
    """The three read paths: a single statement, a snapshot, a lazy read (search)."""
    return {"get_messages": [m["content"] for m in db.get_messages(SESSION)],
            "resolve_session_id": db.resolve_session_id(SESSION),
            "search_messages": len(db.search_messages("needle", limit=10))}


EXPECTED = {"get_messages": ["needle 0", "needle 1", "needle 2"],
            "resolve_session_id": SESSION, "search_messages": 3}


def _assert_whole(path: Path, oracle: Oracle) -> None:
    assert oracle.missing(path) == []
    assert_sound(path)
    assert_no_strays(path.parent)


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_a_read_only_store_rides_out_an_io_error_that_clears(store, method):
    path, oracle = store
    with SessionDB(path, read_only=True, retry=PATIENT) as db:
        shm = _block_shm(path)  # before the store's first read maps the shared memory
        watcher = _watch(shm, "clear")
        statements = _statements(db)

        answer = getattr(db, method)(*(("needle",) if method == "search_messages" else (SESSION,)))

        assert _opens(watcher) == 1  # the first attempt met the fault; then it was cleared
        assert len(statements) >= 2, statements  # tried again on the same connection
        got = ([m["content"] for m in answer] if method == "get_messages" else
               len(answer) if method == "search_messages" else answer)
        assert got == EXPECTED[method]
        assert _reads(db) == EXPECTED
    _assert_whole(path, oracle)


def test_a_read_only_store_raises_store_io_error_after_its_budget(store):
    path, oracle = store
    with SessionDB(path, read_only=True) as db:
        budget = db.retry.io_attempts
        shm = _block_shm(path)
        watcher = _watch(shm, "count")
        statements = _statements(db)

        with pytest.raises(errors.StoreIOError) as raised:
            db.get_messages(SESSION)

        assert _opens(watcher) == budget == 3
        assert len(statements) == budget
        message = str(raised.value)
        assert str(path) in message and "disk I/O error" in message
        assert f"{budget} times" in message  # says it was retried, and how often
        shm.unlink()  # the cause goes away: the same connection reads again
        assert _reads(db) == EXPECTED
    _assert_whole(path, oracle)


def test_a_read_only_open_rides_out_an_io_error_that_clears(store):
    path, oracle = store
    shm = _block_shm(path)
    watcher = _watch(shm, "clear")

    with SessionDB(path, read_only=True, retry=PATIENT) as db:
        assert _opens(watcher) == 1
        assert _reads(db) == EXPECTED
    _assert_whole(path, oracle)


def test_a_read_only_open_gives_up_after_its_budget_and_a_writable_open_at_once(store):
    path, oracle = store
    shm = _block_shm(path)

    watcher = _watch(shm, "count")
    with pytest.raises(errors.StoreIOError) as raised:
        SessionDB(path, read_only=True)
    assert _opens(watcher) == RetryPolicy().io_attempts == 3
    assert str(path) in str(raised.value) and "disk I/O error" in str(raised.value)

    watcher = _watch(shm, "count")
    with pytest.raises(errors.StoreIOError) as raised:
        SessionDB(path)  # writable: its I/O errors are never tried again
    assert _opens(watcher) == 1
    assert str(path) in str(raised.value)

    shm.unlink()
    with SessionDB(path, read_only=True) as db:
        assert _reads(db) == EXPECTED
    _assert_whole(path, oracle)
