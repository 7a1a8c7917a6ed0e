"""Shared by the CLI tests: stores at head made once per session, a CliRunner wrapper,
row dumps for exact comparisons, and the 80-column check.

Import the fixtures into a test module with ``from support.cli import *``.

``store``, ``native_store`` and ``empty_store`` are on each engine in turn: a test that
asks for one runs twice (``backend`` is parametrized by ``tests/conftest.py``),
``[sqlite]`` on a copy of a head file and ``[postgresql]`` on a database at head on
the suite's throwaway server (``pg_url``) holding the same sessions (imported from the
0.19.0 fixture's export, as ``native_store`` is on SQLite). Either is handed to the
CLI as ``--db`` (a path, or a URL). A test about SQLite files (backups, WAL, raw
``sqlite3``) says so with ``@pytest.mark.sqlite_only("why")``.
"""

from __future__ import annotations

import json
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
from pathlib import Path

import pytest
from conftest import copy_fixture
from rich.cells import cell_len
from typer.testing import CliRunner

from hermes_store import SessionDB, migrate, transfer
from hermes_store.cli import app

__all__ = [
    "head_templates",
    "backend",
    "store",
    "empty_store",
    "native_store",
    "pg_store",
    "is_url",
    "cli",
    "copy_db",
    "rows",
    "assert_fits",
    "parse_json",
    "flat",
    "WIDTH",
    "RICH_STORE",
]

WIDTH = 80
#: the fixture with the most variety (lineage, CJK, tool calls, usage rows)
RICH_STORE = "upstream-0.19.0-v22"


def copy_db(src: Path, dest: Path) -> Path:
    """Copy a database file with its WAL (if any) so the copy is the same database."""
    shutil.copyfile(src, dest)
    wal = Path(f"{src}-wal")
    if wal.exists():
        shutil.copyfile(wal, Path(f"{dest}-wal"))
    dest.chmod(0o600)
    return dest


@pytest.fixture(scope="session")
def head_templates(tmp_path_factory) -> dict[str, Path]:
    """Upgrading runs thirty revisions with fsyncs: do it once per session, copy after."""
    folder = tmp_path_factory.mktemp("cli-templates")
    rich = copy_fixture(RICH_STORE, folder)
    migrate.upgrade(rich)
    empty = folder / "empty.db"
    migrate.upgrade(empty)
    # The same rows in a file the migrations created (not adopted): schema checks that
    # must pass on any head file use this one.
    native = copy_db(empty, folder / "native.db")
    export = folder / "rich.jsonl"
    with open(export, "w", encoding="utf-8") as fh:
        transfer.write_export(rich, fh, "jsonl")
    transfer.import_file(native, export)
    return {"rich": rich, "empty": empty, "native": native, "export": export}


@pytest.fixture
def backend(request) -> str:
    """The engine under test: "sqlite" or "postgresql" (parametrized by conftest)."""
    return getattr(request, "param", "sqlite")


def _database_at_head(request) -> str:
    """A PostgreSQL database of its own at head (a test may ask for several stores),
    given back to the template's pool after the test."""
    server, template = request.getfixturevalue("pg_server"), request.getfixturevalue("pg_template")
    name = template.take()
    request.addfinalizer(lambda: template.give_back(name))
    return server.url(name)


def _imported_database(request, head_templates) -> str:
    """A PostgreSQL database at head holding the 0.19.0 fixture's sessions: its export
    imported, exactly as ``native_store`` was made on SQLite."""
    url = _database_at_head(request)
    with SessionDB(url) as db:
        transfer.import_file(db, head_templates["export"])
    return url


@pytest.fixture
def store(request, backend, head_templates, tmp_path) -> Path | str:
    """A private head store holding the 0.19.0 fixture's sessions (SQLite: the adopted
    upstream file itself)."""
    if backend == "postgresql":
        return _imported_database(request, head_templates)
    return copy_db(head_templates["rich"], tmp_path / "state.db")


@pytest.fixture
def native_store(request, backend, head_templates, tmp_path) -> Path | str:
    """The 0.19.0 fixture's rows imported into a store the migrations created."""
    if backend == "postgresql":
        return _imported_database(request, head_templates)
    return copy_db(head_templates["native"], tmp_path / "native.db")


@pytest.fixture
def empty_store(request, backend, head_templates, tmp_path) -> Path | str:
    if backend == "postgresql":
        return _database_at_head(request)
    return copy_db(head_templates["empty"], tmp_path / "empty.db")


@pytest.fixture
def pg_store(request, head_templates) -> str:
    """``store``'s PostgreSQL database, for tests that compare it with a file."""
    return _imported_database(request, head_templates)


def is_url(db) -> bool:
    return isinstance(db, str) and "://" in db


class Cli:
    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, db: Path | None, *args: str, input: str | None = None, env: dict | None = None):
        argv = (["--db", str(db)] if db is not None else []) + [str(a) for a in args]
        result = self.runner.invoke(
            app, argv, input=input, env={"COLUMNS": str(WIDTH), "NO_COLOR": "1", **(env or {})}
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result


@pytest.fixture
def cli() -> Cli:
    return Cli()


def parse_json(result) -> dict:
    """stdout of a --json run: exactly one JSON document."""
    return json.loads(result.stdout)


def flat(text: str) -> str:
    """Text with line wrapping undone (rich wraps messages at 80 columns, and the
    temporary paths in them differ in length from run to run)."""
    return " ".join(text.split())


def assert_fits(text: str, width: int = WIDTH) -> None:
    wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not wide, f"lines wider than {width} columns: {wide[:3]}"


def rows(db: Path | str, table: str, order: str) -> list[dict]:
    """Every row of ``table`` as dicts (all columns), in ``order``: read with sqlite3 from
    a file, or through the store's own engine from a PostgreSQL URL (so text comes back
    decoded from the NUL encoding), without PostgreSQL's full-text columns, which a
    file does not have."""
    if is_url(db):
        import sqlalchemy as sa

        from hermes_store import location
        from hermes_store.backends.postgresql import engine as postgres
        from hermes_store.backends.postgresql.fts.ddl import is_fts_object

        engine = postgres.create_engine(location.resolve(db), poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                result = conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY {order}")
                return [{k: v for k, v in r._mapping.items() if not is_fts_object(k)}
                        for r in result]
        finally:
            engine.dispose()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
    finally:
        conn.close()
