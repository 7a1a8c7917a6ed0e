"""Issue 5, item 3: a migration killed midway leaves the file at a revision, never between.

An upstream 0.13.0 file (schema 11) is adopted and upgraded to head in a child process
that is SIGKILLed at a random moment. Each revision commits with its version row, so the
killed file must be *exactly* at some revision r: its schema equal to what an untouched
copy of the same file has after `upgrade(r)`, its `schema_version` equal to r — or, if
the kill came before the first commit, schema-identical to the original.
The next upgrade must then complete to head with every row still there.
"""

from __future__ import annotations

import random
import signal
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import time
from functools import lru_cache

import pytest

from support import reliability as rs
from hermes_store import migrate
from hermes_store.revisions import upstream_version
from support import schema_dump

STEM = "upstream-0.13.0-v11"


GROWN_MESSAGES = 4000


def _copy(dest_dir):
    """A copy of the fixture grown with plain sqlite3 (as upstream would have written
    the rows) so that the data steps of the upgrade take long enough to be hit."""
    dest_dir.mkdir(exist_ok=True)
    path = rs.copy_fixture(STEM, dest_dir)
    conn = sqlite3.connect(str(path))
    with conn:
        (session,) = conn.execute("SELECT id FROM sessions ORDER BY started_at LIMIT 1").fetchone()
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [(session, "user" if i % 2 else "assistant",
              f"grown row {i} about deploying the frobnicator " * 8, 1_700_000_000 + i)
             for i in range(GROWN_MESSAGES)],
        )
        conn.execute("UPDATE sessions SET message_count = message_count + ? WHERE id = ?",
                     (GROWN_MESSAGES, session))
    conn.close()
    return path


def _schema(path) -> dict:
    return schema_dump._prepare(schema_dump.load(str(path)), column_order=False,
                                schema_only=True, ignore_meta=[])


def _revision_of(path) -> str | None:
    conn = sqlite3.connect(str(path))
    try:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='alembic_version'").fetchone()
        if not has:
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return row[0] if row else None
    finally:
        conn.close()


def _schema_version(path) -> int | None:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    finally:
        conn.close()


def _row_counts(path) -> dict:
    conn = sqlite3.connect(str(path))
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("sessions", "messages")}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Schemas of the fixture at each revision, built lazily from untouched copies."""
    base = tmp_path_factory.mktemp("migration-refs")
    pristine = _copy(base / "pristine")

    @lru_cache(maxsize=None)
    def at(revision: str | None) -> dict:
        if revision is None:
            return _schema(pristine)
        copy = _copy(base / f"rev-{revision}")
        migrate.upgrade(copy, revision)
        return _schema(copy)

    return at


def _kill_and_check(copy, command, delay, references):
    victim = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=rs.worker_env(), cwd=rs.REPO_ROOT)
    if command[1].endswith("migrate_worker.py"):
        rs.wait_for_line(victim, "ready")
    time.sleep(delay)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)

    revision = _revision_of(copy)
    difference = schema_dump.diff(references(revision), _schema(copy))
    assert difference == [], (
        f"killed after {delay:.2f}s: the file says revision {revision} but its schema is "
        f"between revisions:\n" + "\n".join(difference[:40]))
    if revision is not None:
        assert _schema_version(copy) == upstream_version(revision), (
        "schema_version disagrees with alembic_version")
    return revision


def test_upgrade_killed_midway_is_at_a_revision_and_completes_next_time(tmp_path, references):
    expected_rows = _row_counts(_copy(tmp_path / "counts"))
    # One undisturbed run to learn how long the upgrade takes (in the child, from after imports).
    timing_copy = _copy(tmp_path / "timing")
    done = rs.run("migrate_worker", timing_copy)
    assert done.returncode == 0, done.stderr
    duration = rs.json_lines(done.stdout)[-1]["elapsed"]
    head_schema = _schema(timing_copy)

    # The same through the alembic command line: its start-up is part of the kill delay.
    cli_copy = _copy(tmp_path / "timing-cli")
    started = time.monotonic()
    cli = subprocess.run([sys.executable, "-m", "alembic", "-x", f"db={cli_copy}", "upgrade", "head"],
                         capture_output=True, text=True, env=rs.worker_env(), cwd=rs.REPO_ROOT)
    cli_total = time.monotonic() - started
    assert cli.returncode == 0, cli.stderr

    rng = random.Random(11)
    seen = []
    cases = [("python", rng.uniform(0.0, duration)) for _ in range(4)]
    cases += [("alembic", rng.uniform(max(0.0, cli_total - 1.5 * duration), cli_total - 0.5 * duration))
              for _ in range(2)]
    for n, (entry, delay) in enumerate(cases):
        copy = _copy(tmp_path / f"kill-{n}")
        if entry == "python":
            command = rs.worker_cmd("migrate_worker", copy)
        else:
            command = [sys.executable, "-m", "alembic", "-x", f"db={copy}", "upgrade", "head"]
        seen.append(_kill_and_check(copy, command, delay, references))

        migrate.upgrade(copy)
        assert migrate.current(copy) == migrate.head()
        assert schema_dump.diff(head_schema, _schema(copy)) == []
        assert _row_counts(copy) == expected_rows
        assert rs.sqlite_integrity(copy) == []
        assert rs.fts_problems(copy) == []

    print(f"\nmigration kills: {len(cases)} (upgrade takes {duration:.2f}s), "
          f"file found at revisions {seen}")
