"""Issue 5, item 7: a full disk gives a clear StoreFullError, the unit is rolled back
whole, and the store works again once there is room.

The disk is "filled" with SQLite's per-connection ``PRAGMA max_page_count``, applied to
every connection the store opened (a SQLAlchemy pool event records them, so the store's
own code path is exercised unchanged). The store keeps its connections checked out
(one per thread), so the limit is set on them when the disk "fills", not at checkout.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from support import reliability as rs
from hermes_store import SessionDB
from hermes_store.errors import StoreFullError

NO_LIMIT = 1073741823  # SQLite's default max_page_count


class DiskFull:
    """While `full` is set, no connection of this process may grow the file."""

    def __init__(self):
        self._full = False
        self.connections = []

    def on_connect(self, dbapi_conn, _record):
        self.connections.append(dbapi_conn)
        self._limit(dbapi_conn)

    @property
    def full(self) -> bool:
        return self._full

    @full.setter
    def full(self, value: bool) -> None:
        self._full = value
        for conn in self.connections:
            self._limit(conn)

    def _limit(self, dbapi_conn) -> None:
        try:
            cur = dbapi_conn.cursor()
        except sqlite3.ProgrammingError:
            return  # a connection closed meanwhile (the open's probes, the pool's)
        try:
            if self._full:
                pages = cur.execute("PRAGMA page_count").fetchone()[0]
                cur.execute(f"PRAGMA max_page_count = {pages}")
            else:
                cur.execute(f"PRAGMA max_page_count = {NO_LIMIT}")
        finally:
            cur.close()


@pytest.fixture
def disk():
    state = DiskFull()
    event.listen(Pool, "connect", state.on_connect)
    try:
        yield state
    finally:
        event.remove(Pool, "connect", state.on_connect)


def test_full_disk_is_a_clear_error_and_rolls_the_unit_back(tmp_path, disk):
    path = rs.fresh_store_file(tmp_path / "state.db")
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        first = db.append_message("s", role="user", content="before the disk filled")

        disk.full = True
        big = "no room for this " * 20_000
        calls = [{"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}]
        with pytest.raises(StoreFullError) as excinfo:
            db.append_message("s", role="assistant", content=big, tool_calls=calls)
        assert "full" in str(excinfo.value).lower()
        with pytest.raises(StoreFullError):
            db.create_session("s2", source="cli", system_prompt="prompt " * 50_000)

        # Nothing of either unit is in the file: no row, no counter bump, no session.
        session = db.get_session("s")
        assert (session["message_count"], session["tool_call_count"]) == (1, 0)
        assert [m["id"] for m in db.get_messages("s")] == [first]
        assert db.get_session("s2") is None

        disk.full = False
        second = db.append_message("s", role="assistant", content=big, tool_calls=calls)
        assert second > first
        assert db.get_session("s")["tool_call_count"] == 1
        assert [h["id"] for h in db.search_messages("room")] == [second]
    rs.assert_store_whole(path)


@pytest.fixture
def small_disk(tmp_path):
    """A real 3 MB filesystem (tmpfs; mounting needs root)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs",
                              str(root)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed: {mounted.stderr.strip()}")
    yield root
    subprocess.run(["umount", "-l", str(root)], check=True)


def test_a_real_full_disk_leaves_the_store_usable(small_disk):
    """The filesystem itself runs out (the log cannot grow at COMMIT): every call gets
    ``StoreFullError`` while it is full — never SQLAlchemy's bare ``PendingRollbackError``
    from the transaction the failed COMMIT left behind — and calls that need no new
    space succeed at once; everything acknowledged is in the file."""
    path = small_disk / "state.db"
    acknowledged = []
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        with pytest.raises(StoreFullError):
            for i in range(1000):
                acknowledged.append(db.append_message("s", "user", "x" * 20000 + str(i)))
        assert acknowledged
        for call in (lambda: db.replace_messages("s", [{"role": "user", "content": "y" * 90000}]),
                     lambda: db.append_message("s", "user", "z" * 90000)):
            with pytest.raises(StoreFullError):
                call()
        db.create_session("t", "cli")  # fits in the space the log already has
        assert db.get_session("t")["id"] == "t"
    conn = rs.raw_connect(path)
    try:
        ids = {r[0] for r in conn.execute("SELECT id FROM messages")}
    finally:
        conn.close()
    assert set(acknowledged) <= ids
    assert rs.sqlite_integrity(path) == []
