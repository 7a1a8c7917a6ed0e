"""The module-level names agent 0.19.0 imports from ``hermes_state``, side by side with
upstream 0.19.0's module (issue 16, item 1)."""

from __future__ import annotations

import ast
import asyncio
import re
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from support.agent_compat import agent_function, agent_root, agent_source
from conftest import copy_fixture
from hermes_store.agent import hermes_state as ours
from hermes_store.errors import DatabaseDamagedError, NotADatabaseError
from support.upstream_state import load_hermes_state

#: what the agent imports (survey: tests/agent/agent_0_19_0_surface.md)
AGENT_IMPORTS = {
    "SessionDB", "AsyncSessionDB", "DEFAULT_DB_PATH", "format_session_db_unavailable",
    "workspace_key", "apply_wal_with_fallback", "is_malformed_db_error", "_db_opens_cleanly",
    "repair_state_db_schema",
}


@pytest.fixture
def upstream():
    return load_hermes_state()


@pytest.fixture(autouse=True)
def _clear_init_errors(upstream):
    yield
    ours._set_last_init_error(None)
    upstream._set_last_init_error(None)


def _imported_names() -> set[str]:
    names = set()
    for path in agent_root().rglob("*.py"):
        rel = path.relative_to(agent_root()).as_posix()
        if rel == "hermes_state.py" or "/tests/" in f"/{rel}":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if "hermes_state" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "hermes_state":
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                assert "hermes_state" not in {a.name for a in node.names}, rel
    return names


def test_every_name_the_agent_imports_is_offered():
    assert _imported_names() == AGENT_IMPORTS
    for name in AGENT_IMPORTS | {"SCHEMA_VERSION", "get_last_init_error"}:
        assert hasattr(ours, name), name
    assert set(ours.__all__) >= (AGENT_IMPORTS | {"SCHEMA_VERSION", "get_last_init_error"}) - {"_db_opens_cleanly"}


def test_schema_version_is_what_a_new_file_carries(tmp_path):
    with ours.SessionDB(tmp_path / "state.db") as db:
        stamped = db._conn.execute("SELECT version FROM schema_version").fetchone()[0]
    assert ours.SCHEMA_VERSION == stamped == 30


def test_default_db_path_is_upstreams(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_STATE_DATABASE_URL", None)
    show = "import {m} as h; print(h.DEFAULT_DB_PATH, type(h.DEFAULT_DB_PATH).__mro__[1].__name__)"
    mine = subprocess.run([sys.executable, "-c", show.format(m="hermes_store.agent.hermes_state")],
                          env=env, capture_output=True, text=True, check=True).stdout.split()
    theirs = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.append({str(agent_root())!r}); "
         + show.format(m="hermes_state")], env=env, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert mine[0] == theirs[0] == str(home / "state.db")
    assert isinstance(ours.DEFAULT_DB_PATH, Path)


def test_workspace_key_side_by_side(upstream):
    rows = [{"git_repo_root": "/r", "cwd": "/r/sub"}, {"git_repo_root": "  ", "cwd": " /w "},
            {"git_repo_root": None, "cwd": None}, {}, {"cwd": ""}, {"git_repo_root": "/only"}]
    assert [ours.workspace_key(r) for r in rows] == [upstream.workspace_key(r) for r in rows]
    assert ours.workspace_key(rows[1]) == "/w"


def test_init_error_is_recorded_and_formatted(upstream, tmp_path):
    bad = tmp_path / "state.db"
    bad.write_bytes(b"this is not a database" * 100)
    for module in (ours, upstream):
        assert module.format_session_db_unavailable() == "Session database not available."
        assert module.get_last_init_error() is None
        with pytest.raises(sqlite3.DatabaseError):
            module.SessionDB(db_path=bad)
        cause = module.get_last_init_error()
        assert cause and str(module.format_session_db_unavailable("Cannot resume")) == \
            f"Cannot resume: {cause}."
    assert ours.get_last_init_error().startswith("NotADatabaseError: ")
    assert "hermes-store recover" in ours.get_last_init_error()
    # a later successful open does not clear the cause (another thread may be formatting it)
    ours.SessionDB(tmp_path / "good.db").close()
    assert ours.get_last_init_error().startswith("NotADatabaseError: ")


