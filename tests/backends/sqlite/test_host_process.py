"""The store inside a host process that opens ``state.db`` with ``import sqlite3`` too
(issue 30, decision D19).

A library cannot know what else its host process does with ``state.db``: an admin
script, a plugin, a notebook or a test helper may open it with the standard library's
``sqlite3`` between the store's calls. If the store ran on another copy of SQLite
(``pysqlite3``), the process would hold two tables of POSIX locks, and closing the file
in one copy drops the locks the other holds (sqlite.org/howtocorrupt.html §2.2.1). So the
store runs on the standard library's ``sqlite3`` by default, and this loop shows it
safe: 0 failed calls, ``integrity_check`` ok, every acknowledged write in the file.

The same loop with ``HERMES_STATE_SQLITE_MODULE=pysqlite3`` documents the hazard, and is
why ``pysqlite3`` is an opt-in only for a host that owns its whole process (no code in
it opens the file with another SQLite): there the reads fail with "disk I/O error" and
writes the store acknowledged are missing from the file after ``close()`` (issue 30
measured 49 of 50 reads failing, 10 sessions and 11 messages lost, ``integrity_check``
ok: the loss is silent). If that test ever stops showing the failure, the hazard it
documents is no longer measured and the test says so by failing.

Each loop runs in a child process (one library per process, as the store chooses it
once), and an independent oracle — another child, plain ``sqlite3``, no hermes_store —
reads the file after ``close()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store.backends.sqlite.library import ENV

WORKERS = Path(__file__).resolve().parents[2] / "support" / "workers"
ROUNDS = 50

_ORACLE = r"""
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=10)
try:
    integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    sessions = [r[0] for r in conn.execute("SELECT id FROM sessions")]
    messages = [list(r) for r in conn.execute("SELECT id, session_id, content FROM messages")]
finally:
    conn.close()
print(json.dumps({"integrity": integrity, "sessions": sessions, "messages": messages}))
"""


def _env(library: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if library is not None:
        env[ENV] = library
    return env


def _run_loop(path: Path, library: str | None) -> dict:
    out = subprocess.run([sys.executable, str(WORKERS / "host_loop.py"), str(path), str(ROUNDS)],
                         env=_env(library), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _oracle(path: Path) -> dict:
    """What the file holds, read by a process that never imported hermes_store."""
    out = subprocess.run([sys.executable, "-c", _ORACLE, str(path)], env=_env(None),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _missing(loop: dict, found: dict) -> tuple[list, list]:
    """The acknowledged sessions and messages the file does not hold."""
    sessions = sorted(set(loop["sessions"]) - set(found["sessions"]))
    present = {tuple(m) for m in found["messages"]}
    messages = [m for m in loop["messages"] if tuple(m) not in present]
    return sessions, messages


def _has_pysqlite3() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import pysqlite3.dbapi2"], env=_env(None),
                           capture_output=True)
    return probe.returncode == 0


def test_the_default_library_shares_the_process_with_a_hosts_sqlite3(tmp_path):
    """Store + host ``sqlite3`` on one file, 50 rounds: no failed call, a whole file,
    every acknowledged session and message present."""
    path = tmp_path / "state.db"
    loop = _run_loop(path, None)
    assert (loop["library"], loop["module"]) == ("sqlite3", "sqlite3")
    assert loop["library_sqlite_version"] == loop["stdlib_sqlite_version"]
    assert loop["failed"] == {}, loop["samples"]
    assert len(loop["sessions"]) == ROUNDS and len(loop["messages"]) == ROUNDS
    found = _oracle(path)
    assert found["integrity"] == ["ok"]
    assert _missing(loop, found) == ([], [])


def test_pysqlite3_beside_a_hosts_sqlite3_shows_the_hazard(tmp_path):
    """The same loop with ``pysqlite3`` chosen explicitly: two copies of SQLite in one
    process drop each other's locks. This documents why the opt-in is for a host that
    owns its whole process; it fails if the loop stops showing the failure."""
    if not _has_pysqlite3():
        pytest.skip("pysqlite3 is not installed (the optional extra hermes_store[pysqlite3])")
    path = tmp_path / "state.db"
    loop = _run_loop(path, "pysqlite3")
    assert (loop["library"], loop["module"]) == ("pysqlite3", "pysqlite3.dbapi2")
    if loop["library_sqlite_version"] == loop["stdlib_sqlite_version"]:
        pytest.skip(f"pysqlite3 and the standard library both run SQLite "
                    f"{loop['stdlib_sqlite_version']}: they may be one copy of SQLite, "
                    "and then there is no second lock table to show the hazard with")
    found = _oracle(path)
    lost_sessions, lost_messages = _missing(loop, found)
    failed = sum(loop["failed"].values())
    report = (f"pysqlite3 (SQLite {loop['library_sqlite_version']}) beside sqlite3 (SQLite "
              f"{loop['stdlib_sqlite_version']}): failed calls {loop['failed']}, "
              f"{len(lost_sessions)} acknowledged sessions and {len(lost_messages)} "
              f"messages missing, integrity {found['integrity'][:3]}")
    print(report)
    assert failed or lost_sessions or lost_messages, (
        "the hazard of two SQLite libraries in one process no longer shows: " + report)


def test_the_host_sqlite_option_writes_the_file_between_the_stores_calls(tmp_path, monkeypatch):
    """The hook behind ``pytest --host-sqlite`` (support/host_sqlite.py): after each
    outermost public call, the host's ``sqlite3`` commits a write to the store's file
    (another connection's ``data_version`` moves), and nothing a caller reads changes."""
    import sqlite3

    from support import host_sqlite

    from hermes_store import SessionDB
    from hermes_store.backends.sqlite.library import library

    if library().name != "sqlite3":
        pytest.skip(f"the store runs on {library().describe()}: a host's sqlite3 beside it "
                    "is the hazard the loop above documents, not the hook under test")
    host_sqlite.install(monkeypatch)
    path = tmp_path / "state.db"
    db = SessionDB(path)
    watch = sqlite3.connect(path)
    try:
        def version():
            return watch.execute("PRAGMA data_version").fetchone()[0]

        before, writes = version(), host_sqlite.writes
        db.create_session("s1", source="cli")  # one outer call (the store's own
        assert host_sqlite.writes == writes + 1  # inner public calls are not probed)
        assert version() != before
        db.append_message("s1", role="user", content="hello")
        assert db.get_messages("s1")[0]["content"] == "hello"
        assert host_sqlite.writes == writes + 3
        assert watch.execute("SELECT count(*) FROM state_meta WHERE key = ?",
                             (host_sqlite.PROBE_KEY,)).fetchone() == (0,)
    finally:
        watch.close()
        db.close()
