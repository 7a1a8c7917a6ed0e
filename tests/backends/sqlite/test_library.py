"""Which SQLite library the store runs on (``backends.sqlite.library``, decision D19): by
default the standard library's, pysqlite3 only when the environment or the host's code
asks for it, a clear error naming the library when it cannot run the head schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from hermes_store.backends.sqlite import library as lib_mod
from hermes_store.backends.sqlite.library import ENV, WAL_RESET_FIX, Library
from hermes_store.errors import SQLiteLibraryError



def _in_child(env_value: str | None, store: str | None = None) -> dict:
    """library() as a fresh process sees it with HERMES_STATE_SQLITE_MODULE=env_value
    (after writing to and searching a store at ``store``, when given)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    code = ("import json, sys\n"
            "if len(sys.argv) > 1:\n"
            "    from hermes_store import SessionDB\n"
            "    with SessionDB(sys.argv[1]) as db:\n"
            "        db.create_session('s', source='cli')\n"
            "        db.append_message('s', role='user', content='hello there')\n"
            "        assert db.search_messages('hello')\n"
            "from hermes_store.backends.sqlite.library import library\n"
            "try:\n"
            "    lib = library()\n"
            "except Exception as exc:\n"
            "    print(json.dumps({'error': type(exc).__name__, 'message': str(exc)})); sys.exit()\n"
            "print(json.dumps(dict(lib.as_dict(), module=lib.module.__name__,\n"
            "                      stdlib_loaded='sqlite3' in sys.modules,\n"
            "                      pysqlite3_loaded='pysqlite3' in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code, *([store] if store else [])], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _has_pysqlite3() -> bool:
    try:
        import pysqlite3.dbapi2  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_clean_install_runs_on_the_standard_library(tmp_path):
    import sqlite3

    got = _in_child(None, str(tmp_path / "state.db"))
    assert (got["name"], got["module"], got["chosen_by"]) == ("sqlite3", "sqlite3", "default")
    assert got["sqlite_version"] == sqlite3.sqlite_version
    fixed = got["wal_reset_fix"]
    assert got["wal_reset_race_closed_by"] == ("fixed library" if fixed else
                                               "writer-locked checkpoints")
    # pysqlite3 is installed here (the test extra), yet a store that wrote and searched
    # never imported it: one SQLite per process
    assert got["pysqlite3_loaded"] is False


@pytest.mark.skipif(not _has_pysqlite3(), reason="pysqlite3 has no wheel for this platform")
def test_the_environment_opts_in_to_pysqlite3(tmp_path):
    got = _in_child("pysqlite3", str(tmp_path / "state.db"))
    assert (got["name"], got["module"], got["chosen_by"]) == (
        "pysqlite3", "pysqlite3.dbapi2", "environment")
    assert got["wal_reset_fix"] is True and got["wal_reset_race_closed_by"] == "fixed library"
    assert got["stdlib_loaded"] is False


@pytest.mark.skipif(not _has_pysqlite3(), reason="pysqlite3 has no wheel for this platform")
def test_the_hosts_code_chooses_and_wins_over_the_environment(tmp_path):
    code = ("import json, sys, hermes_store\n"
            "hermes_store.use_sqlite_library(sys.argv[2])\n"
            "with hermes_store.SessionDB(sys.argv[1]) as db:\n"
            "    db.create_session('s', source='cli')\n"
            "hermes_store.use_sqlite_library(sys.argv[2])  # the same again: no-op\n"
            "other = 'sqlite3' if sys.argv[2] == 'pysqlite3' else 'pysqlite3'\n"
            "try:\n"
            "    hermes_store.use_sqlite_library(other)\n"
            "except hermes_store.SQLiteLibraryError as exc:\n"
            "    late = str(exc)\n"
            "from hermes_store.backends.sqlite.library import library\n"
            "print(json.dumps([library().name, library().chosen_by, late]))\n")
    for chosen, env_value in (("pysqlite3", "sqlite3"), ("sqlite3", "pysqlite3")):
        env = {**os.environ, ENV: env_value}
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / f"{chosen}.db"), chosen],
                             env=env, capture_output=True, text=True, check=True)
        name, chosen_by, late = json.loads(out.stdout)
        assert (name, chosen_by) == (chosen, "argument")
        assert "too late" in late and "before the first store opens" in late
        assert f"{ENV}={env_value} is overridden" in out.stderr


def test_the_environment_picks_the_standard_library():
    import sqlite3

    got = _in_child("sqlite3")
    assert (got["name"], got["module"], got["chosen_by"]) == ("sqlite3", "sqlite3", "environment")
    assert got["sqlite_version"] == sqlite3.sqlite_version


