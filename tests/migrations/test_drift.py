"""Head drift: the schema revisions 0001..head build against hermes_store.schema and the
head reference. (What autogenerate cannot see — FTS, views, triggers, stored text — is
held by ``tests/migrations/test_new_store.py``: the stairway's ``sqlite_master`` equals
the frozen head schema, ``backends/sqlite/migrate/head_schema.py``, byte for byte.)"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from support.migrations import schema_diff

from hermes_store import migrate
from hermes_store.backends.sqlite.engine import create_engine
from hermes_store.backends.sqlite.migrate import check as sqlite_check

HEAD_REFERENCE = Path(__file__).parents[1] / "data" / "head-v30-reference.schema.json"


@pytest.fixture(scope="module")
def head_file(tmp_path_factory):
    """Every revision from an empty file (``migrate.upgrade`` would create a new file at
    head in one step)."""
    path = tmp_path_factory.mktemp("drift") / "state.db"
    command.upgrade(migrate.config(path), "head")
    return path


def test_core_metadata_matches_the_migrated_file(head_file):
    from hermes_store.schema import metadata

    engine = create_engine(head_file, read_only=True, journal_mode=None)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"include_name": sqlite_check.include_name, "compare_type": True}
            )
            with warnings.catch_warnings():  # expression indexes: test_new_store's job
                warnings.filterwarnings("ignore", message=".*expression-based index")
                differences = compare_metadata(ctx, metadata)
    finally:
        engine.dispose()
    assert differences == [], (
        "hermes_store.schema and revisions 0001..head disagree; a schema change needs both "
        f"a revision and the Core declaration:\n{differences}"
    )


def test_check_reports_a_migrated_file_as_clean(head_file):
    result = migrate.check(head_file)
    assert result.at_head and result.drift == [] and result.ok


def _is_cjk(name: str) -> bool:
    return "_cjk" in name


def test_head_equals_the_reference_schema_without_the_optional_cjk_index(head_file):
    reference = json.loads(HEAD_REFERENCE.read_text())
    for section in ("virtual_tables", "views", "triggers"):
        reference[section] = {k: v for k, v in reference[section].items() if not _is_cjk(k)}
    drop = ["tables.alembic_version", "indexes.sqlite_autoindex_alembic_version_1"]
    assert schema_diff(reference, head_file, drop=drop) == []


@pytest.mark.parametrize("stem", ["upstream-0.19.0-v22", "upstream-0.13.0-to-0.19.0-v22"])
def test_check_reports_an_adopted_upstream_file_as_clean(tmp_path, stem):
    # Upstream declares session_model_usage's key inline with ON DELETE CASCADE, which
    # SQLAlchemy's reflection drops: that must not read as drift on every adopted file.
    from conftest import copy_fixture

    path = copy_fixture(stem, tmp_path)
    migrate.upgrade(path)
    assert migrate.check(path).drift == []


def test_check_reports_real_drift_readably(tmp_path):
    from hermes_store.backends.sqlite.library import dbapi as _dbapi
    sqlite3 = _dbapi()

    path = tmp_path / "state.db"
    migrate.upgrade(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX idx_sessions_source")
        conn.execute("CREATE TABLE scratch (x)")
    conn.close()
    assert sorted(migrate.check(path).drift) == [
        "add_index idx_sessions_source on sessions(source)",
        "remove_table scratch",
    ]
