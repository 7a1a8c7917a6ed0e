"""A file's identity (``backends.sqlite.files.identity``): recorded once, compared by ``stat``;
a replaced, moved or deleted file is ``StoreReplacedError`` naming the path; no stable
identity (inode 0) fails open; a replaced file's log is moved out of the new file's way
only when this process provably holds it."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from hermes_store.backends.sqlite.files import identity
from hermes_store.backends.sqlite.files.identity import (
    FileIdentity,
    FileWatch,
    set_aside_sidecars,
)
from hermes_store.backends.sqlite.library import connect
from hermes_store.errors import StoreReplacedError



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
