"""Head drift: the migrated schema against hermes_store.schema, the head reference, and a
golden sqlite_master snapshot (what autogenerate cannot see: FTS, views, triggers)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from mig_helpers import connect_ro, schema_diff
from support import schema_dump

from hermes_store import migrate
from hermes_store.backends.sqlite.engine import create_engine
from hermes_store.backends.sqlite.migrate import check as sqlite_check

GOLDEN = Path(__file__).parent / "golden" / "head_sqlite_master.json"
HEAD_REFERENCE = Path(__file__).parents[1] / "data" / "head-v30-reference.schema.json"
HOW_TO_UPDATE = (
    "If the change is intended (a new revision changed the head schema), regenerate the "
    "snapshot and review its diff:\n"
    "    HERMES_UPDATE_GOLDEN=1 python3 -m pytest tests/migrations/test_drift.py\n"
    "If not, a revision changed the schema by mistake: fix the revision."
)


@pytest.fixture(scope="module")
def head_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("drift") / "state.db"
    migrate.upgrade(path)
    return path


def test_core_metadata_matches_the_migrated_file(head_file):
    from hermes_store.schema import metadata

    engine = create_engine(head_file, read_only=True, journal_mode=None)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"include_name": sqlite_check.include_name, "compare_type": True}
            )
            with warnings.catch_warnings():  # expression indexes: the golden test's job
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


def _sqlite_master(path: Path) -> list[dict]:
    with connect_ro(path) as conn:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "ORDER BY type, name"
        ).fetchall()
    return [
        {"type": t, "name": n, "table": tbl, "sql": schema_dump.normalize_sql(sql)}
        for t, n, tbl, sql in rows
    ]


def test_sqlite_master_matches_the_golden_snapshot(head_file):
    actual = _sqlite_master(head_file)
    if os.environ.get("HERMES_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(actual, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(GOLDEN.read_text())
    by_name = lambda rows: {(r["type"], r["name"]): r for r in rows}  # noqa: E731
    exp, act = by_name(expected), by_name(actual)
    problems = [f"missing {k}" for k in exp.keys() - act.keys()]
    problems += [f"unexpected {k}: {act[k]['sql']}" for k in act.keys() - exp.keys()]
    problems += [
        f"changed {k}:\n  golden: {exp[k]['sql']}\n  now:    {act[k]['sql']}"
        for k in exp.keys() & act.keys()
        if exp[k] != act[k]
    ]
    assert not problems, "\n".join(problems) + "\n\n" + HOW_TO_UPDATE


@pytest.mark.parametrize("stem", ["upstream-0.19.0-v22", "upstream-0.13.0-to-0.19.0-v22"])
def test_check_reports_an_adopted_upstream_file_as_clean(tmp_path, stem):
    # Upstream declares session_model_usage's key inline with ON DELETE CASCADE, which
    # SQLAlchemy's reflection drops: that must not read as drift on every adopted file.
    from conftest import copy_fixture

    path = copy_fixture(stem, tmp_path)
    migrate.upgrade(path)
    assert migrate.check(path).drift == []


def test_check_reports_real_drift_readably(tmp_path):
    import sqlite3

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
