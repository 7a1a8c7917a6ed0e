"""Issue 31, row 7: a repair loop as a disk amplifier (upstream #86747, #69603, #87409).

Upstream's agent repaired a damaged file at every start, and each attempt took a full
backup first; the repair kept failing, so one user had 105 attempts and 89 GB of
copies. Here a repair is bounded (``backends/sqlite/files/repair_limits.py``): one
attempt per process and three per file across restarts (a ledger beside the file,
keyed by the file's fingerprint); a backup is skipped when one of the same content is
kept already, and only the newest three are kept; and no copy is made unless the
volume keeps enough free space after it, else the refusal names the figures.

The damage: the full-text indexes' format version set to one FTS5 does not know.
Every write through the index fails, so the agent's check says the store does not open
cleanly, and the index's own 'rebuild' fails too: a repair that cannot succeed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_store import SessionDB
from hermes_store.agent import hermes_state
from hermes_store.cli import app
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

MESSAGES = 20
#: what a repair may leave beside the store
REPAIR_FILES = ("state.db.repair-backup-*", "state.db.schema-backup-*",
                "state.db.repair-ledger.json")


def _damaged_store(directory: Path) -> tuple[Path, Oracle]:
    path = rs.fresh_store_file(directory / "state.db")
    oracle = Oracle()
    with SessionDB(path) as db:
        oracle.create_session(db, "s")
        for i in range(MESSAGES):
            oracle.append(db, "s", f"message {i} " + "text " * 50)
    conn = rs.raw_connect(path)
    try:
        configs = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'messages_fts%config'")]
        for table in configs:
            conn.execute(f"UPDATE {table} SET v = 99 WHERE k = 'version'")
    finally:
        conn.close()
    assert configs
    return path, oracle


def _backups(directory: Path, kind: str = "repair-backup") -> list[Path]:
    return sorted(p for p in directory.glob(f"state.db.{kind}-*")
                  if not p.name.endswith(("-wal", "-shm")))


def _attempts(path: Path) -> int:
    ledger = Path(f"{path}.repair-ledger.json")
    if not ledger.exists():
        return 0
    return sum(entry["attempts"] for entry in json.loads(ledger.read_text())["files"].values())


def _agent_start(path: Path) -> dict:
    """One start of the agent, in a process of its own: check, then repair."""
    done = rs.run("agent_repair", path)
    assert done.returncode == 0, done.stderr
    result = rs.json_lines(done.stdout)[-1]
    assert result["reason"] is not None  # the damage is real, at every start
    return result["report"]


def _assert_rows_kept(path: Path, oracle: Oracle) -> None:
    assert oracle.missing(path) == []
    assert_sound(path, fts=False)  # the index damage is the one no repair could heal


def test_a_failing_repair_at_every_start_is_bounded(tmp_path):
    path, oracle = _damaged_store(tmp_path)
    reports = []
    for _start in range(10):
        reports.append(_agent_start(path))
        assert len(_backups(tmp_path)) <= 1  # the same content is copied once
    assert all(r["repaired"] is False and r["error"] for r in reports), reports
    assert _attempts(path) <= 3
    refused = [r for r in reports if "attempts" in r["error"] and "refused" in r["error"]]
    assert len(refused) >= 7, [r["error"] for r in reports]
    assert "hermes-store recover" in refused[-1]["error"]
    assert refused[-1]["backup_path"] is None
    _assert_rows_kept(path, oracle)
    assert_no_strays(tmp_path, *REPAIR_FILES)


def test_one_attempt_per_process(tmp_path):
    path, oracle = _damaged_store(tmp_path)
    first = hermes_state.repair_state_db_schema(path)
    second = hermes_state.repair_state_db_schema(path)
    assert first["error"] and first["backup_path"]
    assert "this process" in second["error"] and second["backup_path"] is None
    assert len(_backups(tmp_path)) == 1 and _attempts(path) == 1
    _assert_rows_kept(path, oracle)
    assert_no_strays(tmp_path, *REPAIR_FILES)


def test_never_more_than_three_backups_kept(tmp_path):
    path, oracle = _damaged_store(tmp_path)
    taken = []
    for n in range(4):
        # the file changes between starts (the agent wrote): another content, another
        # fingerprint, so another attempt and another backup
        conn = rs.raw_connect(path)
        conn.execute("INSERT OR REPLACE INTO state_meta (key, value) VALUES ('n', ?)", (str(n),))
        conn.close()
        report = _agent_start(path)
        assert report["backup_path"], report
        taken.append(report["backup_path"])
        assert len(_backups(tmp_path)) <= 3
    assert len(set(taken)) == 4
    assert {str(b) for b in _backups(tmp_path)} == set(taken[-3:])  # the newest three
    _assert_rows_kept(path, oracle)
    assert_no_strays(tmp_path, *REPAIR_FILES)


# --------------------------------------------------------------------------- a full volume

@pytest.fixture
def small_volume(tmp_path, monkeypatch):
    """A 64 MiB tmpfs: less free space than any repair copy needs beside it. Where no
    filesystem can be mounted (not root, or a container without the capability), the
    free-space probe answers as that volume would."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        from hermes_store.backends.sqlite.files import repair_limits

        monkeypatch.setattr(repair_limits, "volume_space", lambda _directory: (60 << 20, 64 << 20))
        yield mount
        return
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _duplicate_fts_entry(path: Path) -> None:
    """The one damage ``maintenance repair`` heals (upstream #43149): a second
    ``sqlite_master`` row for ``messages_fts``."""
    conn = rs.raw_connect(path)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, sql "
                     "FROM sqlite_master WHERE name = 'messages_fts'")
    finally:
        conn.close()


def _assert_figures(message: str) -> None:
    assert "bytes free" in message and "needs" in message, message
    assert "nothing was copied or changed" in message.lower(), message


def test_no_copy_without_room_on_the_volume(small_volume):
    path, oracle = _damaged_store(small_volume)
    before = rs.fingerprint(path)
    report = hermes_state.repair_state_db_schema(path)
    assert report["repaired"] is False and report["backup_path"] is None
    _assert_figures(report["error"])
    wal = Path(f"{path}-wal")  # (the check before the repair opened it: an empty log)
    assert rs.fingerprint(path) == before and (not wal.exists() or wal.stat().st_size == 0)
    assert _backups(small_volume) == [] and _attempts(path) == 0  # not an attempt
    _assert_rows_kept(path, oracle)
    assert_no_strays(small_volume)  # no copy, and no ledger: nothing was attempted


def test_the_cli_repair_needs_room_too(small_volume):
    path = rs.fresh_store_file(small_volume / "state.db")
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "kept")
    _duplicate_fts_entry(path)
    before = rs.fingerprint(path)
    result = CliRunner().invoke(app, ["--db", str(path), "maintenance", "repair"],
                                env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code != 0
    _assert_figures(result.output)
    assert rs.fingerprint(path) == before and _backups(small_volume, "schema-backup") == []
    assert_no_strays(small_volume)
