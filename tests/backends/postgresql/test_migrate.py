"""Migrations on PostgreSQL (D12): one baseline at 0030, nothing below it, the paired-revision
rule, the advisory lock, drift detection — through the real `alembic` command and the API."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from alembic.migration import MigrationContext

from hermes_store import errors, migrate, revisions
from hermes_store.backends.postgresql.migrate import create as pg_create
from hermes_store.backends.postgresql.migrate import env as pg_env
from hermes_store.backends.postgresql.migrate import inspect as pg_inspect
from hermes_store.backends.postgresql import locks as pg_locks
from hermes_store.backends.postgresql import engine as postgres
from hermes_store.location import resolve
from support import pg_schema

REPO = Path(__file__).resolve().parents[3]
VERSIONS = migrate.MIGRATIONS_DIR / "versions"


def run_alembic(*args: str, url: str, home: Path) -> subprocess.CompletedProcess:
    """The real alembic CLI from the repository root (alembic.ini there)."""
    env = dict(os.environ, HERMES_HOME=str(home))
    env.pop("HERMES_STATE_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "alembic", "-x", f"db={url}", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _db(url: str) -> str:
    return sa.engine.make_url(url).database


def _query(pg_server, url: str, sql: str) -> list[tuple]:
    with pg_server.connect(_db(url)) as conn:
        return conn.execute(sql).fetchall()


# --------------------------------------------------------------------------- baseline


def test_alembic_upgrade_head_on_an_empty_database_reaches_head(pg_server, pg_empty_url, tmp_path):
    up = run_alembic("upgrade", "head", url=pg_empty_url, home=tmp_path)
    assert up.returncode == 0, up.stderr
    cur = run_alembic("current", url=pg_empty_url, home=tmp_path)
    assert cur.returncode == 0, cur.stderr
    assert cur.stdout.split()[:2] == [migrate.head(), "(head)"]
    assert migrate.current(pg_empty_url) == migrate.head()
    assert _query(pg_server, pg_empty_url, "SELECT version FROM schema_version") == [(30,)]
    assert migrate.check(pg_empty_url).ok
    assert list(tmp_path.iterdir()) == []  # no SQLite file anywhere


def test_the_api_reports_the_baseline_as_one_step(pg_empty_url):
    steps = []
    assert migrate.upgrade(pg_empty_url, progress=lambda *a: steps.append(a)) == migrate.head()
    assert [step for step, _ in steps] == ["0030", "0030a", "0030b"]
    assert steps[0] == ("0030", "PostgreSQL baseline: the head schema of v30")
    assert migrate.upgrade(pg_empty_url) == migrate.head()  # at head: nothing to do
    assert migrate.schema_version_of(pg_empty_url) == 30


def test_the_frozen_baseline_equals_the_live_head_definitions(pg_server, pg_empty_url):
    # The baseline (frozen text) and the revisions after it must build the very schema
    # schema.py + backends/postgresql/fts/ddl.py + display_order.py build
    migrate.upgrade(pg_empty_url)
    live = pg_server.create_database(pg_server.new_name("live"))
    try:
        engine = postgres.create_engine(resolve(live), poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            pg_create.create_head(conn)
        engine.dispose()
        with pg_server.connect(_db(pg_empty_url)) as a, pg_server.connect(_db(live)) as b:
            baseline_items, live_items = pg_schema.schema_items(a), pg_schema.schema_items(b)
    finally:
        pg_server.drop_database(_db(live))
    assert len(baseline_items) > 200
    missing = sorted(set(live_items) - set(baseline_items))
    extra = sorted(set(baseline_items) - set(live_items))
    assert (missing, extra) == ([], [])


def test_the_baseline_refuses_a_database_it_cannot_live_in(pg_server, tmp_path):
    name = pg_server.new_name("ascii")
    pg_server.admin(f'CREATE DATABASE "{name}" ENCODING \'SQL_ASCII\' TEMPLATE template0 '
                    "LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        with pytest.raises(errors.UnsupportedServerError, match="encoding is SQL_ASCII, not UTF8"):
            migrate.upgrade(pg_server.url(name))
        assert migrate.current(pg_server.url(name)) is None
    finally:
        pg_server.drop_database(name)


def test_tables_that_are_not_a_store_are_left_alone(pg_server, pg_empty_url):
    with pg_server.connect(_db(pg_empty_url)) as conn:
        conn.execute("CREATE TABLE customers (id int)")
    with pytest.raises(errors.NotADatabaseError, match="not a hermes_store database"):
        migrate.upgrade(pg_empty_url)
    assert _query(pg_server, pg_empty_url,
                  "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == [("customers",)]


# --------------------------------------------------------------------------- refusals


def test_a_downgrade_below_the_baseline_is_refused(pg_server, pg_url, tmp_path):
    past_baseline = sum(revisions.is_newer(rev, pg_create.BASELINE) for rev, _ in migrate.history())
    for target in ("0029", "base", f"-{past_baseline + 1}"):
        result = run_alembic("downgrade", target, url=pg_url, home=tmp_path)
        assert result.returncode != 0
        assert "cannot downgrade below 0030" in result.stderr
        assert "Traceback" not in result.stderr
    with pytest.raises(errors.SchemaError, match="cannot downgrade below 0030"):
        migrate.downgrade(pg_url, "0022")
    assert migrate.current(pg_url) == migrate.head() and migrate.check(pg_url).ok


def test_no_revision_below_the_baseline_is_reached_any_other_way(pg_server, pg_url, pg_empty_url):
    with pytest.raises(errors.SchemaError, match="cannot stamp 0022"):
        migrate.stamp(pg_url, "0022")
    assert migrate.current(pg_url) == migrate.head()
    with pytest.raises(errors.SchemaError, match="cannot upgrade an empty database to 0022"):
        migrate.upgrade(pg_empty_url, "0022")
    with pytest.raises(errors.SchemaError, match="stamping an empty database"):
        migrate.stamp(pg_empty_url, "head")
    assert migrate.current(pg_empty_url) is None
    assert _query(pg_server, pg_empty_url,
                  "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


def _nul_rows_as_read(url: str) -> dict:
    """What the index functions made of the rows ``test_0030a_…`` writes."""
    engine = postgres.create_engine(resolve(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return {
                "words": dict(conn.exec_driver_sql(
                    "SELECT content_words, fts_document @@ to_tsquery('simple', content_words) "
                    "FROM (SELECT fts_document, unnest(ARRAY['before', 'after']) AS content_words "
                    "FROM messages WHERE role = 'tool') AS t").all()),
                "scope": dict(conn.exec_driver_sql(
                    "SELECT session_id, fts_trigram_scope FROM messages WHERE role = 'user'").all()),
                "schema_version": conn.exec_driver_sql("SELECT version FROM schema_version").all(),
            }
    finally:
        engine.dispose()


def test_0030a_makes_the_index_functions_read_nul_text_as_sqlite_and_back(pg_empty_url, tmp_path):
    """Revision 0030a, a step of the store's own: rows a 0030 database holds are
    recomputed on upgrade, and the downgrade gives back the baseline's reading."""
    assert migrate.upgrade(pg_empty_url, "0030") == "0030"
    engine = postgres.create_engine(resolve(pg_empty_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # the driver's codec escapes U+0000, as the store does
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, started_at, model_config) VALUES "
            "('plain', 'cli', 1, '{}'), ('delegate', 'cli', 1, %(marked)s)",
            {"marked": '{"_delegate_from": "p\\u0000"}'})
        conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES "
            "('plain', 'tool', %(tool)s, 1), ('plain', 'user', 'hi', 2), "
            "('delegate', 'user', 'hi', 3)", {"tool": "before\x00after"})
    engine.dispose()
    baseline = {"words": {"before": True, "after": True},
                "scope": {"plain": True, "delegate": True}, "schema_version": [(30,)]}
    as_sqlite = {"words": {"before": True, "after": False},
                 "scope": {"plain": True, "delegate": False}, "schema_version": [(30,)]}
    assert _nul_rows_as_read(pg_empty_url) == baseline
    up = run_alembic("upgrade", "head", url=pg_empty_url, home=tmp_path)
    assert up.returncode == 0, up.stderr
    assert migrate.current(pg_empty_url) == migrate.head()
    assert _nul_rows_as_read(pg_empty_url) == as_sqlite
    assert migrate.downgrade(pg_empty_url, "0030") == "0030"
    assert _nul_rows_as_read(pg_empty_url) == baseline
    assert migrate.upgrade(pg_empty_url) == migrate.head()
    assert _nul_rows_as_read(pg_empty_url) == as_sqlite
    assert migrate.check(pg_empty_url).ok


