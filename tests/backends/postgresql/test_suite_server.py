"""The suite's own throwaway PostgreSQL server (tests/support/postgres.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import sqlalchemy as sa

from support import postgres as pg_support


def test_each_test_database_is_fresh_and_private(pg_server, pg_empty_url):
    engine = sa.create_engine(pg_empty_url)
    try:
        with engine.begin() as conn:
            assert conn.exec_driver_sql(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).scalar() == 0
            conn.exec_driver_sql("CREATE TABLE scratch (x int)")
            version = conn.exec_driver_sql("SHOW server_version_num").scalar()
            encoding = conn.exec_driver_sql("SHOW server_encoding").scalar()
    finally:
        engine.dispose()
    assert int(version) >= 150000
    assert encoding == "UTF8"
    # the server listens on its own socket directory only, owned by the server's user
    assert Path(pg_server.base, f".s.PGSQL.{pg_server.port}").exists()
    assert pg_server.admin("SHOW listen_addresses") == [("",)]


def test_the_server_runs_as_postgres_when_the_suite_runs_as_root(pg_server):
    pid = int(Path(pg_server.data, "postmaster.pid").read_text().split()[0])
    owner = Path(f"/proc/{pid}").stat().st_uid
    if os.geteuid() == 0:
        import pwd

        assert owner == pwd.getpwnam("postgres").pw_uid
    else:
        assert owner == os.geteuid()


SERVER_IN_A_CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from support.postgres import PostgresServer, find_bindir
    server = PostgresServer(find_bindir())
    server.start()
    print(server.base, flush=True)
    if sys.argv[2] == "kill":
        time.sleep(600)          # SIGKILLed by the parent: only the watchdog can clean up
    # else: plain exit without stop(): atexit must clean up
""")


def _child_server(mode: str) -> tuple[subprocess.Popen, Path]:
    tests_dir = str(Path(__file__).parents[2])
    child = subprocess.Popen([sys.executable, "-c", SERVER_IN_A_CHILD, tests_dir, mode],
                             stdout=subprocess.PIPE, text=True)
    base = Path(child.stdout.readline().strip())
    assert base.name.startswith("hermes-pg-")
    return child, base


def _postmaster_pid(base: Path) -> int:
    return int((base / "data" / "postmaster.pid").read_text().split()[0])


def _wait_gone(pid: int, base: Path) -> None:
    for _ in range(600):
        if not Path(f"/proc/{pid}").exists() and not base.exists():
            return
        import time

        time.sleep(0.05)
    raise AssertionError(f"server {pid} or {base} still there")


def test_a_server_is_stopped_when_its_process_exits_without_cleaning_up(pg_server):
    child, base = _child_server("exit")
    pid = _postmaster_pid(base)
    assert child.wait(timeout=120) == 0
    _wait_gone(pid, base)


def test_a_server_is_stopped_even_when_its_process_is_killed(pg_server):
    child, base = _child_server("kill")
    pid = _postmaster_pid(base)
    psycopg.connect(host=str(base), port=5432, user="postgres", dbname="postgres").close()
    child.kill()
    child.wait(timeout=30)
    _wait_gone(pid, base)


def _run_a_pg_test_with(env_overrides: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a one-test pytest session (a fresh process, so a fresh server state)."""
    tests_dir = Path(__file__).parents[2]
    (tmp_path / "conftest.py").write_text((tests_dir / "conftest.py").read_text())
    (tmp_path / "test_one.py").write_text("def test_needs_pg(pg_empty_url):\n    assert pg_empty_url\n")
    env = {**os.environ, **env_overrides, "PYTHONPATH": str(tests_dir)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-rfs", str(tmp_path / "test_one.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )


def test_missing_binaries_fail_the_postgres_tests_with_the_install_hint(tmp_path):
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    result = _run_a_pg_test_with({pg_support.BINDIR_ENV: str(empty)}, tmp_path)
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout or "1 failed" in result.stdout
    assert "apt-get install -y postgresql postgresql-contrib" in result.stdout


def test_the_explicit_opt_out_skips_instead(tmp_path):
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    result = _run_a_pg_test_with(
        {pg_support.BINDIR_ENV: str(empty), pg_support.OPT_OUT_ENV: "1"}, tmp_path
    )
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout and pg_support.OPT_OUT_ENV in result.stdout


def test_a_recycled_test_database_is_as_fresh_as_a_new_copy(pg_server, pg_template):
    from hermes_store import migrate

    name = pg_template.take()
    with pg_server.connect(name) as conn:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        conn.execute("INSERT INTO messages (session_id, role, timestamp) "
                     "VALUES ('s', 'user', 1), ('s', 'user', 2)")
        conn.execute("SELECT pg_advisory_lock(42)")
        pg_template.give_back(name)  # terminates this connection, truncates
    assert pg_template.take() == name
    with pg_server.connect(name) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        first_id = conn.execute("INSERT INTO messages (session_id, role, timestamp) "
                                "VALUES ('s', 'user', 1) RETURNING id").fetchone()[0]
        assert first_id == 1  # sequences restarted
        assert conn.execute("SELECT pg_try_advisory_lock(42)").fetchone()[0]
    assert migrate.current(pg_server.url(name)) == migrate.head()
    pg_template.give_back(name)


def test_a_test_database_whose_schema_changed_is_dropped(pg_server, pg_template):
    name = pg_template.take()
    with pg_server.connect(name) as conn:
        conn.execute("DROP INDEX idx_sessions_source")
    pg_template.give_back(name)
    assert name not in pg_template.free
    assert pg_server.admin(f"SELECT 1 FROM pg_database WHERE datname = '{name}'") == []
