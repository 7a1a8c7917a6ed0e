"""A new file at head in one step (D18) against the thirty-revision stairway.

The one-step file must be the stairway's file: the same ``sqlite_master`` (every
table, column, index, trigger, view and FTS object, with the same stored text, in the
same order), the same rows in every table (``alembic_version``, ``schema_version``,
``state_meta``, the FTS5 shadow tables and ``sqlite_sequence`` included), the same file
header settings; and the frozen statements (``backends/sqlite/migrate/head_schema.py``) must be
what the stairway leaves today, so a new revision cannot forget them. Every way a new
file is made (``SessionDB``, ``migrate.upgrade``, the CLI, processes racing) gives that
file; ``SessionDB`` never imports Alembic for it.
"""

from __future__ import annotations

import json
import os
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alembic import command
from support.migrations import REPO, connect_ro
from support import schema_dump

from hermes_store import migrate, revisions
from hermes_store.schema import FILE_IDENTITY_KEY
from hermes_store.backends.sqlite.migrate import create as head_create
from hermes_store.backends.sqlite.migrate import head_schema
from hermes_store.backends.sqlite.migrate.head import stamped_at_head
from hermes_store.revisions import upstream_version

HEAD_SCHEMA = Path(head_schema.__file__)
HOW_TO_UPDATE = (
    "hermes_store/backends/sqlite/migrate/head_schema.py is not what revisions 0001..head leave on "
    "an empty file. "
    "If a revision changed the head schema on purpose, regenerate it and review its diff:\n"
    "    HERMES_UPDATE_GOLDEN=1 python3 -m pytest tests/migrations/test_new_store.py"
)
PRAGMAS = ("page_size", "auto_vacuum", "journal_mode", "user_version", "application_id",
           "encoding", "freelist_count")


def stairway(path: Path) -> Path:
    """Every revision from an empty file to head, through Alembic and env.py."""
    command.upgrade(migrate.config(path), "head")
    return path


@pytest.fixture(scope="module")
def stairway_file(tmp_path_factory) -> Path:
    return stairway(tmp_path_factory.mktemp("stairway") / "state.db")


@pytest.fixture(scope="module")
def stairway_snapshot(stairway_file) -> dict:
    return snapshot(stairway_file)


