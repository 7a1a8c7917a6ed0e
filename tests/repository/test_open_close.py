"""Opening and closing SessionDB: paths, permissions, refusals (SQLite files), read-only
and close (both engines); PostgreSQL's own opening cases are in
``tests/backends/postgresql/test_store.py``."""

from __future__ import annotations

import hashlib
import os
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import stat

import pytest

from hermes_store import (
    NotADatabaseError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    SessionDB,
    StoreClosedError,
    UnsafePathError,
)
from hermes_store.errors import StoreNotFoundError, StoreReadOnlyError
from conftest import copy_fixture
from support.repository import copy_head, backend, db, db_path, db_target  # noqa: F401
from hermes_store import revisions


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_default_path_follows_hermes_home_at_call_time(hermes_home, monkeypatch, tmp_path):
    with SessionDB() as db:
        db.create_session("s", "cli")
        assert db.db_path == hermes_home / "state.db"
    other = tmp_path / "elsewhere" / "deeper"
    monkeypatch.setenv("HERMES_HOME", str(other))
    with SessionDB() as db:  # folder created on demand
        assert db.db_path == other / "state.db" and db.get_session("s") is None


def test_new_file_and_sidecars_are_private(tmp_path):
    db_path = tmp_path / "fresh" / "state.db"
    old = os.umask(0o022)
    try:
        db = SessionDB(db_path)
        db.create_session("s", "cli")
        sidecars = [p for p in (db_path, db_path.with_name("state.db-wal"),
                                db_path.with_name("state.db-shm")) if p.exists()]
        assert len(sidecars) == 3  # WAL mode, connection still open
        assert {_mode(p) for p in sidecars} == {0o600}
        db.close()
    finally:
        os.umask(old)


def test_symlink_at_the_path_is_refused(tmp_path):
    target = copy_head(tmp_path / "victim.db")
    before = _digest(target)
    link = tmp_path / "state.db"
    link.symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        SessionDB(link)
    wal_link = tmp_path / "other.db-wal"
    wal_link.symlink_to(tmp_path / "anything")
    with pytest.raises(UnsafePathError):
        SessionDB(tmp_path / "other.db")
    assert _digest(target) == before


def test_not_a_database_is_refused_untouched(tmp_path):
    junk = tmp_path / "state.db"
    junk.write_bytes(b"this is a text file, not SQLite\n" * 200)
    before = _digest(junk)
    with pytest.raises(NotADatabaseError, match="hermes-store recover"):
        SessionDB(junk)
    assert _digest(junk) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]


def test_read_only(db_target):
    with SessionDB(db_target) as db:
        db.create_session("s", "cli")
        db.set_session_title("s", "Kept")
    ro = SessionDB(db_target, read_only=True)
    assert ro.get_session_title("s") == "Kept"
    assert [r["id"] for r in ro.list_sessions_rich()] == ["s"]
    with pytest.raises(StoreReadOnlyError, match="read_only=True"):
        ro.set_session_title("s", "Changed")
    with pytest.raises(StoreReadOnlyError):
        ro.create_session("t", "cli")
    ro.close()
    with SessionDB(db_target) as db:
        assert db.get_session_title("s") == "Kept" and db.get_session("t") is None


def test_read_only_missing_file(tmp_path):
    with pytest.raises(StoreNotFoundError, match="does not exist") as err:
        SessionDB(tmp_path / "nope.db", read_only=True)
    assert isinstance(err.value, FileNotFoundError)
    assert not (tmp_path / "nope.db").exists()


def test_auto_upgrade_off_refuses_missing_file(tmp_path):
    with pytest.raises(SchemaOutOfDateError, match="hermes-store db upgrade"):
        SessionDB(tmp_path / "new.db", auto_upgrade=False)
    assert not (tmp_path / "new.db").exists()


def test_auto_upgrade_off_refuses_an_older_file(tmp_path):
    old = copy_fixture("upstream-0.19.0-v22", tmp_path)
    before = _digest(old)
    with pytest.raises(SchemaOutOfDateError, match=r"upgrade head"):
        SessionDB(old, auto_upgrade=False)
    with pytest.raises(SchemaOutOfDateError):
        SessionDB(old, read_only=True)
    assert _digest(old) == before


def test_newer_schema_is_refused_untouched(db_path):
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE schema_version SET version = 31")
        raw.execute("DELETE FROM alembic_version")
    raw.close()
    before = _digest(db_path)
    with pytest.raises(SchemaTooNewError):
        SessionDB(db_path)
    assert _digest(db_path) == before