def _compression(pg_server, url: str) -> dict:
    """Each message column's compression method, and how its long values are stored."""
    rows = _query(pg_server, url, """
        SELECT a.attname, a.attcompression::text FROM pg_attribute a
        WHERE a.attrelid = 'messages'::regclass
          AND a.attname IN ('content', 'tool_calls', 'fts_document')""")
    stored = _query(pg_server, url, """
        SELECT DISTINCT pg_column_compression(content) FROM messages
        WHERE pg_column_compression(content) IS NOT NULL""")
    return {"columns": dict(rows), "stored": sorted(method for (method,) in stored)}


def test_0030b_compresses_long_message_text_with_lz4_from_then_on_and_back(
        pg_server, pg_empty_url, tmp_path):
    """Revision 0030b: values written after it are lz4; those stored before keep pglz,
    every one of them read back whole; the downgrade gives the server's default back."""
    from hermes_store import SessionDB

    long_text = " ".join(f"line {i} of a long tool output, container restarted" for i in range(400))
    assert migrate.upgrade(pg_empty_url, "0030a") == "0030a"
    engine = postgres.create_engine(resolve(pg_empty_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES ('before', 'cli', 1)")
        conn.exec_driver_sql("INSERT INTO messages (session_id, role, content, timestamp) "
                             "VALUES ('before', 'tool', %(text)s, 1)", {"text": long_text + " before"})
    engine.dispose()
    assert _compression(pg_server, pg_empty_url) == {
        "columns": {"content": "", "tool_calls": "", "fts_document": ""}, "stored": ["pglz"]}
    up = run_alembic("upgrade", "head", url=pg_empty_url, home=tmp_path)
    assert up.returncode == 0, up.stderr
    lz4 = {"content": "l", "tool_calls": "l", "fts_document": ""}
    assert _compression(pg_server, pg_empty_url)["columns"] == lz4
    db = SessionDB(pg_empty_url)
    db.create_session("after", "cli")
    db.append_message("after", "tool", long_text + " after")
    assert [m["content"] for m in db.get_messages("before") + db.get_messages("after")] == [
        long_text + " before", long_text + " after"]
    assert {hit["session_id"] for hit in db.search_messages("restarted")} == {"before", "after"}
    db.close()
    assert _compression(pg_server, pg_empty_url) == {"columns": lz4, "stored": ["lz4", "pglz"]}
    assert migrate.check(pg_empty_url).ok
    assert migrate.downgrade(pg_empty_url, "0030a") == "0030a"
    assert _compression(pg_server, pg_empty_url) == {
        "columns": {"content": "", "tool_calls": "", "fts_document": ""},
        "stored": ["lz4", "pglz"]}
    with pg_server.connect(_db(pg_empty_url)) as conn:  # every value read back whole
        assert [len(text) for (text,) in conn.execute(
            "SELECT content FROM messages ORDER BY id").fetchall()] == [
            len(long_text) + 7, len(long_text) + 6]


def test_a_server_error_prints_one_line_through_the_cli(tmp_path):
    url = f"postgresql+psycopg://u:secret-pw@/db?host={tmp_path}"
    result = run_alembic("upgrade", "head", url=url, home=tmp_path)
    assert result.returncode != 0
    assert "cannot reach the PostgreSQL server" in result.stderr and "u:***@" in result.stderr
    assert "secret-pw" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- the paired rule


def dialect_problems(source: str, revision: str) -> list[str]:
    """The rule of docs/migrations.md for ``revision``: after the baseline (0030), a
    revision declares ``dialects = ("sqlite", "postgresql")`` (it handles both engines)."""
    if not revisions.is_newer(revision, pg_create.BASELINE):
        return []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == pg_env.DIALECTS_ATTRIBUTE
                for t in node.targets):
            value = ast.literal_eval(node.value)
            if set(value) >= {"sqlite", "postgresql"}:
                return []
            return [f"{revision}: dialects = {value!r} leaves an engine out"]
    return [f"{revision}: no `dialects = (\"sqlite\", \"postgresql\")`"]


def test_every_revision_after_the_baseline_handles_both_engines():
    problems = []
    for path in sorted(VERSIONS.glob("[0-9][0-9][0-9][0-9]*_*.py")):
        problems += dialect_problems(path.read_text(), path.name.split("_")[0])
    assert problems == []
    # the rule itself
    assert dialect_problems('revision = "0031"\n', "0031") == ['0031: no `dialects = ("sqlite", "postgresql")`']
    assert dialect_problems('dialects = ("sqlite",)\n', "0030b") == ["0030b: dialects = ('sqlite',) leaves an engine out"]
    assert dialect_problems('dialects = ("sqlite", "postgresql")\n', "0031") == []
    assert dialect_problems("", "0030") == []


def test_env_refuses_to_run_a_revision_that_does_not_handle_postgresql():
    target = resolve("postgresql://u@h/db")
    scripts = migrate.scripts.scripts()
    state = pg_inspect.DbState("alembic", "0030", frozenset())
    module = SimpleNamespace()  # a revision 0031 without `dialects`
    step = SimpleNamespace(revision=SimpleNamespace(revision="0031", module=module),
                           to_revisions=("0031",), is_upgrade=True)
    with pytest.raises(errors.SchemaError, match="revision 0031 does not declare dialects"):
        pg_env._check_plan([step], state, target, scripts)
    module.dialects = ("sqlite", "postgresql")
    assert pg_env._check_plan([step], state, target, scripts) is False


def test_the_baseline_is_frozen_like_a_revision():
    source = (migrate.MIGRATIONS_DIR / "pg_baseline.py").read_text()
    imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(getattr(n, "module", None) == "__future__" for n in imports)


# --------------------------------------------------------------------------- the lock


def _waiting_for_the_lock(pg_server, url: str) -> int:
    return _query(pg_server, url, (
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        f"WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = '{_db(url)}'"))[0][0]


def test_two_concurrent_deploys_cannot_race(pg_server, pg_empty_url, tmp_path):
    # This test holds the migration lock while two `alembic upgrade head` processes
    # start; both must wait for it, then one creates the baseline and the other finds
    # the work done (without the lock both would create the same tables).
    key = pg_locks.MIGRATION_LOCK_KEY
    with pg_server.connect(_db(pg_empty_url)) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        env = dict(os.environ, HERMES_HOME=str(tmp_path))
        deploys = [subprocess.Popen(
            [sys.executable, "-m", "alembic", "-x", f"db={pg_empty_url}", "upgrade", "head"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
        try:
            while _waiting_for_the_lock(pg_server, pg_empty_url) < 2:
                assert all(d.poll() is None for d in deploys), [d.communicate() for d in deploys]
                time.sleep(0.05)
            assert migrate.current(pg_empty_url) is None  # nothing ran while locked
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
        outcomes = [d.communicate(timeout=300) + (d.returncode,) for d in deploys]
    assert [code for _, _, code in outcomes] == [0, 0], outcomes
    assert migrate.current(pg_empty_url) == migrate.head()
    assert _query(pg_server, pg_empty_url, "SELECT version FROM schema_version") == [(30,)]
    assert _query(pg_server, pg_empty_url, "SELECT version_num FROM alembic_version") == [
        (migrate.head(),)]
    assert migrate.check(pg_empty_url).ok


# --------------------------------------------------------------------------- drift


def test_check_reports_real_drift_readably(pg_server, pg_url):
    assert migrate.check(pg_url).drift == []
    with pg_server.connect(_db(pg_url)) as conn:
        conn.execute("DROP INDEX idx_sessions_source")
        conn.execute("CREATE TABLE scratch (x int)")
        conn.execute("ALTER TABLE messages ADD COLUMN extra text")
    result = migrate.check(pg_url)
    assert result.at_head and not result.ok
    assert sorted(result.drift) == [
        "add_index idx_sessions_source on sessions(source)",
        "remove_column messages.extra",
        "remove_table scratch",
    ]


def test_the_revision_helpers_probe_postgresql_catalogs(pg_url):
    from alembic.operations import Operations

    from hermes_store.migrations import helpers as h

    engine = postgres.create_engine(resolve(pg_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn, Operations.context(MigrationContext.configure(conn)):
            assert h.dialect() == "postgresql"
            assert h.has_table("sessions") and not h.has_table("nope")
            assert h.has_index("idx_sessions_source") and not h.has_index("nope")
            assert h.has_trigger("messages_display_order_insert")
            assert not h.has_view("nope")
            assert h.columns_of("schema_version") == ["version"]
            h.add_columns("schema_version", sa.Column("note", sa.Text))
            h.add_columns("schema_version", sa.Column("note", sa.Text))  # idempotent
            assert h.has_column("schema_version", "note")
            conn.rollback()
    finally:
        engine.dispose()


def test_a_new_revision_from_the_template_declares_both_engines(tmp_path):
    template = (migrate.MIGRATIONS_DIR / "script.py.mako").read_text()
    assert 'dialects = ("sqlite", "postgresql")' in template
