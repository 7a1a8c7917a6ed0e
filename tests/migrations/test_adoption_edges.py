"""Adoption corner cases: healing to a version's shape, unversioned v1 files, empty files,
FTS repair, concurrent upgrades, and a revision that fails half-way."""

from __future__ import annotations

import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import textwrap

import pytest
from alembic import command
from conftest import copy_fixture
from support.migrations import (
    alembic_revision,
    connect_ro,
    data_digest,
    file_digest,
    fts_integrity_errors,
    schema,
    schema_diff,
    schema_version,
)

from hermes_store import migrate
from hermes_store.backends.sqlite.engine import create_engine
from hermes_store.revisions import upstream_version


def test_current_reports_an_upstream_file_without_writing_to_it(tmp_path):
    db = copy_fixture("upstream-0.15.0-v13", tmp_path)
    before = file_digest(db)
    assert migrate.current(db) == "0013"
    assert migrate.schema_version_of(db) == 13
    assert file_digest(db) == before


def test_a_0_15_file_is_healed_to_the_shape_of_0013(tmp_path):
    # 0.15.x is stamped 13 but lacks messages.active (decision D6 gives it to v12)
    db = copy_fixture("upstream-0.15.0-v13", tmp_path)
    with connect_ro(db) as conn:
        assert "active" not in {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
        visible_before = conn.execute("SELECT count(*) FROM messages").fetchone()[0]

    assert migrate.upgrade(db, "0013") == "0013"

    fresh = tmp_path / "fresh.db"
    migrate.upgrade(fresh, "0013")
    assert schema_diff(fresh, db) == []
    assert schema_version(db) == [13] and alembic_revision(db) == "0013"
    with connect_ro(db) as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE active = 1").fetchone()[0] == visible_before


def _unversioned_v1_file(path):
    migrate.upgrade(path, "0001")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE alembic_version")
        conn.execute("DROP TABLE schema_version")
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('old', 'cli', 1.0)")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('old', 'user', 'ancient zebracorn message', 1.0)"
        )
    sqlite3.connect(path).close()


def test_a_sessions_table_without_a_version_table_is_v1(tmp_path):
    db = tmp_path / "v1.db"
    _unversioned_v1_file(db)
    assert migrate.current(db) == "0001"
    migrate.upgrade(db)
    assert schema_version(db) == [upstream_version(migrate.head())]
    with connect_ro(db) as conn:
        hits = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zebracorn'").fetchall()
    assert hits == [(1,)]
    assert fts_integrity_errors(db) == []


def test_an_empty_file_is_a_fresh_database(tmp_path):
    db = tmp_path / "empty.db"
    db.touch()
    assert migrate.current(db) is None
    assert migrate.upgrade(db) == migrate.head()


def test_missing_fts_triggers_are_restored_and_the_index_rebuilt(tmp_path):
    # upstream >= 0.16 drops the FTS triggers when its SQLite lacks FTS5; rows written
    # then are missing from the index
    db = copy_fixture("upstream-0.13.0-v11", tmp_path)
    with sqlite3.connect(db) as conn:
        for suffix in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER messages_fts_{suffix}")
            conn.execute(f"DROP TRIGGER messages_fts_trigram_{suffix}")
        session = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        new_id = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (?, 'user', 'quokkaphant written while FTS was off', 9e9)",
            (session,),
        ).lastrowid
    sqlite3.connect(db).close()

    migrate.upgrade(db, "0011")

    fresh = tmp_path / "fresh.db"
    migrate.upgrade(fresh, "0011")
    assert schema_diff(fresh, db) == []
    with connect_ro(db) as conn:
        for table in ("messages_fts", "messages_fts_trigram"):
            hits = conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH 'quokkaphant'"
            ).fetchall()
            assert hits == [(new_id,)], table
    assert fts_integrity_errors(db) == []


def test_two_processes_upgrading_the_same_file_both_succeed(tmp_path):
    db = copy_fixture("upstream-0.17.0-v16", tmp_path)
    code = f"from hermes_store import migrate; print(migrate.upgrade({str(db)!r}))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    for out, err, rc in results:
        assert rc == 0, err
        assert out.strip() == migrate.head()
    assert schema_version(db) == [upstream_version(migrate.head())]
    assert fts_integrity_errors(db) == []


