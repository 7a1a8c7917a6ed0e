"""Issue 10, difference 4: a file whose sqlite_master holds a duplicated full-text entry
("malformed database schema (messages_fts) - table messages_fts already exists",
upstream PR #43149 — users saw no sessions although every row was intact) is healed at
open and by `hermes-store maintenance repair`: a byte-identical timestamped backup
first, then the duplicate rows go, then integrity_check. Every other damage is still
refused untouched, and nothing is healed while another process has the file open.

The damaged files are made the way the bug made them: a second, identical
sqlite_master row for an FTS object, written through writable_schema into a store full
of conversations (a head file, and an upstream 0.19.0 fixture before adoption).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support import reliability as rs
from hermes_store import SessionDB
from hermes_store.cli import app
from hermes_store.errors import DatabaseDamagedError, StoreBusyError, StoreInUseError

SESSIONS = 4
MESSAGES = 25


def _store_with_conversations(path: Path) -> Path:
    with SessionDB(rs.fresh_store_file(path)) as db:
        for s in range(SESSIONS):
            db.create_session(f"s{s}", "telegram" if s % 2 else "cli", model="m")
            db.set_session_title(f"s{s}", f"Conversation {s}")
            for i in range(MESSAGES):
                db.append_message(f"s{s}", role="user" if i % 2 == 0 else "assistant",
                                  content=f"session {s} message {i} about kangaroo{s} deployments")
    return path


def _contents(path: Path) -> dict:
    """Sessions and messages read with plain sqlite3 (from a copy: never touch the file)."""
    probe = path.parent / "contents-probe"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir()
    for suffix in ("", "-wal"):
        if Path(f"{path}{suffix}").exists():
            shutil.copyfile(f"{path}{suffix}", probe / f"state.db{suffix}")
    conn = sqlite3.connect(probe / "state.db")
    try:
        return {
            "sessions": conn.execute("SELECT id, title, message_count FROM sessions ORDER BY id").fetchall(),
            "messages": conn.execute("SELECT id, session_id, role, content FROM messages ORDER BY id").fetchall(),
        }
    finally:
        conn.close()
        shutil.rmtree(probe, ignore_errors=True)


def _duplicate_fts_entry(path: Path, *, name: str = "messages_fts", sql: str | None = None,
                         leave_in_wal: bool = False) -> None:
    """Add a second sqlite_master row for ``name`` (identical unless ``sql`` is given).

    ``leave_in_wal``: the damage stays in the -wal, as when a running Hermes wrote it
    (the files are captured while the writer is still open, before its checkpoint)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA writable_schema=ON")
    added = conn.execute(
        "INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, coalesce(?, sql) "
        "FROM sqlite_master WHERE name = ?", (sql, name),
    ).rowcount
    assert added == 1
    conn.execute("PRAGMA writable_schema=OFF")
    if leave_in_wal:
        image = path.parent / "crash-image"
        image.mkdir()
        for suffix in ("", "-wal"):
            shutil.copyfile(f"{path}{suffix}", image / f"x{suffix}")
        conn.close()
        for suffix in ("", "-wal"):
            shutil.copyfile(image / f"x{suffix}", f"{path}{suffix}")
        Path(f"{path}-shm").unlink(missing_ok=True)
        shutil.rmtree(image)
    else:
        conn.close()


def _refused_by_sqlite(path: Path) -> str | None:
    """The error plain sqlite3 gives on a copy of the file (None when it reads fine)."""
    probe = path.parent / "sqlite-probe"
    probe.mkdir(exist_ok=True)
    for suffix in ("", "-wal"):
        if Path(f"{path}{suffix}").exists():
            shutil.copyfile(f"{path}{suffix}", probe / f"state.db{suffix}")
    conn = sqlite3.connect(probe / "state.db")
    try:
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        return None
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()
        shutil.rmtree(probe)


def _files(path: Path) -> dict[str, bytes]:
    return {s: Path(f"{path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{path}{s}").exists()}


def _backups(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.glob(f"{path.name}.schema-backup-*")
                  if not p.name.endswith(("-wal", "-shm")))


