"""Issue 31, row 8: a zero-length or all-zero-header state.db (upstream #102198, #97568,
#68474).

A crash on a filesystem that loses data can leave ``state.db`` empty (0 bytes) or
zeroed (NUL bytes where SQLite's header belongs), sometimes beside a ``-wal`` that still
holds the last commits. Nothing in such a file can be read, so nothing is lost by
moving it: the store sets it aside (renamed with a UTC time, its sidecars with it,
never deleted), starts a fresh store at the path and says where the old file went.
SQLite itself must not open an empty file that has a log: it deletes that log, even
on a read-only open. Any other file that is not SQLite is refused as before.

A zero-length file is "found" only when it was not just created: a new file another
opener is giving its schema is zero bytes for a moment too. So an empty file is set
aside when it has a sidecar beside it, or is older than ``blank.NEW_FILE_SECONDS``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.errors import NotADatabaseError
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

LOGGER = "hermes_store.backends.sqlite"
SIDECARS = ("-wal", "-shm", "-journal")


def _set_aside(directory: Path, kind: str) -> list[Path]:
    """The set-aside database files (not their sidecars) of ``kind`` in ``directory``."""
    return sorted(p for p in directory.glob(f"state.db.{kind}-*")
                  if not p.name.endswith(SIDECARS))


def _crashed_with_log(directory: Path) -> tuple[Path, Oracle]:
    """A store whose writer was killed before any checkpoint, and whose file then lost
    its data (0 bytes) while its ``-wal`` survived."""
    directory.mkdir()
    path = directory / "state.db"
    done = rs.run("killed_in_wal", path, 12)
    assert done.returncode == -signal.SIGKILL, done.stderr
    oracle = Oracle()
    for ack in rs.json_lines(done.stdout):
        oracle.acknowledge(ack["id"], ack["session"], ack["content"])
    assert len(oracle.messages) == 12
    os.truncate(path, 0)
    return path, oracle


def _missing_from_log(oracle: Oracle, aside: Path) -> list[str]:
    """The acknowledged messages whose rows are not in the set-aside log: each was
    committed into it (its text is in a frame of a ``messages`` page), so the log that
    was kept holds every one (the file's own pages were lost with its data, so SQLite
    cannot read the pair: the bytes are the evidence)."""
    log_bytes = Path(f"{aside}-wal").read_bytes()
    return [content for _session, content in oracle.messages.values()
            if content.encode() not in log_bytes]


def _fresh_store_works(path: Path) -> None:
    oracle = Oracle()
    with SessionDB(path) as db:
        assert db.session_count() == 0
        oracle.create_session(db, "new")
        oracle.append(db, "new", "a fresh start")
    assert oracle.refused == [] and oracle.missing(path) == []
    assert_sound(path)


def test_an_empty_file_with_its_log_is_set_aside(tmp_path, caplog):
    path, oracle = _crashed_with_log(tmp_path / "home")
    log_found = rs.fingerprint(Path(f"{path}-wal"))[0]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _fresh_store_works(path)
    [aside] = _set_aside(path.parent, "empty")
    assert aside.stat().st_size == 0
    assert rs.fingerprint(Path(f"{aside}-wal"))[0] == log_found  # every byte kept
    assert str(aside) in caplog.text
    assert _missing_from_log(oracle, aside) == []
    assert_no_strays(path.parent, "state.db.empty-*")


@pytest.mark.parametrize("zeroed", ["header", "whole file"])
def test_a_zeroed_file_is_set_aside(tmp_path, caplog, zeroed):
    path = rs.fresh_store_file(tmp_path / "state.db")
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "before the crash")
    length = 100 if zeroed == "header" else path.stat().st_size
    subprocess.run([sys.executable, "-c", (  # another process, as the crash did
        "import sys\n"
        "with open(sys.argv[1], 'r+b') as f:\n"
        "    f.write(bytes(int(sys.argv[2])))\n"), str(path), str(length)], check=True)
    found = rs.fingerprint(path)[0]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _fresh_store_works(path)
    [aside] = _set_aside(tmp_path, "zeroed")
    assert rs.fingerprint(aside)[0] == found  # byte for byte what was there
    assert str(aside) in caplog.text and "zero" in caplog.text
    assert_no_strays(tmp_path, "state.db.zeroed-*")


def test_an_old_empty_file_is_set_aside(tmp_path, caplog):
    path = tmp_path / "state.db"
    path.touch(mode=0o600)
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _fresh_store_works(path)
    [aside] = _set_aside(tmp_path, "empty")
    assert str(aside) in caplog.text
    assert_no_strays(tmp_path, "state.db.empty-*")


def test_a_new_empty_file_is_a_new_store(tmp_path, caplog):
    path = tmp_path / "state.db"
    path.touch(mode=0o600)  # as another opener creating the store leaves it, for a moment
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _fresh_store_works(path)
    assert "set aside" not in caplog.text
    assert_no_strays(tmp_path)


def test_two_processes_on_one_zeroed_file(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "with open(sys.argv[1], 'r+b') as f:\n"
        "    f.write(bytes(100))\n"), str(path)], check=True)
    go = tmp_path.parent / f"{tmp_path.name}.go"
    workers = [rs.spawn("open_at_go", path, go, name) for name in ("a", "b")]
    for worker in workers:
        rs.wait_for_line(worker, "ready")
    go.touch()
    oracle = Oracle()
    try:
        for worker in workers:
            out, err = rs.finish(worker)
            assert worker.returncode == 0, err
            ack = rs.json_lines(out)[-1]
            oracle.acknowledge(ack["id"], ack["session"], ack["content"])
    finally:
        go.unlink()
    assert len(_set_aside(tmp_path, "zeroed")) == 1  # set aside once, one fresh store
    assert oracle.missing(path) == []
    assert_sound(path)
    assert_no_strays(tmp_path, "state.db.zeroed-*")


def test_a_read_only_open_and_the_agents_check_leave_it_untouched(tmp_path):
    from hermes_store.agent import hermes_state

    path, oracle = _crashed_with_log(tmp_path / "home")
    watched = [path, Path(f"{path}-wal")]
    before = [rs.fingerprint(p) for p in watched]
    with pytest.raises(NotADatabaseError, match="empty") as refused:
        SessionDB(path, read_only=True)
    assert str(path) in str(refused.value)
    reason = hermes_state._db_opens_cleanly(path)  # the agent's doctor
    assert reason is not None and "empty" in reason
    assert [rs.fingerprint(p) for p in watched] == before  # SQLite never opened it
    # the agent's repair sets it aside and says where
    report = hermes_state.repair_state_db_schema(path)
    assert report["repaired"] is True and report["strategy"] == "set_aside", report
    [aside] = _set_aside(path.parent, "empty")
    assert report["backup_path"] == str(aside)
    assert _missing_from_log(oracle, aside) == []
    _fresh_store_works(path)
    assert_no_strays(path.parent, "state.db.empty-*")


def test_any_other_file_is_refused_as_before(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"just some notes, not a database\n" * 400)
    before = rs.fingerprint(path)
    with pytest.raises(NotADatabaseError, match="hermes-store recover"):
        SessionDB(path)
    assert rs.fingerprint(path) == before
    assert_no_strays(tmp_path)
