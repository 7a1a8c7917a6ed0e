"""Row 3: the ``-wal``/``-shm`` generation deleted or replaced under a live store
(upstream #105670, #105567, #110054, #125184).

SQLite keeps writing through the descriptors it holds: after ``rm state.db-wal`` (or a
sibling's close that unlinked both sidecars, or a sibling that made a new generation),
a store's next append "succeeds" into a log no other connection will ever read. The
store must notice before the next write commits (a ``stat`` of each sidecar against
what its connections opened), refuse every write from then on with
``WalGenerationLostError`` naming the file, and leave nothing committed behind: the log
it held is copied aside (never deleted), and the rows acknowledged into it come back by
following the error's own instructions (``recover``).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_store import SessionDB
from hermes_store.cli import app
from hermes_store.errors import StoreReplacedError, WalGenerationLostError
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

#: what a lost log leaves beside the store: the directory it was copied to
PRESERVED = "state.db.orphaned-wal-*"


def _store(tmp_path: Path, oracle: Oracle, appends: int = 5) -> tuple[SessionDB, Path]:
    path = rs.fresh_store_file(tmp_path / "live" / "state.db")
    db = SessionDB(path)
    assert oracle.create_session(db, "s1")
    for i in range(appends):
        assert isinstance(oracle.append(db, "s1", f"acknowledged {i}"), int)
    return db, path


def _refused_from_now_on(db: SessionDB) -> WalGenerationLostError:
    """The next write is refused, and so is every later one (sticky)."""
    with pytest.raises(WalGenerationLostError) as first:
        db.append_message("s1", "user", "after the log was lost")
    with pytest.raises(WalGenerationLostError):
        db.set_session_title("s1", "a title")
    with pytest.raises(WalGenerationLostError):
        db.append_message("s1", "user", "and again")
    assert db.replaced
    return first.value


def _follow_the_instructions(message: str, output: Path) -> Path:
    """Run the ``recover`` command the error names, with ``output`` for NEW.db."""
    found = re.search(r"`(hermes-store [^`]* recover --output NEW\.db)`", message)
    assert found, f"no recover command in: {message}"
    argv = shlex.split(found.group(1).replace("NEW.db", shlex.quote(str(output))))
    output.parent.mkdir(parents=True, exist_ok=True)
    done = CliRunner().invoke(app, argv[1:])
    assert done.exit_code == 0, done.output
    return output


def _sibling(path: Path, how: str) -> dict:
    done = rs.run("wal_sibling", path, how)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_log_unlinked_by_another_process(tmp_path):
    oracle = Oracle()
    db, path = _store(tmp_path, oracle)
    try:
        subprocess.run(["rm", f"{path}-wal", f"{path}-shm"], check=True)
        error = _refused_from_now_on(db)
    finally:
        db.close()
    text = str(error)
    assert isinstance(error, StoreReplacedError) and f"{path}-wal" in text
    assert error.preserved is not None and str(error.preserved) in text
    assert Path(error.preserved, "state.db-wal").is_file()
    # the acknowledged rows were only in the lost log: the instructions bring them back
    recovered = _follow_the_instructions(text, tmp_path / "out" / "recovered.db")
    assert oracle.missing(recovered) == []
    assert_sound(recovered)
    assert_sound(path)
    assert_no_strays(path.parent, PRESERVED)


def test_a_siblings_close_unlinks_the_log_after_a_stray_close_here(tmp_path):
    """Upstream's mechanism: code in this process opens and closes ``state.db`` with its
    own file calls (dropping SQLite's locks, D19), so a sibling's close finds itself
    alone, checkpoints and unlinks both sidecars."""
    oracle = Oracle()
    db, path = _store(tmp_path, oracle)
    try:
        with open(path, "rb") as stray:  # the host's stray open+close
            stray.read(100)
        assert _sibling(path, "close") == {"wal": False, "shm": False}
        error = _refused_from_now_on(db)
    finally:
        db.close()
    assert f"{path}-wal" in str(error)
    # the sibling checkpointed everything before unlinking: the live file has it all,
    # and so does what the instructions recover
    assert oracle.missing(path) == []
    recovered = _follow_the_instructions(str(error), tmp_path / "out" / "recovered.db")
    assert oracle.missing(recovered) == []
    assert_sound(path)
    assert_sound(recovered)
    assert_no_strays(path.parent, PRESERVED)


def test_a_new_generation_made_by_a_live_sibling(tmp_path):
    """A sibling unlinks both sidecars and goes on writing into a new log of its own; the
    store must neither write to its old log nor touch the sibling's."""
    oracle, siblings = Oracle(), Oracle()
    db, path = _store(tmp_path, oracle)
    try:
        report = _sibling(path, "replace")
        siblings.acknowledge(report["id"], report["session"], report["content"])
        error = _refused_from_now_on(db)
    finally:
        db.close()
    assert Path(f"{path}-wal").exists()  # the sibling's log, left where it is
    assert siblings.missing(path) == []
    recovered = _follow_the_instructions(str(error), tmp_path / "out" / "recovered.db")
    assert oracle.missing(recovered) == []
    assert_sound(path)
    assert_sound(recovered)
    assert_no_strays(path.parent, PRESERVED)


def test_the_shm_alone_unlinked(tmp_path):
    """The log is intact at its path: nothing needs copying, but two processes would no
    longer share one index of it, so writes are refused all the same."""
    oracle = Oracle()
    db, path = _store(tmp_path, oracle)
    try:
        subprocess.run(["rm", f"{path}-shm"], check=True)
        error = _refused_from_now_on(db)
    finally:
        db.close()
    assert f"{path}-shm" in str(error) and error.preserved is None
    assert "intact" in str(error)
    assert oracle.missing(path) == []  # everything is in the log at the path
    assert_sound(path)
    assert_no_strays(path.parent)


def test_a_write_queued_on_the_lock_while_the_log_is_taken_away(tmp_path):
    """A sibling holding the lock copies the log into the file and unlinks it; the
    append that queued on the lock meanwhile would commit into the unlinked log once
    the lock is free (acknowledged, and in no file anyone reads): it is refused before
    its COMMIT, and everything acknowledged before is in the live file."""
    oracle = Oracle()
    db, path = _store(tmp_path, oracle)
    sibling = rs.spawn("wal_unlinker", path, 0.5)
    try:
        rs.wait_for_line(sibling, "locked")
        queued = oracle.append(db, "s1", "queued on the lock")
    finally:
        out, err = rs.finish(sibling)
        db.close()
    assert "released" in out, err
    assert isinstance(queued, WalGenerationLostError), queued
    assert str(path) in str(queued)
    assert oracle.missing(path) == []
    assert_sound(path)
    assert_no_strays(path.parent, PRESERVED)
