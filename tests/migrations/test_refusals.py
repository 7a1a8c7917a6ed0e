"""Files we must not migrate: a clear error that says what is wrong and what to do,
and the file byte-for-byte unchanged."""

from __future__ import annotations

import contextlib
import os
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import threading

import pytest
from conftest import copy_fixture
from support.migrations import file_digest

from hermes_store import errors, migrate
from hermes_store.backends.sqlite.errors import sqlite_errors
from hermes_store.revisions import upstream_version


def _stamp_newer(db):
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (upstream_version(migrate.head()) + 1,))
    sqlite3.connect(db).close()  # last close checkpoints the WAL into the file


def test_a_file_from_a_newer_version_is_refused_untouched(tmp_path):
    db = copy_fixture("upstream-0.19.0-v22", tmp_path)
    _stamp_newer(db)
    before = file_digest(db)
    with pytest.raises(errors.SchemaTooNewError, match="newer Hermes") as caught:
        migrate.upgrade(db)
    assert "schema version 31" in str(caught.value) and "upgrade hermes_store" in str(caught.value)
    with pytest.raises(errors.SchemaTooNewError):
        migrate.current(db)
    assert file_digest(db) == before
    assert not os.path.exists(f"{db}.migrate.lock")  # refused before any file was made


def test_an_adopted_file_reopened_by_a_newer_upstream_is_refused(tmp_path):
    db = copy_fixture("upstream-0.19.0-v22", tmp_path)
    migrate.upgrade(db)
    _stamp_newer(db)  # newer upstream bumps schema_version, leaves alembic_version
    before = file_digest(db)
    with pytest.raises(errors.SchemaTooNewError):
        migrate.upgrade(db)
    assert file_digest(db) == before


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(b"this is a text file, not a database\n" * 200)
    before = file_digest(db)
    with pytest.raises(errors.NotADatabaseError, match="not a SQLite database") as caught:
        migrate.upgrade(db)
    assert "hermes-store recover" in str(caught.value)
    assert file_digest(db) == before


def test_a_damaged_file_is_refused_untouched(tmp_path):
    db = copy_fixture("upstream-0.16.0-v14", tmp_path)
    sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    raw = bytearray(db.read_bytes())
    raw[100:4096] = b"\xde\xad" * ((4096 - 100) // 2)  # page 1 after the header: sqlite_master
    db.write_bytes(bytes(raw))
    before = file_digest(db)
    with pytest.raises(errors.DatabaseDamagedError, match="damaged") as caught:
        migrate.upgrade(db)
    assert "hermes-store recover" in str(caught.value)
    assert file_digest(db) == before


def test_a_sqlite_file_of_another_program_is_refused(tmp_path):
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    before = file_digest(db)
    with pytest.raises(errors.NotADatabaseError, match="not a Hermes state.db"):
        migrate.upgrade(db)
    assert file_digest(db) == before


def test_a_locked_file_gives_a_busy_error_and_stays_unchanged(tmp_path):
    db = copy_fixture("upstream-0.18.1-v19", tmp_path)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        before = file_digest(db)
        with pytest.raises(errors.StoreBusyError, match="another process holds a write lock"):
            migrate.upgrade(db)
        assert file_digest(db) == before
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert migrate.current(db) == "0019"  # still un-adopted: nothing was half-written


@contextlib.contextmanager
def _read_only(path):
    """Make a file read-only even for root (CI runs as root, who ignores 0444):
    then the immutable attribute is the only thing that stops a write."""
    path.chmod(0o444)
    immutable = False
    try:
        if os.geteuid() == 0:
            if shutil.which("chattr") is None:
                pytest.skip("root, and no chattr to make a file immutable")
            done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
            if done.returncode != 0:
                pytest.skip(f"root, and chattr +i is refused here: {done.stderr!r}")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o600)


def test_a_read_only_file_is_refused_untouched(tmp_path):
    db = copy_fixture("upstream-0.17.0-v16", tmp_path)
    sqlite3.connect(db).close()
    before = file_digest(db)
    with _read_only(db):
        with pytest.raises(errors.DatabaseAccessError, match="read-only"):
            migrate.upgrade(db)
    assert file_digest(db) == before


def test_sqlite_read_only_errors_are_reported_as_access_errors(tmp_path):
    # The same mapping a read-only file gets from SQLite, produced for real (works as root).
    db = tmp_path / "ro.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    with pytest.raises(errors.DatabaseAccessError, match="read-only"):
        with sqlite_errors(db):
            conn.execute("INSERT INTO t VALUES (1)")
    conn.close()


def test_a_file_at_head_is_left_alone_even_when_read_only(tmp_path):
    db = tmp_path / "state.db"
    migrate.upgrade(db)
    before = file_digest(db)
    assert migrate.upgrade(db) == migrate.head()
    assert file_digest(db) == before


def _overwrite_data_pages(path, count=3):
    """Random bytes over a few pages past the schema: sqlite_master still reads, the
    tables do not — the damage upstream files really show after a torn write."""
    import random

    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    pages = len(data) // page
    rng = random.Random(7)
    for n in range(pages // 2, pages // 2 + count):
        data[n * page:(n + 1) * page] = rng.randbytes(page)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("entry", ["migrate", "sessiondb"])
def test_a_damaged_upstream_file_is_refused_before_adoption_writes(tmp_path, entry):
    from conftest import copy_fixture

    from hermes_store import SessionDB

    path = copy_fixture("upstream-0.19.0-v22", tmp_path)
    _overwrite_data_pages(path)
    before = file_digest(path)
    with pytest.raises(errors.DatabaseDamagedError, match="hermes-store recover"):
        if entry == "migrate":
            migrate.upgrade(path)
        else:
            SessionDB(path)
    assert file_digest(path) == before
