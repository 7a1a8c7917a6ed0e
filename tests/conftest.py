"""Shared test fixtures: copies of the real upstream state.db files.

The originals under tests/data/fixtures are never opened: SQLite would create
-wal/-shm files beside them (their header says WAL). Every test gets its own copy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

# The throwaway PostgreSQL server and its per-test databases (tests/support/postgres.py);
# imported here so that every test module can use the fixtures.
from support.postgres import (  # noqa: F401
    mark_postgres_items,
    pg_empty_url,
    pg_server,
    pg_template,
    pg_url,
)

DATA = Path(__file__).parent / "data"
FIXTURES_DIR = DATA / "fixtures"
HEAD_REFERENCE = DATA / "head-v30-reference.schema.json"

#: every upstream-written fixture, oldest first: (file stem, stamped schema_version)
UPSTREAM_FIXTURES = [
    ("upstream-0.13.0-v11", 11),
    ("upstream-0.15.0-v13", 13),
    ("upstream-0.16.0-v14", 14),
    ("upstream-0.17.0-v16", 16),
    ("upstream-0.18.0-v17", 17),
    ("upstream-0.18.1-v19", 19),
    ("upstream-0.19.0-v22", 22),
    ("upstream-0.13.0-to-0.19.0-v22", 22),
]


def copy_fixture(stem: str, dest_dir: Path) -> Path:
    """Copy one fixture .db into dest_dir and return the copy's path."""
    dest = Path(dest_dir) / f"{stem}.db"
    shutil.copyfile(FIXTURES_DIR / f"{stem}.db", dest)
    dest.chmod(0o600)
    return dest


def fixture_contents(stem: str) -> dict:
    return json.loads((FIXTURES_DIR / f"{stem}.contents.json").read_text())


def fixture_schema(stem: str) -> dict:
    return json.loads((FIXTURES_DIR / f"{stem}.schema.json").read_text())


@pytest.fixture
def hermes_home(tmp_path, monkeypatch) -> Path:
    """An isolated $HERMES_HOME so no test touches the real ~/.hermes."""
    home = tmp_path / "hermes_home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture(params=[stem for stem, _ in UPSTREAM_FIXTURES])
def upstream_fixture(request, tmp_path) -> Path:
    """A private copy of each upstream fixture in turn."""
    return copy_fixture(request.param, tmp_path)


def pytest_collection_modifyitems(config, items):
    mark_postgres_items(items)
