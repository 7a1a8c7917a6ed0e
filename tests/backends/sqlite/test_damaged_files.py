"""Issue 5, item 6: a damaged file gets a clear error that names `hermes-store recover`,
and the store never writes to it (its bytes and mtime stay as they were).

User pain (corruption and recovery): upstream kept writing into damaged files, ran
self-repairs that raced live writers, and showed "no sessions" instead of "storage
damaged". Writing into a damaged file can destroy what a recovery could still salvage.
"""

from __future__ import annotations

import os
import random
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import time

import pytest

from support import reliability as rs
from hermes_store import SessionDB
from hermes_store.errors import DatabaseDamagedError, NotADatabaseError

PAGE = 4096


def _good_store(path, sessions=3, messages=120) -> None:
    with SessionDB(rs.fresh_store_file(path)) as db:
        for s in range(sessions):
            db.create_session(f"s{s}", source="cli")
            for i in range(messages):
                db.append_message(f"s{s}", role="user" if i % 2 else "assistant",
                                  content=f"session {s} message {i} " + "words to index " * 30)
    # The store has closed: everything is in the main file, no -wal left behind.


def _damaged_by_sqlite(path, tmp_path) -> bool:
    """Whether plain sqlite3 finds the file (with its -wal) damaged — checked on a copy."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir(exist_ok=True)
    probe = probe_dir / "state.db"
    for suffix in ("", "-wal"):
        if os.path.exists(f"{path}{suffix}"):
            shutil.copyfile(f"{path}{suffix}", f"{probe}{suffix}")
    try:
        return rs.sqlite_integrity(probe) != []
    except sqlite3.DatabaseError:
        return True


def _assert_refused_untouched(path):
    # The file, and its -wal when one was there (a checkpoint would consume it).
    watched = [p for p in (path, rs.sidecars(path)[0]) if os.path.exists(p)]
    before = {p: rs.fingerprint(p) for p in watched}
    time.sleep(0.01)  # so that a write would move the mtime
    with pytest.raises((DatabaseDamagedError, NotADatabaseError)) as excinfo:
        SessionDB(path)
    message = str(excinfo.value)
    assert "hermes-store recover" in message, f"the error does not say what to do: {message}"
    assert str(path) in message or os.path.basename(path) in message, f"which file? {message}"
    after = {p: rs.fingerprint(p) for p in watched}
    assert after == before, "the store wrote to a damaged file"
    return excinfo.value


def test_truncated_file(tmp_path):
    path = tmp_path / "state.db"
    _good_store(path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate((size // PAGE // 2) * PAGE)
    _assert_refused_untouched(path)


def test_pages_overwritten_with_random_bytes(tmp_path):
    path = tmp_path / "state.db"
    _good_store(path)
    pages = path.stat().st_size // PAGE
    rng = random.Random(5)
    with open(path, "r+b") as fh:
        for page in rng.sample(range(2, pages), k=max(3, pages // 4)):
            fh.seek(page * PAGE)
            fh.write(rng.randbytes(PAGE))
    assert _damaged_by_sqlite(path, tmp_path)  # the damage is real
    _assert_refused_untouched(path)


def test_zeroed_header(tmp_path):
    # Nothing in it can be read: it is set aside, every byte kept, and a fresh store is
    # started in its place (issue 31, row 8: tests/faults/test_zeroed_file.py).
    path = tmp_path / "state.db"
    _good_store(path)
    with open(path, "r+b") as fh:
        fh.write(b"\x00" * 100)
    found = rs.fingerprint(path)[0]
    with SessionDB(path) as db:
        assert db.session_count() == 0
    [aside] = tmp_path.glob("state.db.zeroed-*")
    assert rs.fingerprint(aside)[0] == found


@pytest.mark.parametrize("content", [
    pytest.param(b"just some notes, not a database\n" * 400, id="text"),
    pytest.param(random.Random(1).randbytes(64 * 1024), id="random-bytes"),
    pytest.param(b'{"sessions": []}', id="json"),
    pytest.param(b"SQLite format 3\x00" + b"\xff" * 84 + b"\x00" * 3996, id="fake-header"),
])
def test_file_that_is_not_sqlite(tmp_path, content):
    path = tmp_path / "state.db"
    path.write_bytes(content)
    path.chmod(0o600)
    _assert_refused_untouched(path)


def _stale_wal_case(tmp_path):
    """A database file next to a -wal left by a *different* database that shared its
    history up to a point (e.g. state.db restored from a backup, old -wal kept)."""
    common = tmp_path / "common.db"
    _good_store(common, sessions=2, messages=60)

    # The database that wrote the -wal: more history (checkpointed), then one last
    # transaction whose pages are all the -wal holds.
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = other_dir / "state.db"
    shutil.copyfile(common, other)
    writer = sqlite3.connect(str(other), isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    for i in range(300):
        writer.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', ?, ?)",
            (f"other history {i} " + "zz " * 200, time.time()))
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.execute("INSERT INTO messages (session_id, role, content, timestamp)"
                   " VALUES ('s1', 'user', 'last one', 1)")
    stale_wal = tmp_path / "stale.wal"
    shutil.copyfile(f"{other}-wal", stale_wal)
    writer.close()

    # The database the -wal is found beside: a different history since `common`.
    path = tmp_path / "state.db"
    shutil.copyfile(common, path)
    with SessionDB(path) as db:
        db.create_session("mine", source="cli")
        for i in range(40):
            db.append_message("mine", role="user", content=f"my history {i} " + "yy " * 150)
    shutil.copyfile(stale_wal, f"{path}-wal")
    os.chmod(f"{path}-wal", 0o600)
    return path


def test_stale_wal_from_another_file(tmp_path):
    path = _stale_wal_case(tmp_path)
    assert _damaged_by_sqlite(path, tmp_path), "the stale -wal did not damage the image"
    _assert_refused_untouched(path)


def test_healthy_file_with_a_hot_wal_opens(tmp_path):
    """The checks are not trigger-happy: a sound file with the hot -wal a killed writer
    leaves behind opens, and the committed row in that log is there."""
    path = tmp_path / "state.db"
    _good_store(path, sessions=1, messages=10)
    crash_image = tmp_path / "crash"
    crash_image.mkdir()
    writer = sqlite3.connect(str(path), isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s0','user','hot',1)")
    for suffix in ("", "-wal"):  # what the disk holds at the moment of a kill
        shutil.copyfile(f"{path}{suffix}", crash_image / f"state.db{suffix}")
    writer.close()
    for suffix in ("", "-wal"):
        shutil.copyfile(crash_image / f"state.db{suffix}", f"{path}{suffix}")
    with SessionDB(path) as db:
        assert db.message_count("s0") == 11
        assert db.search_messages("hot")


def test_corrupt_full_text_index_does_not_stop_writes_or_searches(tmp_path):
    """#50502: a corrupt FTS shadow table made every INSERT INTO messages fail while
    PRAGMA integrity_check said "ok". The index is derived data: canonical writes go on,
    search still answers, and rebuild_fts() restores it from `messages`."""
    path = tmp_path / "state.db"
    _good_store(path, sessions=1, messages=200)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("UPDATE messages_fts_data SET block = randomblob(length(block)) WHERE id > 10")
    conn.close()
    assert rs.sqlite_integrity(path) == []  # SQLite's own check cannot see it ...
    assert rs.fts_problems(path) != []      # ... the FTS check can

    with SessionDB(path) as db:
        assert db.fts_integrity_check() != []
        new_id = db.append_message("s0", role="user", content="written after the damage newword")
        assert db.get_session("s0")["message_count"] == 201
        assert new_id in [h["id"] for h in db.search_messages("newword")]
        assert len(db.search_messages("session", limit=-1)) > 0
        db.rebuild_fts()
        assert db.fts_integrity_check() == []
        assert new_id in [h["id"] for h in db.search_messages("newword")]
    rs.assert_store_whole(path)