@pytest.mark.parametrize(("value", "words"), [
    ("sqlite4", ["names no SQLite library", "pysqlite3 or sqlite3"]),
])
def test_an_unknown_library_name_is_refused(value, words):
    got = _in_child(value)
    assert got["error"] == "SQLiteLibraryError"
    assert all(w in got["message"] for w in words)


def test_the_running_process_reports_what_it_runs_on():
    lib = lib_mod.library()
    wanted = os.environ.get(ENV)
    # the pysqlite3 leg must really run on pysqlite3, every other run on the default
    assert lib.name == (wanted or lib_mod.DEFAULT)
    assert lib.module.sqlite_version_info == lib.version
    assert lib_mod.dbapi() is lib.module
    conn = lib_mod.connect(":memory:")
    try:
        assert conn.execute("select sqlite_version()").fetchone()[0] == lib.version_text
    finally:
        conn.close()
    assert lib_mod.check_capabilities() is lib  # this machine's libraries run the schema


class _NoVirtualTables:
    """A DB-API module whose connections refuse CREATE VIRTUAL TABLE (as a SQLite built
    without FTS5 would)."""

    def __init__(self, real):
        self._real = real
        self.Error = real.Error
        self.sqlite_version_info = real.sqlite_version_info

    def connect(self, *args, **kwargs):
        conn = self._real.connect(*args, **kwargs)
        deny = {self._real.SQLITE_CREATE_VTABLE}
        conn.set_authorizer(lambda action, *rest: self._real.SQLITE_DENY
                            if action in deny else self._real.SQLITE_OK)
        return conn


def test_a_library_without_fts5_is_a_clear_error_naming_it(monkeypatch):
    fake = _NoVirtualTables(lib_mod.dbapi())
    missing = lib_mod._missing(fake)
    assert missing == "FTS5, the FTS5 trigram tokenizer"
    lacking = Library("sqlite3", types.ModuleType("sqlite3"), (3, 40, 1), "default", missing)
    monkeypatch.setattr(lib_mod, "library", lambda: lacking)
    with pytest.raises(SQLiteLibraryError) as err:
        lib_mod.check_capabilities()
    text = str(err.value)
    assert "sqlite3 (SQLite 3.40.1, without the WAL-reset fix)" in text
    assert "lacks FTS5, the FTS5 trigram tokenizer" in text and "hermes_store[pysqlite3]" in text


@pytest.mark.parametrize(("version", "fixed"), [
    ((3, 40, 1), False), ((3, 51, 2), False), ((3, 51, 3), True), ((3, 52, 0), True),
    ((3, 53, 4), True), ((4, 0, 0), True),
    # the backports: 3.44.6 and 3.50.7 have it, their lines' earlier releases do not
    ((3, 44, 5), False), ((3, 44, 6), True), ((3, 44, 9), True), ((3, 45, 0), False),
    ((3, 50, 6), False), ((3, 50, 7), True), ((3, 51, 0), False),
])
def test_which_versions_have_the_fix(version, fixed):
    lib = Library("x", types.ModuleType("x"), version, "default")
    assert lib.has_wal_reset_fix is fixed
    assert lib.race_guard == ("fixed library" if fixed else "writer-locked checkpoints")


def test_integrity_problems_keep_full_text_index_lines_apart(tmp_path):
    """A trigram index SQLite 3.40 built over text holding a NUL (upstream's
    ``\\x00json:`` rows: it tokenized them only up to the NUL) is out of step for SQLite
    3.44 and later, whose integrity pragmas check FTS5 tables: derived data, not damage
    to the file. Built in a child with the standard library's SQLite."""
    path = tmp_path / "x.db"
    subprocess.run([sys.executable, "-c", (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1])\n"
        "c.execute(\"CREATE VIRTUAL TABLE f USING fts5(x, tokenize='trigram')\")\n"
        "c.execute('INSERT INTO f VALUES (?)', ('\\x00json:[{\"type\": \"text\"}]',))\n"
        "c.execute('INSERT INTO f VALUES (?)', ('plain words',))\n"
        "c.commit()\n"), str(path)], check=True)
    conn = lib_mod.connect(path, isolation_level=None)
    try:
        structural, fts = lib_mod.integrity_problems(conn, "integrity_check")
        assert structural == []
        import sqlite3

        if lib_mod.library().version >= (3, 44, 0) and sqlite3.sqlite_version_info < (3, 44, 0):
            assert fts and all("fts5" in line.lower() for line in fts), fts
    finally:
        conn.close()
