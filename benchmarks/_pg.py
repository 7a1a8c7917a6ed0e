"""PostgreSQL for the benchmarks: a server tuned as a deployment would run it, and the
bulk fill of a database with the same conversations the SQLite stores hold.

``DEPLOYMENT_SETTINGS`` are durable (``fsync``, ``synchronous_commit`` and
``full_page_writes`` on, as shipped) with memory sized for this 2-core, 24 GB machine
shared with other jobs; ``RELAXED_SETTINGS`` differ only in ``synchronous_commit=off``
(a commit returns before its WAL is flushed: a server crash can lose the last ~0.6 s of
reported commits) and are always labelled as such. The test suite's server
(``tests/support/postgres.py``) runs with durability off and is never used here.

``server(settings)`` starts a private server (``tests/support/postgres.PostgresServer``)
listening on 127.0.0.1 — a deployment reaches its server over TCP — and stops it when
the block ends, however it ends (the class also leaves a watchdog that stops it if this
process is killed). ``fill(url, n)`` creates the head schema with our migrations, then
streams ``_workload.Generator`` sessions and messages in with ``COPY`` (every trigger of
the head schema live, as on SQLite), builds the two full-text GIN indexes afterwards
and runs ``VACUUM (ANALYZE)``, as autovacuum would have by then.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

from _common import ROOT
from _workload import Generator

sys.path.insert(0, str(ROOT / "tests"))

#: settings of the benchmark server (see the module docstring); everything else is
#: PostgreSQL 15's default
DEPLOYMENT_SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "max_connections": "100",
    "shared_buffers": "1GB",
    "effective_cache_size": "8GB",
    "work_mem": "16MB",
    "maintenance_work_mem": "512MB",
    "wal_buffers": "16MB",
    "max_wal_size": "4GB",
    "checkpoint_completion_target": "0.9",
    "random_page_cost": "1.1",
}
RELAXED_SETTINGS = {**DEPLOYMENT_SETTINGS, "synchronous_commit": "off"}

MESSAGE_KEYS = ("session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
                "timestamp", "token_count", "finish_reason", "active")
COMMIT_EVERY = 50_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(settings: dict[str, str] = DEPLOYMENT_SETTINGS) -> Iterator:
    """A running private server with ``settings``; stopped when the block ends."""
    from support.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql "
                           "postgresql-contrib, or set HERMES_TEST_PG_BINDIR)")
    srv = PostgresServer(bindir, settings=settings, tcp_port=_free_port())
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


def settings_text(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def fill(url: str, n_messages: int, *, log=None, long_session: int = 20_000) -> dict:
    """Create the head schema in the (empty) database at ``url`` and bulk-load the
    workload's ``n_messages`` (the same rows ``_stores.fill`` puts in a SQLite store)."""
    import psycopg
    import sqlalchemy as sa

    from hermes_store import migrate, schema
    from hermes_store.backends.postgresql.fts import ddl as fts_pg

    migrate.upgrade(url)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        fts_pg.drop_indexes(conn)  # built once at the end: much faster than row by row
    session_columns = [c.name for c in schema.sessions.columns]
    u = sa.engine.make_url(url)
    n_msgs = n_sessions = pending = 0
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as pg:
        cur = pg.cursor()
        gen = Generator(n_messages, long_session=long_session)
        batch_sessions: list[dict] = []
        batch_messages: list[list] = []

        def flush() -> None:
            for srow in batch_sessions:
                cols = list(srow)
                cur.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES "
                            f"({', '.join(['%s'] * len(cols))})", list(srow.values()))
            with cur.copy(f"COPY messages ({', '.join(MESSAGE_KEYS)}) FROM STDIN") as copy:
                for row in batch_messages:
                    copy.write_row(row)
            pg.commit()
            batch_sessions.clear()
            batch_messages.clear()

        for session, msgs in gen.sessions():
            batch_sessions.append({k: v for k, v in session.items() if k in session_columns})
            for m in msgs:
                m = dict(m, session_id=session["id"], active=1)
                if m.get("tool_calls"):
                    m["tool_calls"] = json.dumps(m["tool_calls"])
                batch_messages.append([m.get(k) for k in MESSAGE_KEYS])
            n_msgs += len(msgs)
            n_sessions += 1
            pending += len(msgs)
            if pending >= COMMIT_EVERY:
                flush()
                pending = 0
                if log:
                    log(f"  postgresql: {n_msgs:,} messages")
        flush()
    with engine.begin() as conn:
        fts_pg.create_indexes(conn)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM (ANALYZE)")
    engine.dispose()
    return {"messages": n_msgs, "sessions": n_sessions}


def database_bytes(url: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar())
    finally:
        engine.dispose()


__all__ = ["DEPLOYMENT_SETTINGS", "RELAXED_SETTINGS", "database_bytes", "fill", "server",
           "settings_text"]


# --------------------------------------------------------------------------- writer processes

def server_cpu(data_dir: Path | None) -> float:
    """CPU seconds used so far by a PostgreSQL server: the postmaster, its live
    processes (backends, WAL writer…) and those it has reaped (``cutime``)."""
    if data_dir is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])

    def fields(pid):
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()

    own = fields(postmaster)
    total = sum(int(x) for x in own[11:15])  # utime stime cutime cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                f = fields(entry)
            except OSError:
                continue
            if int(f[1]) == postmaster:
                total += int(f[11]) + int(f[12])
    return total / tick


def run_children(commands: Sequence[list[str]], seconds: float, data_dir: Path | None = None,
                 env: dict | None = None) -> tuple[list[dict], float, float]:
    """Start one writer process per command, wait until each prints ``ready``, tell all
    of them ``go START DEADLINE`` (``seconds`` from a moment 0.3 s ahead, so they begin
    together), and collect the JSON report each prints at the end. Returns the reports,
    the start time and the server's CPU seconds over the run (0 without ``data_dir``).
    A child that fails to start, or anything raised here, kills every child."""
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=env) for cmd in commands]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"writer did not start (exit {p.wait()})")
        start = time.time() + 0.3
        server_before = server_cpu(data_dir)
        for p in procs:
            p.stdin.write(f"go {start} {start + seconds}\n")
            p.stdin.flush()
        reports = [json.loads(p.communicate(timeout=seconds + 300)[0]) for p in procs]
        return reports, start, server_cpu(data_dir) - server_before
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
