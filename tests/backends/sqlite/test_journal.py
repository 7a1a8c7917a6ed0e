"""The journal mode a store gives its file (``backends.sqlite.files.journal``): from the
filesystem unless set explicitly; a file already in WAL is never switched live."""

from __future__ import annotations

import logging

import pytest

from hermes_store.backends.sqlite.files import journal
from hermes_store.backends.sqlite.library import connect
from hermes_store.errors import InvalidArgumentError



def _mountinfo(folder, fstype: str, source: str = "server:/export") -> str:
    return (f"1 0 0:1 / / rw - ext4 /dev/vda rw\n"
            f"2 1 0:2 / {folder} rw,relatime - {fstype} {source} rw\n")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(journal.ENV, raising=False)
    monkeypatch.setattr(journal, "_warned", set())


@pytest.mark.parametrize(("fstype", "mode"), [
    ("ext4", "wal"), ("virtiofs", "delete"), ("9p", "delete"), ("nfs4", "delete"),
    ("cifs", "delete"), ("fuse.sshfs", "delete"),
])
def test_the_filesystem_decides_by_default(tmp_path, fstype, mode):
    plan = journal.plan(tmp_path / "state.db", mountinfo=_mountinfo(tmp_path, fstype), kernel="")
    assert (plan.mode, plan.source, plan.explicit) == (mode, "filesystem", False)


def test_an_explicit_setting_wins_either_way(tmp_path, monkeypatch):
    network = _mountinfo(tmp_path, "nfs4")
    local = _mountinfo(tmp_path, "ext4")
    assert journal.plan(tmp_path, "WAL", mountinfo=network).mode == "wal"
    assert journal.plan(tmp_path, "delete", mountinfo=local).mode == "delete"
    monkeypatch.setenv(journal.ENV, "wal")
    got = journal.plan(tmp_path, mountinfo=network)
    assert (got.mode, got.source) == ("wal", "environment")
    got = journal.plan(tmp_path, "delete", mountinfo=network)  # the argument beats the env
    assert (got.mode, got.source) == ("delete", "argument")


@pytest.mark.parametrize("bad", ["truncate", "off", "wall"])
def test_other_modes_are_refused(tmp_path, monkeypatch, bad):
    with pytest.raises(InvalidArgumentError, match="'wal' or 'delete'"):
        journal.plan(tmp_path, bad)
    monkeypatch.setenv(journal.ENV, bad)
    with pytest.raises(InvalidArgumentError, match=journal.ENV):
        journal.plan(tmp_path)


def test_new_file_on_a_network_mount_gets_delete_with_one_warning(tmp_path, caplog):
    path = tmp_path / "state.db"
    plan = journal.plan(path, mountinfo=_mountinfo(tmp_path, "nfs4"), kernel="")
    caplog.set_level(logging.WARNING, logger="hermes_store.backends.sqlite")
    for _ in range(3):  # three connections, one warning
        conn = connect(path, isolation_level=None)
        assert journal.apply(conn, plan, path) == "delete"
        conn.close()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "journal_mode=DELETE" in warnings[0] and "nfs4" in warnings[0]
    assert str(path) in warnings[0] and journal.ENV in warnings[0]


def test_a_file_already_in_wal_is_not_downgraded(tmp_path, caplog):
    path = tmp_path / "state.db"
    conn = connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    plan = journal.plan(path, mountinfo=_mountinfo(tmp_path, "virtiofs", "mount0"), kernel="")
    caplog.set_level(logging.WARNING, logger="hermes_store.backends.sqlite")
    conn = connect(path, isolation_level=None)
    try:
        assert journal.apply(conn, plan, path) == "wal"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    (message,) = [r.getMessage() for r in caplog.records]
    assert "stays so" in message and "virtiofs" in message
    assert f"hermes-store --db {path} maintenance journal-mode delete" in message


def test_local_disk_switches_an_existing_delete_file_to_wal(tmp_path):
    path = tmp_path / "state.db"
    conn = connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    plan = journal.plan(path, mountinfo=_mountinfo(tmp_path, "ext4", "/dev/vdb"))
    conn = connect(path, isolation_level=None)
    try:
        assert journal.apply(conn, plan, path) == "wal"
    finally:
        conn.close()


def test_convert_switches_offline_and_refuses_while_another_connection_is_open(tmp_path):
    from hermes_store.errors import StoreInUseError

    path = tmp_path / "state.db"
    conn = connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(StoreInUseError, match="another connection has the file open"):
        journal.convert(path, "delete")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert journal.convert(path, "delete") == ("wal", "delete")
    assert journal.convert(path, "delete") == ("delete", "delete")
    assert not (tmp_path / "state.db-wal").exists()
    check = connect(path)
    try:
        assert check.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        check.close()