def _schema_rows(path: Path) -> list[tuple]:
    conn = rs.raw_connect(path)
    try:
        return [tuple(r) for r in conn.execute("SELECT type, name FROM sqlite_master")]
    finally:
        conn.close()


def _cli(path: Path, *args: str):
    return CliRunner().invoke(app, ["--db", str(path), *args], env={"COLUMNS": "200", "NO_COLOR": "1"})


# --------------------------------------------------------------------------- healing

def test_open_heals_after_a_byte_identical_backup_and_every_row_is_there(tmp_path):
    path = _store_with_conversations(tmp_path / "state.db")
    before = _contents(path)
    _duplicate_fts_entry(path, leave_in_wal=True)
    assert "already exists" in _refused_by_sqlite(path)  # the damage is real
    damaged = _files(path)
    assert len(damaged["-wal"]) > 0

    with SessionDB(path) as db:
        sessions = sorted((s["id"], s["title"], s["message_count"])
                          for s in db.list_sessions_rich(limit=None))
        messages = [(m["id"], m["session_id"], m["role"], m["content"])
                    for s in range(SESSIONS) for m in db.get_messages(f"s{s}")]
        for s in range(SESSIONS):
            hits = db.search_messages(f"kangaroo{s}", limit=100)
            assert sorted(h["id"] for h in hits) == [m[0] for m in before["messages"] if m[1] == f"s{s}"]
    assert sessions == before["sessions"]
    assert sorted(messages) == before["messages"]

    (backup,) = _backups(path)
    assert re.fullmatch(r"state\.db\.schema-backup-\d{8}T\d{6}Z", backup.name)
    assert backup.read_bytes() == damaged[""]
    assert Path(f"{backup}-wal").read_bytes() == damaged["-wal"]
    assert rs.mode_of(backup) == 0o600
    assert "already exists" in _refused_by_sqlite(backup)  # the damaged original, kept
    assert rs.sqlite_integrity(path) == [] and rs.fts_problems(path) == []
    names = _schema_rows(path)
    assert len(names) == len(set(names)) and names.count(("table", "messages_fts")) == 1

    SessionDB(path).close()  # healed once: a later open has nothing to do
    assert len(_backups(path)) == 1


def test_an_upstream_file_with_the_damage_is_healed_then_adopted(tmp_path):
    path = rs.copy_fixture("upstream-0.19.0-v22", tmp_path)
    before = _contents(path)
    _duplicate_fts_entry(path)
    damaged = _files(path)
    assert "already exists" in _refused_by_sqlite(path)
    word_owner = next(m for m in before["messages"] if m[2] == "user" and m[3])
    word = max(re.findall(r"[A-Za-z]{5,}", word_owner[3]), key=len)

    with SessionDB(path) as db:
        assert db.get_meta("fts_storage_version") == "3"  # adopted to head after the heal
        for sid, title, count in before["sessions"]:
            row = db.get_session(sid)
            assert (row["title"], row["message_count"]) == (title, count)
            assert [m["id"] for m in db.get_messages(sid, include_inactive=True)] == \
                [m[0] for m in before["messages"] if m[1] == sid]
        assert word_owner[0] in [h["id"] for h in db.search_messages(word, limit=100)]
    assert _contents(path)["messages"] == before["messages"]
    (backup,) = _backups(path)
    assert backup.read_bytes() == damaged[""]
    rs.assert_store_whole(path)


