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
from support.pgbouncer import (  # noqa: F401
    POOLER_BACKENDS,
    POOLER_SUBSET,
    POOLER_SUITES,
    pgbouncer,
    pgbouncer_session,
    pgbouncer_transaction,
    pooler_mode,
    pooler_url,
    suite_test_name,
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


#: the engines a test that asks for ``backend`` (``db``) runs on, in this order
BACKENDS = ("sqlite", "postgresql")


def pytest_addoption(parser):
    parser.addoption(
        "--poolers", action="store_true", default=False,
        help="run every engine-parametrized test of tests/repository and tests/reliability "
             "through PgBouncer in transaction and in session mode too (by default only "
             "the named subset, support/pgbouncer.POOLER_SUBSET)")
    parser.addoption(
        "--host-sqlite", action="store_true", default=False,
        help="after every public call a test makes on a store over a SQLite file, the "
             "standard library's sqlite3 opens the file, writes and closes it, as a host's "
             "own code would (support/host_sqlite.py; issue 30, D19); tests marked "
             "no_host_sqlite('why') run without it")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "no_host_sqlite(reason): cannot run beside a host writer; --host-sqlite "
                   "leaves it alone")


@pytest.fixture(autouse=True)
def _host_sqlite(request, monkeypatch):
    """``--host-sqlite``: a host's ``sqlite3`` writes the store's file between calls."""
    if request.config.getoption("--host-sqlite") \
            and request.node.get_closest_marker("no_host_sqlite") is None:
        from support import host_sqlite

        host_sqlite.install(monkeypatch)
    yield


_subset_seen: set[str] = set()


def pytest_generate_tests(metafunc):
    """Run every test that uses the ``backend`` fixture (the repository's ``db``) on
    both engines; ``@pytest.mark.sqlite_only("why")`` keeps a test about SQLite files
    on SQLite. A test that asks for ``db_path`` (the file behind ``db``) must say so.
    Tests of the repository and reliability suites named in ``POOLER_SUBSET`` (all of
    them with ``--poolers``) also run through PgBouncer in both pool modes."""
    if "backend" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("sqlite_only") is not None:
        backends = ["sqlite"]
    elif "db_path" in metafunc.fixturenames:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} uses db_path (a SQLite file) with db, which "
            "runs on PostgreSQL too: read through the store, or mark the test "
            "@pytest.mark.sqlite_only('why')"
        )
    else:
        backends = list(BACKENDS)
        name = suite_test_name(metafunc.definition)
        if name in POOLER_SUBSET:
            _subset_seen.add(name)
        if name in POOLER_SUBSET or (metafunc.config.getoption("--poolers")
                                     and name.split("/", 1)[0] in POOLER_SUITES):
            backends += POOLER_BACKENDS
    metafunc.parametrize("backend", backends, indirect=True)


#: the named subset that also runs on the opt-in library, pysqlite3 (SQLite 3.53.4, decision
#: D19): ``scripts/test.sh`` runs it with
#: ``HERMES_STATE_SQLITE_MODULE=pysqlite3 pytest -m "pysqlite3_leg and not postgres"``
#: (every test runs on the default library, the standard library's sqlite3). Opening and
#: writing, search on FTS5/trigram, processes writing at once, crashes, adopting upstream
#: files, doctor/status, and every test of ``SQLITE_TESTS`` (WAL and checkpoints, damaged
#: files, the FTS5 layout, the library, files and their paths).
LIBRARY_SUBSET = {
    "tests/repository/test_open_close.py",
    "tests/repository/test_concurrency.py",
    "tests/repository/test_messages.py",
    "tests/repository/test_search_sanitizer.py",
    "tests/reliability/test_load.py",
    "tests/reliability/test_crash.py",
    "tests/migrations/test_adoption.py",
    "tests/cli/test_cli_search_maintenance.py",
}
#: the SQLite engine's own tests, all of them in the pysqlite3 leg
SQLITE_TESTS = "tests/backends/sqlite/"


def pytest_report_header(config):
    from hermes_store.backends.sqlite.library import library

    return f"SQLite library: {library().describe()} ({library().chosen_by})"


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).parent.parent
    for item in items:
        try:
            where = Path(item.fspath).relative_to(root).as_posix()
        except ValueError:
            where = ""
        if where in LIBRARY_SUBSET or where.startswith(SQLITE_TESTS):
            item.add_marker(pytest.mark.pysqlite3_leg)
    collected = {suite_test_name(item) for item in items if hasattr(item, "originalname")}
    vanished = sorted(n for n in POOLER_SUBSET
                      if n not in _subset_seen and n.split("::")[0] in
                      {c.split("::")[0] for c in collected})
    if vanished:  # renamed or removed: the pooler subset would shrink silently
        raise pytest.UsageError(
            "support/pgbouncer.POOLER_SUBSET names tests that do not exist (or no longer "
            f"run on both engines): {', '.join(vanished)}")
    engines = {"postgresql", *POOLER_BACKENDS}
    for item in items:  # the [postgresql] (and pooler) runs of engine-parametrized tests
        callspec = getattr(item, "callspec", None)
        if callspec is not None and engines & {v for v in callspec.params.values()
                                                if isinstance(v, str)}:
            item.add_marker(pytest.mark.postgres)
    mark_postgres_items(items)