def test_a_revision_that_fails_half_way_leaves_the_file_as_it_was(tmp_path):
    scripts = tmp_path / "scripts"
    (scripts / "versions").mkdir(parents=True)
    shutil.copy(migrate.MIGRATIONS_DIR / "env.py", scripts)
    for rev in ("0001", "0002", "0003"):
        (source,) = (migrate.MIGRATIONS_DIR / "versions").glob(f"{rev}_*.py")
        shutil.copy(source, scripts / "versions")
    (scripts / "versions" / "0004_breaks.py").write_text(textwrap.dedent('''
        """A revision that does real DDL and data work, then fails."""
        import sqlalchemy as sa
        from alembic import op

        revision, down_revision, branch_labels, depends_on = "0004", "0003", None, None

        def upgrade():
            op.add_column("sessions", sa.Column("doomed", sa.Text))
            op.execute("CREATE TABLE doomed_table (x INTEGER)")
            op.execute("CREATE VIRTUAL TABLE doomed_fts USING fts5(x)")
            op.execute("UPDATE sessions SET title = 'changed'")
            raise RuntimeError("boom")

        def downgrade():
            pass
    '''))
    cfg = migrate.config(tmp_path / "state.db")
    cfg.set_main_option("script_location", str(scripts))
    command.upgrade(cfg, "0003")
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO sessions (id, source, started_at, title) VALUES ('a', 'cli', 1, 'kept')")
    sqlite3.connect(db).close()
    shape, data = schema(db), data_digest(db)

    with pytest.raises(RuntimeError, match="boom"):
        command.upgrade(cfg, "0004")

    assert schema(db) == shape and data_digest(db) == data
    assert alembic_revision(db) == "0003" and schema_version(db) == [3]


def test_upgrade_on_a_connection_handed_in_by_the_caller(tmp_path):
    db = tmp_path / "state.db"
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            command.upgrade(migrate.config(connection=conn), "0012")
            assert conn.exec_driver_sql("SELECT version FROM schema_version").scalar() == 12
            assert conn.get_execution_options().get("hermes_begin", "DEFERRED") == "DEFERRED"
    finally:
        engine.dispose()
    assert migrate.current(db) == "0012"


def test_progress_is_reported_once_per_applied_revision(tmp_path):
    seen = []
    migrate.upgrade(tmp_path / "state.db", "0005", progress=lambda rev, doc: seen.append((rev, doc)))
    assert [rev for rev, _ in seen] == ["0001", "0002", "0003", "0004", "0005"]
    assert seen[1][1].startswith("v2:")


def test_downgrade_and_stamp_keep_schema_version_in_step(tmp_path):
    db = tmp_path / "state.db"
    migrate.upgrade(db, "0015")
    migrate.downgrade(db, "0012")
    assert (alembic_revision(db), schema_version(db)) == ("0012", [12])
    migrate.stamp(db, "0013")
    assert (alembic_revision(db), schema_version(db)) == ("0013", [13])
    migrate.downgrade(db, "base")
    assert schema_version(db) is None and migrate.current(db) is None


def test_an_upstream_head_file_with_its_fts_triggers_gone_is_repaired(tmp_path):
    # a v30 file written by upstream (no alembic_version) whose FTS triggers were dropped
    db = tmp_path / "v30.db"
    migrate.upgrade(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE alembic_version")
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1.0)")
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'messages_fts%'"
        ).fetchall():
            conn.execute(f'DROP TRIGGER "{name}"')
        new_id = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('s', 'user', 'wombatross 袋熊信天翁 arrives unindexed', 2.0)"
        ).lastrowid
    sqlite3.connect(db).close()
    assert migrate.current(db) == "0030"  # upstream's v30 reads as its revision

    migrate.upgrade(db)

    fresh = tmp_path / "fresh.db"
    migrate.upgrade(fresh)
    assert schema_diff(fresh, db) == []
    with connect_ro(db) as conn:
        assert conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'wombatross'"
        ).fetchall() == [(new_id,)]
        assert conn.execute(
            "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH '\"袋熊信\"'"
        ).fetchall() == [(new_id,)]
    assert fts_integrity_errors(db) == []
