"""Helpers shared by the reliability tests: worker processes, fingerprints, the
independent checks that a store is whole, and the fixtures that run a test on both
engines (``backend``, ``store_target``; import them into the test module).

The checks read the database without the store on purpose: a SQLite file with the
standard library's sqlite3, a PostgreSQL database with plain SQL on a connection of its
own (no hermes_store hook, codec or transaction mode). A test that only asked the store
about itself could not catch the store lying.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"
TESTS_DIR = HERE.parent
REPO_ROOT = TESTS_DIR.parent


def _load_root_conftest():
    # tests/conftest.py holds the fixture helpers; loaded by path under its own name so
    # another folder's conftest.py can never shadow it.
    spec = importlib.util.spec_from_file_location("_hermes_tests_conftest", TESTS_DIR / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_root = _load_root_conftest()
copy_fixture = _root.copy_fixture
UPSTREAM_FIXTURES = _root.UPSTREAM_FIXTURES


# --------------------------------------------------------------------------- processes

def worker_cmd(name: str, *args: object) -> list[str]:
    return [sys.executable, str(WORKERS / f"{name}.py"), *map(str, args)]


def worker_env() -> dict:
    env = dict(os.environ)
    # Workers import the package under test from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn(name: str, *args: object, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        worker_cmd(name, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=worker_env(), **kw,
    )


def run(name: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        worker_cmd(name, *args), capture_output=True, text=True, env=worker_env(), timeout=timeout,
    )


def wait_for_line(proc: subprocess.Popen, expected: str, timeout: float = 60) -> None:
    """Block until the worker prints `expected` on a line of its own (fail on early exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(
                f"worker exited (rc={proc.wait()}) before printing {expected!r}:\n{proc.stderr.read()}"
            )
        if line.strip() == expected:
            return
    raise AssertionError(f"worker did not print {expected!r} within {timeout}s")


def json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # The last line of a SIGKILLed worker may be cut short: it never
                # reported that append, so it is not a promise we hold the store to.
                continue
    return out


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"worker {proc.args} timed out:\n{err}")
    return out, err


# --------------------------------------------------------------------------- files

def fingerprint(path: Path) -> tuple[str, int, int] | None:
    """(sha256, size, mtime_ns) of a file, None when it does not exist."""
    path = Path(path)
    if not path.exists():
        return None
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns


def sidecars(path: Path) -> list[Path]:
    return [Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")]


def mode_of(path: Path) -> int:
    return Path(path).stat().st_mode & 0o777


# --------------------------------------------------------------------------- independent checks

def raw_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def sqlite_integrity(path: Path) -> list[str]:
    """PRAGMA integrity_check through a plain connection: [] when the file's B-trees are
    whole. SQLite 3.44+ also reports FTS5 index lines there; those are kept apart
    (``library.integrity_problems``) and judged by ``fts_problems``, so the verdict is the
    same on every library."""
    from hermes_store.backends.sqlite.library import integrity_problems

    conn = raw_connect(path)
    try:
        structural, _fts = integrity_problems(conn, "integrity_check", 1000)
    finally:
        conn.close()
    return structural


def fts_problems(path: Path) -> list[str]:
    """The package's FTS integrity check (rank=1 form: index vs canonical rows)."""
    from hermes_store.backends.sqlite.engine import create_engine
    from hermes_store.fts.maintenance import integrity_check

    engine = create_engine(path)
    try:
        with engine.connect() as conn:
            problems = list(integrity_check(conn))
            if conn.in_transaction():
                conn.rollback()
    finally:
        engine.dispose()
    return problems


def fts_table_names(path: Path) -> list[str]:
    conn = raw_connect(path)
    try:
        return [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%'"
        )]
    finally:
        conn.close()


def is_server(target) -> bool:
    """True for a PostgreSQL URL, False for a SQLite file's path."""
    return "://" in str(target)


def _server_rows(url: str, sql: str) -> list[tuple]:
    """Rows of plain SQL on a connection of its own (NullPool: nothing stays open)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(sql)]
    finally:
        engine.dispose()


_COUNTERS_SQLITE = """
    SELECT s.id, s.message_count, s.tool_call_count,
           (SELECT count(*) FROM messages m WHERE m.session_id = s.id),
           (SELECT coalesce(sum(CASE WHEN json_type(m.tool_calls) = 'array'
                                      THEN json_array_length(m.tool_calls)
                                      ELSE 1 END), 0)
              FROM messages m
             WHERE m.session_id = s.id AND m.tool_calls IS NOT NULL AND m.role != 'tool')
      FROM sessions s
"""
_COUNTERS_SERVER = """
    SELECT s.id, s.message_count, s.tool_call_count,
           (SELECT count(*) FROM messages m WHERE m.session_id = s.id),
           (SELECT coalesce(sum(CASE WHEN json_typeof(m.tool_calls::json) = 'array'
                                      THEN json_array_length(m.tool_calls::json)
                                      ELSE 1 END), 0)
              FROM messages m
             WHERE m.session_id = s.id AND m.tool_calls IS NOT NULL AND m.role <> 'tool')
      FROM sessions s
