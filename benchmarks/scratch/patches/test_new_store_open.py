"""(Draft, moved to tests/migrations/ with the wiring.) Every way a new file is made
gives the stairway's file: SessionDB, migrate.upgrade, the CLI; concurrent creators."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_new_store import snapshot, stairway

from hermes_store import migrate, revisions
from hermes_store.migrations import helpers  # noqa: F401  (the package is importable)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stairway_snapshot(tmp_path_factory) -> dict:
    return snapshot(stairway(tmp_path_factory.mktemp("stairway") / "state.db"))


def _child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_a_new_store_is_the_stairways_file_and_never_imports_alembic(tmp_path, stairway_snapshot):
    path = tmp_path / "home" / "state.db"
    run = _child("""
        import json, sys
        from hermes_store import SessionDB
        db = SessionDB(sys.argv[1])
        db.create_session("s1", "cli")
        db.close()
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("alembic", "mako"))))
    """, str(path))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []
    got = snapshot(path)
    rows = dict(got["rows"])
    assert rows.pop("sessions") and stairway_snapshot["rows"]["sessions"] == []
    want = dict(stairway_snapshot["rows"])
    want.pop("sessions")
    assert got["sqlite_master"] == stairway_snapshot["sqlite_master"]
    assert {k: v for k, v in rows.items() if not k.startswith("messages_fts")} == \
        {k: v for k, v in want.items() if not k.startswith("messages_fts")}
    assert got["pragmas"] == stairway_snapshot["pragmas"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("how", ["missing", "zero bytes"])
def test_migrate_upgrade_of_a_new_file_is_the_stairways_file(tmp_path, how, stairway_snapshot):
    path = tmp_path / "state.db"
    if how == "zero bytes":
        path.touch(mode=0o600)
    steps = []
    assert migrate.upgrade(path, progress=lambda rev, what: steps.append(rev)) == migrate.head()
    assert steps == [migrate.head()]
    assert snapshot(path) == stairway_snapshot


def test_an_upgrade_of_a_new_file_to_an_older_revision_runs_the_revisions(tmp_path):
    path = tmp_path / "state.db"
    assert migrate.upgrade(path, "0022") == "0022"
    assert migrate.schema_version_of(path) == 22
    assert migrate.upgrade(path) == migrate.head()


def test_many_processes_creating_one_new_store_at_once(tmp_path, stairway_snapshot):
    path = tmp_path / "state.db"
    code = """
        import sys
        from hermes_store import SessionDB
        SessionDB(sys.argv[1]).close()
    """
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(path)],
                              cwd=REPO, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "alembic", "-x", f"db={path}", "upgrade", "head"],
        cwd=REPO, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    assert revisions.stamped_at_head(path)
    assert snapshot(path)["sqlite_master"] == stairway_snapshot["sqlite_master"]


def test_the_cli_creates_a_new_store_in_one_step(tmp_path, stairway_snapshot):
    path = tmp_path / "state.db"
    run = subprocess.run([sys.executable, "-m", "hermes_store", "--db", str(path), "db",
                          "upgrade", "--json"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["created"] and payload["to"] == migrate.head()
    assert snapshot(path) == stairway_snapshot


def test_a_file_with_objects_of_its_own_is_still_refused(tmp_path):
    import sqlite3

    from hermes_store import SessionDB
    from hermes_store.errors import NotADatabaseError

    path = tmp_path / "state.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    conn.close()
    with pytest.raises(NotADatabaseError):
        SessionDB(path)
    assert [r[0] for r in sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master")] == ["notes"]


def test_read_only_and_auto_upgrade_false_never_create_a_file(tmp_path):
    from hermes_store import SessionDB
    from hermes_store.errors import SchemaOutOfDateError, StoreNotFoundError

    with pytest.raises(StoreNotFoundError):
        SessionDB(tmp_path / "a.db", read_only=True)
    with pytest.raises(SchemaOutOfDateError):
        SessionDB(tmp_path / "b.db", auto_upgrade=False)
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()
    empty = tmp_path / "c.db"
    empty.touch()
    with pytest.raises(SchemaOutOfDateError):
        SessionDB(empty, auto_upgrade=False)
    assert empty.stat().st_size == 0