def one_step(path: Path) -> Path:
    """An empty file given the head schema by head_create, WAL as the engine sets it."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        assert head_create.create(conn) is True
    conn.close()
    return path


def snapshot(path: Path) -> dict:
    """Everything a file is, schema-wise: sqlite_master as stored, every table's rows,
    the header settings. A store's file also has an identity of its own (a random
    ``application_id`` and the ``state_meta`` row that names it, issue 31): left out
    here, and read by :func:`identity_of`."""
    with connect_ro(path) as conn:
        master = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid").fetchall()
        rows = {
            name: sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr)
            for kind, name, _, _ in master if kind == "table"
            and not (conn.execute(f"SELECT sql FROM sqlite_master WHERE name = ?", (name,))
                     .fetchone()[0] or "").upper().startswith("CREATE VIRTUAL")
        }
        pragmas = {p: conn.execute(f"PRAGMA {p}").fetchone()[0] for p in PRAGMAS}
    rows["state_meta"] = [r for r in rows["state_meta"] if r[0] != FILE_IDENTITY_KEY]
    pragmas["application_id"] = 0
    return {"sqlite_master": master, "rows": rows, "pragmas": pragmas}


def identity_of(path: Path) -> int | None:
    """The file's identity: its ``application_id``, which ``state_meta`` must name too;
    None for a file without one (the stairway's)."""
    with connect_ro(path) as conn:
        header = conn.execute("PRAGMA application_id").fetchone()[0]
        named = conn.execute("SELECT value FROM state_meta WHERE key = ?",
                             (FILE_IDENTITY_KEY,)).fetchall()
    if header == 0 and not named:
        return None
    assert named == [(str(header),)] and header != 0, (header, named)
    return header


def test_the_frozen_head_schema_is_what_the_stairway_leaves(stairway_file):
    with connect_ro(stairway_file) as conn:
        statements, rows = head_create.objects(conn)
    if os.environ.get("HERMES_UPDATE_GOLDEN"):
        HEAD_SCHEMA.write_text(head_create.render(statements, rows, revisions.head()))
        return
    assert head_schema.REVISION == revisions.head() == migrate.head(), HOW_TO_UPDATE
    assert ("alembic_version", ("version_num",), (revisions.head(),)) in head_schema.ROWS
    missing = [s for s in statements if s not in head_schema.STATEMENTS]
    extra = [s for s in head_schema.STATEMENTS if s not in statements]
    assert not missing and not extra, (
        f"{HOW_TO_UPDATE}\nmissing: {missing}\nnot from the stairway: {extra}")
    assert head_schema.STATEMENTS == statements, f"{HOW_TO_UPDATE}\n(the order differs)"
    assert head_schema.ROWS == rows, HOW_TO_UPDATE


def test_a_one_step_file_is_the_stairways_file(stairway_file, tmp_path):
    made = one_step(tmp_path / "state.db")
    assert identity_of(made) is None and identity_of(stairway_file) is None
    want, got = snapshot(stairway_file), snapshot(made)
    assert got["sqlite_master"] == want["sqlite_master"]
    assert got["rows"] == want["rows"]
    assert got["pragmas"] == want["pragmas"]
    # and through the suite's schema dump, column positions, views' columns and FTS
    # options included
    options = dict(column_order=True, schema_only=False, ignore_meta=[], counts=True,
                   table_sql=True)
    assert schema_dump.diff(
        schema_dump._prepare(schema_dump.load(str(stairway_file)), **options),
        schema_dump._prepare(schema_dump.load(str(made)), **options)) == []


def test_a_one_step_file_is_at_head_for_every_reader(tmp_path):
    made = one_step(tmp_path / "state.db")
    assert stamped_at_head(made)
    assert migrate.current(made) == migrate.head()
    assert migrate.schema_version_of(made) == upstream_version(migrate.head())
    result = migrate.check(made)
    assert result.ok and result.drift == []


def test_a_one_step_file_downgrades_like_a_stairway_file(tmp_path):
    made = one_step(tmp_path / "one.db")
    climbed = stairway(tmp_path / "stairway.db")
    for path in (made, climbed):
        migrate.downgrade(path, "0022")
    assert snapshot(made)["sqlite_master"] == snapshot(climbed)["sqlite_master"]
    for path in (made, climbed):
        migrate.upgrade(path)
    assert snapshot(made)["sqlite_master"] == snapshot(climbed)["sqlite_master"]


def test_a_database_with_any_object_is_left_alone(tmp_path):
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    conn.close()
    before = path.read_bytes()
    with sqlite3.connect(path, isolation_level=None) as conn:
        assert head_create.create(conn) is False
        assert not conn.in_transaction
    conn.close()
    assert path.read_bytes() == before


def test_a_failing_statement_leaves_the_file_empty(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    broken = head_schema.STATEMENTS[:-3] + ("CREATE TRIGGER broken ON nowhere",)
    monkeypatch.setattr(head_schema, "STATEMENTS", broken)
    conn = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(sqlite3.Error):
        head_create.create(conn)
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    conn.close()
    monkeypatch.undo()
    one_step(path)  # and the file can still be created afterwards
    assert stamped_at_head(path)


def test_create_keeps_the_callers_transaction_mode(tmp_path):
    conn = sqlite3.connect(tmp_path / "state.db")  # the driver's default: implicit BEGIN
    assert head_create.create(conn) is True
    assert conn.isolation_level == "" and not conn.in_transaction
    conn.close()


# --------------------------------------------------------------------------- every way in


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
    assert identity_of(path) is not None  # a store's file, with an identity of its own


@pytest.mark.parametrize("how", ["missing", "zero bytes"])
def test_migrate_upgrade_of_a_new_file_is_the_stairways_file(tmp_path, how, stairway_snapshot):
    path = tmp_path / "state.db"
    if how == "zero bytes":
        path.touch(mode=0o600)
    steps = []
    assert migrate.upgrade(path, progress=lambda rev, what: steps.append(rev)) == migrate.head()
    assert steps == [migrate.head()]
    assert snapshot(path) == stairway_snapshot
    assert identity_of(path) is not None


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
    assert stamped_at_head(path)
    assert snapshot(path)["sqlite_master"] == stairway_snapshot["sqlite_master"]


def test_the_cli_creates_a_new_store_in_one_step(tmp_path, stairway_snapshot):
    path = tmp_path / "state.db"
    run = subprocess.run([sys.executable, "-m", "hermes_store", "--db", str(path), "db",
                          "upgrade", "--json"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["created"] and payload["to"] == migrate.head()
    assert snapshot(path) == stairway_snapshot
    assert identity_of(path) is not None


def test_a_file_with_objects_of_its_own_is_still_refused(tmp_path):
    from hermes_store.backends.sqlite.library import dbapi as _dbapi
    sqlite3 = _dbapi()

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