"""


def counter_mismatches(target) -> list[str]:
    """Sessions whose message_count / tool_call_count disagree with their rows.

    tool_call_count is the number of tool calls the assistant rows carry (a JSON
    list counts its length, any other JSON value counts 1) — the workers only put
    tool calls on assistant rows.
    """
    if is_server(target):
        rows = _server_rows(str(target), _COUNTERS_SERVER)
    else:
        conn = raw_connect(target)
        try:
            rows = [tuple(r) for r in conn.execute(_COUNTERS_SQLITE)]
        finally:
            conn.close()
    return [
        f"{sid}: message_count={messages} (rows {real_messages}), "
        f"tool_call_count={calls} (real {real_calls})"
        for sid, messages, calls, real_messages, real_calls in rows
        if (messages, calls) != (real_messages, real_calls)
    ]


_TOKENS = """
    SELECT s.id, s.input_tokens, s.output_tokens, s.api_call_count,
           (SELECT coalesce(sum(u.input_tokens), 0) FROM session_model_usage u
             WHERE u.session_id = s.id),
           (SELECT coalesce(sum(u.output_tokens), 0) FROM session_model_usage u
             WHERE u.session_id = s.id),
           (SELECT coalesce(sum(u.api_call_count), 0) FROM session_model_usage u
             WHERE u.session_id = s.id)
      FROM sessions s
"""


def token_mismatches(target) -> list[str]:
    """Sessions whose token totals disagree with the per-model usage rows that the same
    units wrote (for stores whose every token came through incremental
    ``update_token_counts``): a half-applied unit would show here."""
    if is_server(target):
        rows = _server_rows(str(target), _TOKENS)
    else:
        conn = raw_connect(target)
        try:
            rows = [tuple(r) for r in conn.execute(_TOKENS)]
        finally:
            conn.close()
    return [f"{r[0]}: sessions (input, output, calls) = {r[1:4]}, per-model usage {r[4:7]}"
            for r in rows if tuple(r[1:4]) != tuple(r[4:7])]


def session_tokens(target) -> dict[str, int]:
    """session id -> input_tokens."""
    sql = "SELECT id, input_tokens FROM sessions"
    if is_server(target):
        return dict(_server_rows(str(target), sql))
    conn = raw_connect(target)
    try:
        return {r[0]: r[1] for r in conn.execute(sql)}
    finally:
        conn.close()


def message_ids(target) -> dict[int, tuple[str, str]]:
    """id -> (session_id, content) for every message row."""
    sql = "SELECT id, session_id, content FROM messages"
    if is_server(target):
        return {r[0]: (r[1], r[2]) for r in _server_rows(str(target), sql)}
    conn = raw_connect(target)
    try:
        return {r[0]: (r[1], r[2]) for r in conn.execute(sql)}
    finally:
        conn.close()


def server_fts_problems(url: str) -> list[str]:
    """PostgreSQL: the FTS layout's own check (indexes valid, triggers present, every
    row's trigram scope in step with its session), on a plain connection."""
    import sqlalchemy as sa

    from hermes_store.backends.postgresql.fts.maintenance import integrity_check

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(integrity_check(conn))
    finally:
        engine.dispose()


def assert_store_whole(target) -> None:
    """A SQLite file passes SQLite's and the FTS index's integrity checks; a PostgreSQL
    database passes its FTS layout's check; and every session's counters equal its rows."""
    if is_server(target):
        problems = server_fts_problems(str(target))
        assert problems == [], f"FTS check failed on {target}: {problems}"
    else:
        path = target
        assert sqlite_integrity(path) == [], f"PRAGMA integrity_check failed on {path}"
        problems = fts_problems(path)
        assert problems == [], f"FTS integrity-check failed on {path}: {problems}"
    bad = counter_mismatches(target)
    assert bad == [], f"counters disagree with rows: {bad}"


# --------------------------------------------------------------------------- store internals

def engine_of(db):
    from sqlalchemy.engine import Engine

    for value in vars(db).values():
        if isinstance(value, Engine):
            return value
    raise AssertionError("SessionDB exposes no Engine")


# --------------------------------------------------------------------------- fast fresh stores

_TEMPLATE: list[Path] = []


def fresh_store_file(path: Path) -> Path:
    """Put an empty head-schema store at `path` (a copy of one made once per process).

    Creating a file runs every revision 0001..0030 (about a second); tests that are not
    about creation start from a copy instead. Creation itself is covered by the file
    permission tests, which always create for real.
    """
    import atexit
    import shutil
    import tempfile

    from hermes_store import SessionDB

    if not _TEMPLATE:
        template_dir = tempfile.mkdtemp(prefix="hermes-rel-template-")
        atexit.register(shutil.rmtree, template_dir, ignore_errors=True)
        template = Path(template_dir) / "state.db"
        SessionDB(template).close()
        assert not Path(f"{template}-wal").exists() or Path(f"{template}-wal").stat().st_size == 0
        _TEMPLATE.append(template)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATE[0], path)
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- both engines

@pytest.fixture
def backend(request) -> str:
    """The engine under test: "sqlite" or "postgresql" (parametrized by tests/conftest.py's
    ``pytest_generate_tests`` for every test that asks for it)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def store_target(request, backend, tmp_path):
    """An empty store at head on the engine under test: a SQLite file's path, or the
    URL of a fresh database on the suite's throwaway PostgreSQL server."""
    if backend == "sqlite":
        return fresh_store_file(tmp_path / "state.db")
    from support.pgbouncer import through_pooler

    return through_pooler(request, backend, request.getfixturevalue("pg_url"))