def test_close_is_idempotent_and_every_call_after_it_fails_clearly(db_target):
    db = SessionDB(db_target)
    db.create_session("s", "cli")
    db.close()
    db.close()
    assert db.closed
    calls = [
        lambda: db.get_session("s"),
        lambda: db.create_session("x", "cli"),
        lambda: db.update_session_cwd("s", ""),  # would return early when open
        lambda: db.record_auxiliary_usage("", ""),
        lambda: db.list_sessions_rich(),
        lambda: db.set_meta("k", "v"),
        lambda: db.try_acquire_compression_lock("s", "h"),
        lambda: db.maybe_auto_prune_and_vacuum(),
        lambda: db.__enter__(),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError, match="store closed"):
            call()
    assert SessionDB.sanitize_title(" ok ") == "ok"  # static helpers stay usable


def test_close_checkpoints_and_data_survives(db_path):
    with SessionDB(db_path) as db:
        for i in range(20):
            db.create_session(f"s{i}", "cli")
    wal = db_path.with_name("state.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0 or _frames_checkpointed(db_path)
    with SessionDB(db_path) as db:
        assert db.session_count() == 20


def _frames_checkpointed(path) -> bool:
    with sqlite3.connect(path) as raw:
        busy, log_frames, done = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    raw.close()
    return log_frames == done


def test_maintenance_calls(db):
    db.create_session("s", "cli")
    from support.repository import add_message, fts_hits
    add_message(db, "s", "user", "maintenanceword")
    assert db.rebuild_fts() >= 2
    assert db.optimize_fts() >= 2
    assert db.fts_integrity_check() == []
    assert db.vacuum() >= 2
    assert fts_hits(db, "maintenanceword") == 1


def test_maybe_auto_prune_and_vacuum(db):
    first = db.maybe_auto_prune_and_vacuum()
    assert first == {"skipped": False, "pruned": 0, "vacuumed": False}
    assert db.maybe_auto_prune_and_vacuum()["skipped"] is True
    db.set_meta("last_auto_prune", "garbage")
    db.create_session("old", "cli")
    db.end_session("old", "done")
    from support.repository import set_fields
    set_fields(db, "old", started_at=1.0)
    result = db.maybe_auto_prune_and_vacuum()
    assert (result["skipped"], result["pruned"]) == (False, 1)
    # a VACUUM only when the engine finds it worth it (SQLite: enough free pages;
    # tests/faults/test_concurrent_maintenance.py)
    assert result["vacuumed"] or "VACUUM skipped" in result["reason"]


# --------------------------------------------------------------------------- cold start

_OPEN_AND_READ = """
import sys
from hermes_store import SessionDB
with SessionDB(sys.argv[1]) as db:
    print(db.get_session("s")["source"])
print(",".join(sorted(m for m in ("alembic", "mako", "psycopg", "hermes_store.backends.postgresql")
                     if m in sys.modules)))
"""


def _open_in_child(path) -> list[str]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _OPEN_AND_READ, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


def test_opening_a_file_at_head_does_not_import_alembic(db_path):
    # nor the PostgreSQL side: psycopg and hermes_store.backends.postgresql stay unloaded
    with SessionDB(db_path) as store:
        store.create_session("s", "cli")
    assert _open_in_child(db_path) == ["cli", ""]


def test_a_file_below_head_is_still_upgraded_on_open(tmp_path):
    path = copy_fixture("upstream-0.19.0-v22", tmp_path)
    with SessionDB(path) as store:
        store.create_session("s", "cli")
    # the upgrade ran in this process; a second open finds the file at head
    assert _open_in_child(path) == ["cli", ""]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(revisions.head(),)]
    finally:
        conn.close()


def test_a_head_stamp_with_a_newer_schema_version_is_refused_not_opened(db_path):
    # upstream Hermes of a later schema wrote its version into a file we stamped head
    with SessionDB(db_path):
        pass
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNewError):
        SessionDB(db_path)


_COLLECTOR_AFTER_IMPORT = """
import gc, sys
if sys.argv[1] == "off":
    gc.disable()
from hermes_store import SessionDB
print(gc.isenabled(), gc.get_freeze_count())
"""


@pytest.mark.parametrize("host_setting", ["on", "off"])
def test_importing_the_store_leaves_the_host_collector_as_it_was(host_setting):
    # the cyclic collector is paused only while the store's modules load
    # (hermes_store.startup); nothing is frozen in a host's process
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _COLLECTOR_AFTER_IMPORT, host_setting],
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [str(host_setting == "on"), "0"]


def test_the_collector_is_restored_when_the_paused_block_raises():
    import gc

    from hermes_store.startup import collector_paused

    assert gc.isenabled()
    with pytest.raises(ImportError):
        with collector_paused():
            assert not gc.isenabled()
            raise ImportError("a module failed to load")
    assert gc.isenabled()