def test_maintenance_repair_heals_and_reports(tmp_path):
    path = _store_with_conversations(tmp_path / "state.db")
    healthy = _cli(path, "maintenance", "repair")
    assert healthy.exit_code == 0 and "nothing to repair" in healthy.stdout
    assert _backups(path) == []

    _duplicate_fts_entry(path, name="messages_fts_trigram")
    damaged = _files(path)
    result = _cli(path, "maintenance", "repair", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["state"] == "healed" and report["integrity"] == "ok"
    assert [(e["type"], e["name"]) for e in report["removed"]] == [("table", "messages_fts_trigram")]
    (backup,) = _backups(path)
    assert report["backup"][0] == str(backup) and backup.read_bytes() == damaged[""]
    assert rs.sqlite_integrity(path) == [] and rs.fts_problems(path) == []
    again = _cli(path, "--json", "maintenance", "repair")
    assert again.exit_code == 0 and json.loads(again.stdout)["state"] == "healthy"


# --------------------------------------------------------------------------- refusals

def _assert_refused_untouched(path: Path, expect: str):
    before = {p: rs.fingerprint(p) for p in (path, Path(f"{path}-wal")) if p.exists()}
    with pytest.raises(DatabaseDamagedError) as excinfo:
        SessionDB(path)
    assert expect in str(excinfo.value) and str(path) in str(excinfo.value)
    cli = _cli(path, "maintenance", "repair")
    assert cli.exit_code == 4 and "recover" in cli.output
    assert {p: rs.fingerprint(p) for p in before} == before, "a refused file was written"
    assert _backups(path) == []
    return excinfo.value


def test_a_read_only_open_does_not_heal_and_names_the_repair_command(tmp_path):
    path = _store_with_conversations(tmp_path / "state.db")
    _duplicate_fts_entry(path)
    before = rs.fingerprint(path)
    with pytest.raises(DatabaseDamagedError, match="maintenance repair"):
        SessionDB(path, read_only=True)
    assert rs.fingerprint(path) == before and _backups(path) == []


@pytest.mark.parametrize("damage", ["sessions table", "differing fts entries", "random pages"])
def test_every_other_damage_is_still_refused_and_left_untouched(tmp_path, damage):
    path = _store_with_conversations(tmp_path / "state.db")
    if damage == "sessions table":
        _duplicate_fts_entry(path, name="sessions")
    elif damage == "differing fts entries":
        _duplicate_fts_entry(path, sql="CREATE VIRTUAL TABLE messages_fts USING fts5(content)")
    else:
        size = path.stat().st_size
        with open(path, "r+b") as fh:
            for page in range(3, size // 4096, 3):
                fh.seek(page * 4096)
                fh.write(os.urandom(4096))
    assert _refused_by_sqlite(path) or rs.sqlite_integrity(path)
    _assert_refused_untouched(path, "hermes-store recover")


def test_no_heal_while_another_process_has_the_file_open(tmp_path):
    path = _store_with_conversations(tmp_path / "state.db")
    holder = rs.spawn("idle_holder", path, stdin=subprocess.PIPE)
    try:
        rs.wait_for_line(holder, "open")
        # The damage appears while the other program still runs with its schema cached.
        _duplicate_fts_entry(path)
        before = {s: rs.fingerprint(Path(f"{path}{s}")) for s in ("", "-wal")}
        with pytest.raises(StoreInUseError) as excinfo:
            SessionDB(path)
        assert isinstance(excinfo.value, StoreBusyError)
        assert "maintenance repair" in str(excinfo.value) and "another connection" in str(excinfo.value)
        cli = _cli(path, "maintenance", "repair")
        assert cli.exit_code == 6, cli.output
        assert {s: rs.fingerprint(Path(f"{path}{s}")) for s in ("", "-wal")} == before
        assert _backups(path) == []
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        rs.finish(holder)
    with SessionDB(path) as db:  # alone now: healed
        assert len(db.search_messages("kangaroo1", limit=100)) == MESSAGES
    assert len(_backups(path)) == 1


def test_a_file_still_damaged_after_the_heal_keeps_its_backup_and_says_so(tmp_path):
    path = _store_with_conversations(tmp_path / "state.db")
    conn = rs.raw_connect(path)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_session'").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    _duplicate_fts_entry(path)
    with open(path, "r+b") as fh:  # an index page the duplicate did not cause
        fh.seek((root - 1) * page_size)
        fh.write(os.urandom(page_size))
    damaged = _files(path)
    with pytest.raises(DatabaseDamagedError) as excinfo:
        SessionDB(path)
    (backup,) = _backups(path)
    message = str(excinfo.value)
    assert str(backup) in message and "hermes-store recover" in message and "still damaged" in message
    assert backup.read_bytes() == damaged[""]
    assert path.exists()  # nothing restored behind the user's back
