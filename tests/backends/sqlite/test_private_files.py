"""Issue 5, item 8: conversation history is private to its owner, and a symlink planted
at the database path is refused.

The database and its -wal/-shm sidecars are created mode 0600 whatever the umask (the
test runs with umask 000, the worst case). A symlink at the database path could point
the store at another user's file or make it write somewhere unexpected: refused with
UnsafePathError, the target untouched.
"""

from __future__ import annotations

import os

import pytest

from support import reliability as rs
from hermes_store import SessionDB
from hermes_store.errors import UnsafePathError


@pytest.fixture
def open_umask():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_database_and_sidecars_are_created_0600(tmp_path, open_umask):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", role="user", content="private")
        for file in (path, f"{path}-wal", f"{path}-shm"):
            assert os.path.exists(file), f"{file} missing (is the store in WAL mode?)"
            assert rs.mode_of(file) == 0o600, f"{file} is {oct(rs.mode_of(file))}"


def test_existing_world_readable_file_is_tightened_to_0600(tmp_path, open_umask):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    os.chmod(path, 0o644)
    with SessionDB(path) as db:
        db.append_message("s", role="user", content="private")
        for file in (path, f"{path}-wal", f"{path}-shm"):
            assert rs.mode_of(file) == 0o600, f"{file} is {oct(rs.mode_of(file))}"


def test_symlink_to_another_database_is_refused(tmp_path):
    target = tmp_path / "elsewhere" / "victim.db"
    target.parent.mkdir()
    with SessionDB(target) as db:
        db.create_session("victim", source="cli")
    before = rs.fingerprint(target)
    link = tmp_path / "home" / "state.db"
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(UnsafePathError) as excinfo:
        SessionDB(link)
    assert "symlink" in str(excinfo.value).lower()
    assert rs.fingerprint(target) == before
    assert not os.path.exists(f"{target}-wal")


def test_dangling_symlink_is_refused_and_nothing_is_created(tmp_path):
    target = tmp_path / "not-yet" / "planted.db"
    target.parent.mkdir()
    link = tmp_path / "state.db"
    link.symlink_to(target)
    with pytest.raises(UnsafePathError):
        SessionDB(link)
    assert not target.exists()
    with pytest.raises(UnsafePathError):
        SessionDB(link, read_only=True)


def test_symlinked_home_directory_is_fine(tmp_path):
    """Only the database path itself is checked: ~/.hermes on another disk via a
    symlinked directory is an ordinary setup."""
    real_home = tmp_path / "disk2" / "hermes"
    real_home.mkdir(parents=True)
    home = tmp_path / ".hermes"
    home.symlink_to(real_home, target_is_directory=True)
    with SessionDB(home / "state.db") as db:
        db.create_session("s", source="cli")
    assert (real_home / "state.db").exists()
