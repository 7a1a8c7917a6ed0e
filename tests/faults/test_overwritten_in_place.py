"""Row 4: the file overwritten in place, same inode (``cp backup.db state.db``; upstream
#45383, #89332).

The path keeps its inode, so a check of (device, inode) cannot see it, and SQLite's
page cache in WAL mode is not invalidated by it either (``PRAGMA application_id`` still
answers the old value). Measured before: the open store's next append succeeded and
the copied-in file then held 6 messages where it came with 3. The store stamps an
identity in every file it creates or adopts (the header's ``application_id`` and
``state_meta.file_identity``), copies it makes get an identity of their own, and every
write unit reads the stamp from the file itself: a stranger is refused with
``StoreOverwrittenError`` (a ``StoreReplacedError``), sticky, and nothing of this store
is written into it, not even at close.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.errors import StoreOverwrittenError, StoreReplacedError
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

#: what an overwritten WAL store leaves beside it: its log, moved out of the way
MOVED_LOG = "state.db.replaced-*"


def _copy_made_by_the_store(how: str, path: Path, dest: Path) -> None:
    """``hermes-store db backup`` or ``recover --output``, run by another process."""
    args = ["db", "backup", str(dest)] if how == "backup" else ["recover", "--output", str(dest)]
    done = subprocess.run([sys.executable, "-m", "hermes_store", "--db", str(path), *args],
                          capture_output=True, text=True, env=rs.worker_env(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _messages(path: Path) -> int:
    conn = rs.raw_connect(path)
    try:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("journal_mode, how", [("wal", "backup"), ("delete", "backup"),
                                               ("wal", "recover")])
def test_a_copy_written_over_the_live_file(tmp_path, journal_mode, how):
    path = tmp_path / "live" / "state.db"
    if journal_mode == "wal":
        rs.fresh_store_file(path)
    kept, later = Oracle(), Oracle()
    db = SessionDB(path, journal_mode=journal_mode)
    try:
        assert kept.create_session(db, "s1")
        for i in range(3):
            assert isinstance(kept.append(db, "s1", f"in the copy {i}"), int)
        copy = tmp_path / "copy.db"
        _copy_made_by_the_store(how, path, copy)
        for i in range(3):
            assert isinstance(later.append(db, "s1", f"after the copy {i}"), int)
        inode = os.stat(path).st_ino
        subprocess.run(["cp", str(copy), str(path)], check=True)  # the restore, in place
        assert os.stat(path).st_ino == inode
        with pytest.raises(StoreOverwrittenError) as first:
            db.append_message("s1", "user", "into the stranger's file")
        with pytest.raises(StoreOverwrittenError):  # sticky
            db.set_session_title("s1", "a title")
        assert db.replaced
    finally:
        db.close()
    error = first.value
    assert isinstance(error, StoreReplacedError)
    assert str(path) in str(error) and "overwritten in place" in str(error)
    # the file holds what it came with, nothing of this store's (not even at close)
    assert _messages(path) == 3
    assert kept.missing(path) == []
    assert_sound(path)
    assert_no_strays(path.parent, MOVED_LOG)
