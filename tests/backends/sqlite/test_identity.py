"""A file's identity (``backends.sqlite.files.identity``): recorded once, compared by ``stat``;
a replaced, moved or deleted file is ``StoreReplacedError`` naming the path; no stable
identity (inode 0) fails open; a replaced file's log is moved out of the new file's way
only when this process provably holds it. The identity stamped in the file (``stamp``),
read back through the one kept descriptor (``descriptors``), and the log's generation
(``generation``): issue 31, rows 3 and 4 (the faults themselves: ``tests/faults``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_store import SessionDB
from hermes_store.backends.sqlite.files import descriptors, identity, stamp
from hermes_store.backends.sqlite.files.generation import Generation
from hermes_store.backends.sqlite.files.identity import (
    FileIdentity,
    FileWatch,
    set_aside_sidecars,
)
from hermes_store.backends.sqlite.library import connect
from hermes_store.errors import StoreOverwrittenError, StoreReplacedError
from support import reliability as rs



def _db(path, table: str):
    conn = connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"CREATE TABLE {table}(x)")
    conn.execute(f"INSERT INTO {table} VALUES ('{table}')")
    return conn


def test_unchanged_file_passes(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"")
    watch = FileWatch(path)
    assert watch.identity == FileIdentity.of(path) and watch.identity is not None
    path.write_bytes(b"more")  # written in place: the same file
    watch.check()
    assert not watch.replaced()


def test_replaced_by_rename_names_the_path(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"old")
    watch = FileWatch(path)
    (tmp_path / "new.db").write_bytes(b"new")
    os.replace(tmp_path / "new.db", path)
    with pytest.raises(StoreReplacedError) as err:
        watch.check()
    text = str(err.value)
    assert str(path) in text and "replaced while this store had it open" in text
    assert "nothing was written" in text and err.value.path == path


def test_moved_away_or_deleted(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"old")
    watch = FileWatch(path)
    os.rename(path, tmp_path / "elsewhere.db")
    with pytest.raises(StoreReplacedError, match="moved away or deleted"):
        watch.check()
    os.rename(tmp_path / "elsewhere.db", path)  # put back: the same file again
    watch.check()


def test_no_stable_identity_fails_open(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    path.write_bytes(b"")
    real_stat = os.stat
    monkeypatch.setattr(identity.os, "stat",
                        lambda p, *a, **k: SimpleNamespace(st_dev=real_stat(p).st_dev, st_ino=0))
    watch = FileWatch(path)
    assert watch.identity is None
    watch.check()  # nothing to compare: never a false alarm


def test_a_replaced_files_log_is_moved_out_of_the_new_files_way(tmp_path):
    path = tmp_path / "state.db"
    old = _db(path, "old_rows")
    new = _db(tmp_path / "incoming.db", "new_rows")
    new.close()
    os.replace(tmp_path / "incoming.db", path)
    assert (tmp_path / "state.db-wal").exists()  # the old file's log, at the new file's name
    moved = set_aside_sidecars(path)
    assert sorted(p.name[-4:] for p in moved) == ["-shm", "-wal"]
    assert all(p.name.startswith("state.db.replaced-") for p in moved)
    assert not (tmp_path / "state.db-wal").exists()
    old.close()
    fresh = connect(path)
    try:  # the new file shows its own schema, not the old file's log
        assert fresh.execute("SELECT name FROM sqlite_master").fetchall() == [("new_rows",)]
    finally:
        fresh.close()


def test_nothing_is_moved_while_this_process_holds_the_new_file(tmp_path):
    path = tmp_path / "state.db"
    old = _db(path, "old_rows")
    _db(tmp_path / "incoming.db", "new_rows").close()
    os.replace(tmp_path / "incoming.db", path)
    other = connect(path)
    other.execute("SELECT 1 FROM sqlite_master").fetchall()  # holds the new file open
    try:
        assert set_aside_sidecars(path) == []
    finally:
        other.close()
        old.close()


def test_nothing_is_moved_for_a_file_that_was_not_replaced(tmp_path):
    path = tmp_path / "state.db"
    conn = _db(path, "rows")
    try:
        assert set_aside_sidecars(path) == []
        assert (tmp_path / "state.db-wal").exists()
    finally:
        conn.close()


# --------------------------------------------------------------------------- the stamp (row 4)

def _stamp_of(path) -> tuple[int, list]:
    """(application_id, the state_meta rows naming an identity), read by plain sqlite3
    after the store closed."""
    conn = connect(path, isolation_level=None)
    try:
        return (conn.execute("PRAGMA application_id").fetchone()[0],
                conn.execute("SELECT value FROM state_meta WHERE key = ?",
                             (stamp.IDENTITY_KEY,)).fetchall())
    finally:
        conn.close()


def _header_in_child(path) -> int:
    """The header's application_id as the file holds it, read by another process (this
    one may hold the file open: no raw open here, D19)."""
    done = subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    f.seek(68); print(int.from_bytes(f.read(4), 'big', signed=True))\n"),
        str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_new_store_is_stamped_and_the_stamp_is_in_the_file_at_once(tmp_path):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    try:
        # checkpointed at open: a copy written over the file now would already be seen
        header = _header_in_child(path)
    finally:
        db.close()
    identity, named = _stamp_of(path)
    assert identity != 0 and named == [(str(identity),)] and header == identity


def test_an_unstamped_file_is_stamped_at_its_first_writable_open_only(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    conn = connect(path, isolation_level=None)  # as an upstream file comes: no identity
    conn.execute("PRAGMA application_id = 0")
    conn.execute("DELETE FROM state_meta WHERE key = ?", (stamp.IDENTITY_KEY,))
    conn.close()
    SessionDB(path, read_only=True).close()
    assert _stamp_of(path) == (0, [])
    SessionDB(path).close()
    identity, named = _stamp_of(path)
    assert identity != 0 and named == [(str(identity),)]
    SessionDB(path).close()
    assert _stamp_of(path) == (identity, named)  # kept, never stamped twice


def test_a_foreign_application_id_is_left_alone_and_watched(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    conn = connect(path, isolation_level=None)
    conn.execute("PRAGMA application_id = 424242")  # another application's, unnamed here
    conn.execute("DELETE FROM state_meta WHERE key = ?", (stamp.IDENTITY_KEY,))
    conn.close()
    stranger = rs.fresh_store_file(tmp_path / "stranger.db")
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        assert _stamp_of(path) == (424242, [])
        subprocess.run(["cp", str(stranger), str(path)], check=True)
        with pytest.raises(StoreOverwrittenError):
            db.append_message("s1", "user", "x")


def test_sqlite_answers_application_id_from_its_cache_so_the_watch_reads_the_file(tmp_path):
    """Why the check reads the header bytes itself: after ``cp`` over a WAL file, an open
    connection still answers the old ``application_id``."""
    path = rs.fresh_store_file(tmp_path / "state.db")
    other = tmp_path / "other.db"
    conn = connect(other, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    db = SessionDB(path)
    try:
        db.create_session("s1", "cli")
        engine = rs.engine_of(db)
        with engine.connect() as c:
            cached = c.exec_driver_sql("PRAGMA application_id").scalar()
        subprocess.run(["cp", str(other), str(path)], check=True)
        with engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA application_id").scalar() == cached != 0
        with pytest.raises(StoreOverwrittenError):
            db.append_message("s1", "user", "x")
    finally:
        db.close()


@pytest.mark.parametrize("how", ["backup", "recover", "db copy", "cp"])
def test_copies_the_store_makes_get_an_identity_of_their_own(tmp_path, how):
    from hermes_store.backends.sqlite.files.backup import backup
    from hermes_store.backends.sqlite.files.recovery import recover
    from hermes_store.dbcopy import copy_store

    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
    copy = tmp_path / "copy.db"
    if how == "backup":
        backup(path, copy)
    elif how == "recover":
        recover(path, copy)
    elif how == "db copy":
        copy_store(str(path), str(copy))
    else:  # another tool's byte copy keeps the identity (docs/operations.md)
        subprocess.run(["cp", str(path), str(copy)], check=True)
    source, copied = _stamp_of(path), _stamp_of(copy)
    assert copied[0] != 0 and copied[1] == [(str(copied[0]),)]
    assert (copied == source) is (how == "cp")


# --------------------------------------------------------------------------- the log's generation (row 3)

def test_a_generation_every_connection_let_go_of_is_no_loss(tmp_path):
    path = tmp_path / "state.db"
    conn = _db(path, "rows")
    generation = Generation(path)
    first = generation.recorded
    assert first is not None and generation.lost() is None
    for suffix in ("-wal", "-shm"):  # kept alive by a link, so no inode number is reused
        os.link(f"{path}{suffix}", tmp_path / f"old{suffix}")
    conn.close()  # the last connection: SQLite checkpoints and deletes both sidecars
    assert not Path(f"{path}-wal").exists()
    conn = connect(path, isolation_level=None)
    conn.execute("SELECT count(*) FROM rows").fetchone()  # a new generation
    try:
        assert generation.lost() is None  # nothing of this process held the old one
        assert generation.recorded not in (None, first)
    finally:
        conn.close()


def test_a_generation_still_held_is_lost(tmp_path):
    path = tmp_path / "state.db"
    conn = _db(path, "rows")
    try:
        generation = Generation(path)
        os.unlink(f"{path}-shm")
        assert generation.lost() == [Path(f"{path}-shm")]
        lost = generation.preserve(generation.lost())
        assert lost.preserved is None and "intact" in lost.aftermath
    finally:
        conn.close()


# --------------------------------------------------------------------------- the kept descriptor

def test_the_kept_descriptor_is_shared_and_closed_only_when_nothing_else_has_the_file(tmp_path):
    path = tmp_path / "state.db"
    conn = _db(path, "rows")
    ident = tuple(FileIdentity.of(path))
    fd = descriptors.hold(path, ident)
    assert fd is not None and descriptors.hold(path, ident) == fd  # one per file
    descriptors.release(ident)
    descriptors.release(ident)
    assert _is_open(fd)  # SQLite still has the file open here: closing would drop its locks
    assert ident not in descriptors.open_descriptors() or \
        fd not in descriptors.open_descriptors()[ident]  # never counted as "open here"
    conn.close()
    descriptors.release(ident)  # a later look closes it
    assert not _is_open(fd)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_the_watch_costs_a_few_system_calls(tmp_path, monkeypatch):
    """An armed watch of a WAL store, unchanged: one stat of the file, one pread of its
    header, one stat per sidecar, and nothing else (no descriptor scan, no open)."""
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s1", "cli")
        guard = next(v.guard for v in vars(db).values() if hasattr(v, "guard"))
        calls = []
        real_stat, real_pread = os.stat, os.pread
        monkeypatch.setattr(os, "stat", lambda p, *a, **k: (calls.append("stat"),
                                                            real_stat(p, *a, **k))[1])
        monkeypatch.setattr(os, "pread", lambda *a: (calls.append("pread"), real_pread(*a))[1])
        monkeypatch.setattr(os, "listdir", lambda *a: calls.append("listdir"))
        monkeypatch.setattr(os, "open", lambda *a, **k: calls.append("open"))
        guard.check()
    finally:
        monkeypatch.undo()
        db.close()
    assert sorted(calls) == ["pread", "stat", "stat", "stat"]