def test_a_network_filesystem_cause_gets_a_hint(upstream):
    for module in (ours, upstream):
        module._set_last_init_error("OperationalError: locking protocol")
        plain = "Session database not available: OperationalError: locking protocol."
        text = module.format_session_db_unavailable()
        assert text.startswith(plain[:-1]) and text.endswith(".") and len(text) > len(plain)
    assert "NFS" in ours.format_session_db_unavailable()


class _RefusingWal:
    """A sqlite3 connection on a filesystem that refuses WAL, as NFS does."""

    def __init__(self, conn, message="locking protocol"):
        self.conn, self.message, self.sent = conn, message, []

    def execute(self, sql, *args):
        self.sent.append(sql)
        if sql.replace(" ", "").upper() == "PRAGMAJOURNAL_MODE=WAL":
            raise sqlite3.OperationalError(self.message)
        return self.conn.execute(sql, *args)


def test_apply_wal_with_fallback_side_by_side(upstream, tmp_path, caplog):
    for i, module in enumerate((ours, upstream)):
        conn = sqlite3.connect(tmp_path / f"k{i}.db")
        assert module.apply_wal_with_fallback(conn, db_label="kanban.db") == "wal"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert module.apply_wal_with_fallback(conn) == "wal"  # already WAL: left alone
        conn.close()

        fresh = sqlite3.connect(tmp_path / f"nfs{i}.db")
        refusing = _RefusingWal(fresh)
        caplog.clear()
        logger = "hermes_store.agent" if module is ours else "hermes_state"
        with caplog.at_level(logging.WARNING, logger=logger):
            assert module.apply_wal_with_fallback(refusing, db_label=f"nfs-{i}.db") == "delete"
            assert module.apply_wal_with_fallback(_RefusingWal(fresh), db_label=f"nfs-{i}.db") == "delete"
        assert fresh.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert len([r for r in caplog.records if f"nfs-{i}.db" in r.getMessage()]) == 1

        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            module.apply_wal_with_fallback(_RefusingWal(fresh, "disk I/O error"))
        fresh.close()


def test_is_malformed_db_error_side_by_side(upstream):
    cases = [sqlite3.DatabaseError("malformed database schema (messages_fts) - table "
                                   "messages_fts already exists"),
             sqlite3.DatabaseError("database disk image is malformed"),
             sqlite3.OperationalError("database is locked"),
             sqlite3.DatabaseError("file is not a database"),
             ValueError("database disk image is malformed"), RuntimeError("x")]
    assert [ours.is_malformed_db_error(e) for e in cases] == \
        [upstream.is_malformed_db_error(e) for e in cases] == [True, True, False, False, False, False]
    assert ours.is_malformed_db_error(DatabaseDamagedError("x is damaged (...)"))


# --------------------------------------------------------------------------- health and repair

def _pair(tmp_path, stem="upstream-0.19.0-v22") -> tuple[Path, Path]:
    """The same upstream file twice: one for upstream's helpers, one for ours."""
    a, b = tmp_path / "theirs", tmp_path / "mine"
    a.mkdir(), b.mkdir()
    return copy_fixture(stem, a), copy_fixture(stem, b)


def _duplicate_fts_row(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, sql "
                 "FROM sqlite_master WHERE name = 'messages_fts'")
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()


