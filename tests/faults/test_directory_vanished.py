"""Row 10: the directory of a live store deleted (a profile home ``rm -rf``'d; upstream
#94590, where a late writer re-created the deleted profile).

The store's next write must raise ``StoreDirectoryVanishedError`` naming the directory,
every later one too, and nothing may bring the directory back: not a write, not
``close()``, not ``reopen()``. Only a new ``SessionDB(path)`` (a first open, the caller's
explicit choice) creates it again, as a first open of any new path does.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from hermes_store import SessionDB
from hermes_store.errors import StoreDirectoryVanishedError, StoreReplacedError
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound


def test_the_profile_home_removed_under_a_live_store(tmp_path):
    profiles = tmp_path / "profiles"
    home = profiles / "coder"
    path = rs.fresh_store_file(home / "state.db")
    # a snapshot of the directory, as a backup tool's hard links would keep it: the
    # files as the store leaves them, once the directory is gone
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    oracle = Oracle()
    db = SessionDB(path)
    try:
        assert oracle.create_session(db, "s1")
        for i in range(3):
            assert isinstance(oracle.append(db, "s1", f"acknowledged {i}"), int)
        for name in ("state.db", "state.db-wal"):
            os.link(home / name, snapshot / name)
        subprocess.run(["rm", "-rf", str(home)], check=True)
        with pytest.raises(StoreDirectoryVanishedError) as first:
            db.append_message("s1", "user", "a late write")
        with pytest.raises(StoreDirectoryVanishedError):  # sticky
            db.set_session_title("s1", "a title")
        assert db.replaced
    finally:
        db.close()
    assert not home.exists()
    with pytest.raises(StoreDirectoryVanishedError):
        db.reopen()
    assert not home.exists()
    error = first.value
    assert isinstance(error, StoreReplacedError)
    assert error.directory == home and str(home) in str(error)
    # everything acknowledged is in the files the store wrote, which are whole
    assert oracle.missing(snapshot / "state.db") == []
    assert_sound(snapshot / "state.db")
    assert_no_strays(profiles)  # nothing re-created
    assert_no_strays(snapshot)
    # a first open of the path is the caller's choice, and creates it as any new path
    SessionDB(path).close()
    assert path.is_file()