def _break_fts_index(path: Path) -> None:
    """A corrupt FTS5 structure record: reads and integrity_check pass, message writes fail."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE messages_fts_data SET block = X'0000' WHERE id = 10")
    conn.close()


def _count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


def test_a_healthy_file_opens_cleanly_and_needs_no_repair(upstream, tmp_path):
    theirs, mine = _pair(tmp_path)
    assert upstream._db_opens_cleanly(theirs) is None
    assert ours._db_opens_cleanly(mine) is None
    assert ours.repair_state_db_schema(mine) == upstream.repair_state_db_schema(theirs) == {
        "repaired": True, "strategy": "already_healthy", "backup_path": None, "error": None}
    with ours.SessionDB(mine):  # our head file too
        pass
    assert ours._db_opens_cleanly(mine) is None


def test_a_missing_file_is_reported_not_created(upstream, tmp_path):
    for module in (ours, upstream):
        report = module.repair_state_db_schema(tmp_path / "none.db")
        assert report["repaired"] is False and "does not exist" in report["error"]
    assert not (tmp_path / "none.db").exists()


def test_a_file_that_is_not_a_database(upstream, tmp_path):
    for module, name in ((ours, "mine.db"), (upstream, "theirs.db")):
        path = tmp_path / name
        path.write_bytes(b"\x00garbage" * 512)
        before = path.read_bytes()
        assert module._db_opens_cleanly(path)
        assert module.repair_state_db_schema(path)["repaired"] is False
    assert "hermes-store recover" in ours.repair_state_db_schema(tmp_path / "mine.db")["error"]
    assert (tmp_path / "mine.db").read_bytes() == before  # ours leaves it as it was


def test_duplicated_schema_entries_are_healed_with_a_backup(upstream, tmp_path):
    theirs, mine = _pair(tmp_path)
    sessions = _count(mine, "sessions")
    for path in (theirs, mine):
        _duplicate_fts_row(path)
    assert upstream._db_opens_cleanly(theirs) and ours._db_opens_cleanly(mine)
    conn = sqlite3.connect(mine)
    with pytest.raises(sqlite3.DatabaseError) as caught:
        conn.execute("SELECT count(*) FROM sessions").fetchone()
    conn.close()
    assert ours.is_malformed_db_error(caught.value) and upstream.is_malformed_db_error(caught.value)
    expected = upstream.repair_state_db_schema(theirs)
    got = ours.repair_state_db_schema(mine)
    assert got["repaired"] is expected["repaired"] is True
    assert got["strategy"] == expected["strategy"] == "dedup_schema"
    assert Path(got["backup_path"]).is_file()
    assert ours._db_opens_cleanly(mine) is None and _count(mine, "sessions") == sessions


def test_an_fts_index_that_refuses_writes_is_rebuilt(upstream, tmp_path):
    theirs, mine = _pair(tmp_path)
    with ours.SessionDB(mine):  # our head layout
        pass
    messages = _count(mine, "messages")
    for path in (theirs, mine):
        _break_fts_index(path)
    assert upstream._db_opens_cleanly(theirs) is not None
    reason = ours._db_opens_cleanly(mine)
    assert reason is not None
    expected = upstream.repair_state_db_schema(theirs)
    got = ours.repair_state_db_schema(mine)
    assert (got["repaired"], got["strategy"]) == (expected["repaired"], expected["strategy"]) \
        == (True, "rebuild_fts")
    assert Path(got["backup_path"]).is_file()
    assert ours._db_opens_cleanly(mine) is None and _count(mine, "messages") == messages
    with ours.SessionDB(mine) as db:
        assert db.search_messages("the") is not None


# --------------------------------------------------------------------------- AsyncSessionDB

def test_async_session_db_side_by_side(upstream, tmp_path):
    async def drive(module, path):
        db = module.SessionDB(db_path=path)
        adb = module.AsyncSessionDB(db)
        loop_thread = threading.get_ident()
        seen = []
        real = db.get_session

        def spy(sid):
            seen.append(threading.get_ident())
            return real(sid)

        db.get_session = spy
        await adb.create_session("a1", "cli", model="m")
        await adb.append_message("a1", "user", "hello")
        row = await adb.get_session("a1")
        result = (row["id"], row["message_count"], await adb.message_count(),
                  adb._db is db, adb.read_only, seen[0] != loop_thread)
        db.close()
        return result

    mine = asyncio.run(drive(ours, tmp_path / "mine.db"))
    theirs = asyncio.run(drive(upstream, tmp_path / "theirs.db"))
    assert mine == theirs == ("a1", 1, 1, True, False, True)


def test_the_agents_lock_api_probe_sees_our_class(monkeypatch, tmp_path):
    """conversation_compression asks whether the live SessionDB class predates the
    compression locks: ``type(db) is hermes_state.SessionDB`` and no lock method."""
    probe = agent_function("agent/conversation_compression.py", "_lock_api_is_absent_on_session_db",
                           {"inspect": __import__("inspect"), "Any": object})
    monkeypatch.setitem(sys.modules, "hermes_state", ours)
    with ours.SessionDB(tmp_path / "state.db") as db:
        assert probe(db) is False
        assert type(db) is ours.SessionDB


# --------------------------------------------------------------------------- private uses

#: receivers of upstream-private names that are not the session store (survey)
_NOT_THE_STORE = {
    ("plugins/memory/holographic/__init__.py", "_conn"),   # its own MemoryStore
    ("plugins/memory/holographic/retrieval.py", "_conn"),
    ("plugins/platforms/discord/adapter.py", "_conn"),     # a socket
    ("plugins/platforms/discord/adapter.py", "_lock"),
    ("tools/process_registry.py", "_lock"),                # a process session
    ("gateway/run.py", "_lock"),                           # the gateway SessionStore
}


def _private_names_of_upstreams_classes() -> set[str]:
    tree = ast.parse(agent_source("hermes_state.py"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in ("SessionDB", "AsyncSessionDB"):
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                        and n.value.id == "self" and n.attr.startswith("_") \
                        and not n.attr.startswith("__"):
                    names.add(n.attr)
                if isinstance(n, ast.FunctionDef) and n.name.startswith("_") \
                        and not n.name.startswith("__"):
                    names.add(n.name)
    return names


def test_the_agent_reaches_only_into_conn_execute_write_and_the_async_db(tmp_path):
    private = _private_names_of_upstreams_classes()
    attribute = re.compile(r"([\w\.\)\]]+)\.(_[A-Za-z]\w*)\b")
    by_name = re.compile(r"(?:getattr|hasattr)\(\s*([\w\.]+)\s*,\s*[\"'](_[A-Za-z]\w*)[\"']")
    used: dict[str, set[str]] = {}
    for path in agent_root().rglob("*.py"):
        rel = path.relative_to(agent_root()).as_posix()
        if rel == "hermes_state.py" or "/tests/" in f"/{rel}":
            continue
        text = re.sub(r"#[^\n]*", "", path.read_text(encoding="utf-8", errors="replace"))
        for receiver, name in attribute.findall(text) + by_name.findall(text):
            if name in private and receiver not in ("self", "cls") \
                    and (rel, name) not in _NOT_THE_STORE:
                used.setdefault(name, set()).add(rel)
    assert used == {
        "_conn": {"agent/insights.py", "hermes_cli/web_server.py", "hermes_cli/main.py",
                  "hermes_cli/cli_agent_setup_mixin.py", "tools/session_search_tool.py"},
        "_execute_write": {"gateway/platforms/api_server.py"},
        "_db": {"gateway/run.py", "gateway/slash_commands.py", "plugins/platforms/telegram/adapter.py"},
    }
    with ours.SessionDB(tmp_path / "state.db") as db:
        adb = ours.AsyncSessionDB(db)
        assert adb._db is db and db._conn is not None and callable(db._execute_write)


def test_an_agent_process_runs_the_store_on_the_agents_own_sqlite3():
    """hermes-agent opens state.db with the standard library's sqlite3 itself (doctor,
    backup, the gateway's readiness check): two SQLite libraries in one process drop
    each other's POSIX locks on a shared file, so the switch's finder makes the store
    use that one too when the agent imports hermes_state — unless
    HERMES_STATE_SQLITE_MODULE says otherwise. (Importing hermes_store.agent.hermes_state
    directly, as these tests do, chooses nothing: the raw connection works on either.)"""
    probe = ("import sys\n"
             "from hermes_store.agent import _finder\n"
             "sys.meta_path.insert(0, _finder)\n"
             "import hermes_state\n"
             "assert hermes_state.__name__ == 'hermes_store.agent.hermes_state'\n"
             "from hermes_store.backends.sqlite.library import library\n"
             "print(library().name, library().chosen_by)")
    env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_SQLITE_MODULE"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["sqlite3", "argument"]
    try:
        import pysqlite3  # noqa: F401
    except ImportError:
        return
    # an agent process opens state.db with the standard library's sqlite3 itself: the
    # opt-in is overridden there, with a warning (decision D19)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**env, "HERMES_STATE_SQLITE_MODULE": "pysqlite3"})
    assert run.stdout.split() == ["sqlite3", "argument"]
    assert "HERMES_STATE_SQLITE_MODULE=pysqlite3 is overridden" in run.stderr
