"""Issue 31, row 9: auto-maintenance in two processes at once, or a full VACUUM for
little gain (upstream #54189, #110054).

Every process of the agent (gateway, CLI sessions, cron) runs
``maybe_auto_prune_and_vacuum`` at start. Two starting together both pruned and both
rewrote the whole file; and one pruned session was enough for a VACUUM that rewrites
gigabytes. The store gives auto-maintenance to one process at a time (a non-blocking
cross-process turn: a lock file beside a SQLite file, which its holder unlinks; an
advisory lock on PostgreSQL): the other skips and says so. A SQLite VACUUM runs only
when free pages are a meaningful share of the file, and never on a file latched as
damaged (row 2).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.errors import DatabaseDamagedError
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound
from support.reliability import backend, store_target  # noqa: F401 (fixtures)
from support.repository import set_fields

#: what a run that found the turn taken answers
BUSY = "another process is running auto-maintenance"


def _fill(target, oracle: Oracle, *, old: int, kept: int, words: int = 400) -> None:
    """``old`` ended sessions started long ago (auto-maintenance prunes them) and
    ``kept`` live ones, whose messages the oracle holds the store to."""
    with SessionDB(target) as db:
        for s in range(old):
            db.create_session(f"old{s:03d}", "cli")
            for m in range(8):
                db.append_message(f"old{s:03d}", "user", f"old {s} {m} " + "word " * words)
            db.end_session(f"old{s:03d}", "done")
            set_fields(db, f"old{s:03d}", started_at=1.0)
        for s in range(kept):
            oracle.create_session(db, f"kept{s}")
            for m in range(8):
                oracle.append(db, f"kept{s}", f"kept {s} {m} " + "word " * words)


def _assert_whole(target, oracle: Oracle) -> None:
    if rs.is_server(target):
        assert rs.message_ids(target) == oracle.messages
        rs.assert_store_whole(target)
        return
    assert oracle.missing(target) == []
    assert_sound(target)
    assert_no_strays(Path(target).parent)  # the turn's lock file is gone with its holder


def test_two_processes_at_once_one_runs(store_target, tmp_path):
    oracle = Oracle()
    _fill(store_target, oracle, old=30, kept=3)
    go = tmp_path / "go"
    workers = [rs.spawn("auto_maintenance", store_target, go) for _ in range(2)]
    for worker in workers:
        rs.wait_for_line(worker, "ready")
    go.touch()  # both start now
    results = []
    for worker in workers:
        out, err = rs.finish(worker)
        assert worker.returncode == 0, err
        results.append(rs.json_lines(out)[-1])
    ran = [r for r in results if not r["skipped"]]
    assert len(ran) == 1, results
    assert ran[0]["pruned"] == 30 and "error" not in ran[0]
    skipped = next(r for r in results if r["skipped"])
    assert skipped["pruned"] == 0 and skipped["vacuumed"] is False
    go.unlink()
    _assert_whole(store_target, oracle)


def test_the_turn_taken_elsewhere_is_skipped_and_said(store_target, tmp_path):
    oracle = Oracle()
    _fill(store_target, oracle, old=3, kept=2, words=20)
    holder = rs.spawn("maintenance_holder", store_target, stdin=subprocess.PIPE)
    try:
        rs.wait_for_line(holder, "held")
        with SessionDB(store_target) as db:
            result = db.maybe_auto_prune_and_vacuum(retention_days=30)
            assert result["skipped"] is True and result["pruned"] == 0, result
            assert BUSY in result["reason"]
            assert db.get_meta("last_auto_prune") is None  # the interval did not start
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        rs.finish(holder)
    assert holder.returncode == 0
    with SessionDB(store_target) as db:  # once the holder is done, the turn is free
        assert db.maybe_auto_prune_and_vacuum(retention_days=30)["pruned"] == 3
    _assert_whole(store_target, oracle)


def _pages(path: Path) -> tuple[int, int]:
    conn = rs.raw_connect(path)
    try:
        return (conn.execute("PRAGMA page_count").fetchone()[0],
                conn.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        conn.close()


def test_few_free_pages_are_not_worth_a_vacuum(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    oracle = Oracle()
    _fill(path, oracle, old=1, kept=30)
    with SessionDB(path) as db:
        result = db.maybe_auto_prune_and_vacuum(retention_days=30)
        pages, free = _pages(path)
    assert result["pruned"] == 1 and result["vacuumed"] is False, result
    assert "pages free" in result["reason"]
    assert 0 < free < pages / 4
    assert _pages(path) == (pages, free)  # not rewritten: the free pages are still there
    _assert_whole(path, oracle)


def test_many_free_pages_are_vacuumed(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    oracle = Oracle()
    _fill(path, oracle, old=30, kept=3)
    before = _pages(path)[0]
    with SessionDB(path) as db:
        result = db.maybe_auto_prune_and_vacuum(retention_days=30)
    assert result == {"skipped": False, "pruned": 30, "vacuumed": True}
    pages, free = _pages(path)
    assert pages < before / 2 and free == 0
    _assert_whole(path, oracle)


# --------------------------------------------------------------------------- a latched file

def _overwrite_page(path: Path, page: int) -> None:
    """Another process writes junk over one page, as a failing disk would."""
    subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "path, page = sys.argv[1], int(sys.argv[2])\n"
        "with open(path, 'r+b') as f:\n"
        "    f.seek(16); size = int.from_bytes(f.read(2), 'big') or 65536\n"
        "    f.seek((page - 1) * size); f.write(b'\\xa5' * size)\n"
    ), str(path), str(page)], check=True)


def _a_leaf_of_messages(path: Path) -> int:
    conn = rs.raw_connect(path)
    try:
        return conn.execute("SELECT pageno FROM dbstat WHERE name = 'messages' AND "
                            "pagetype = 'leaf' ORDER BY path LIMIT 1 OFFSET 1").fetchone()[0]
    finally:
        conn.close()


def test_a_latched_file_is_never_vacuumed(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    _fill(path, Oracle(), old=30, kept=3)
    db = SessionDB(path)
    try:
        _overwrite_page(path, _a_leaf_of_messages(path))
        assert db.session_count() == 33  # (a read: the log is open, and empty)
        files = [path, Path(f"{path}-wal")]
        before = [rs.fingerprint(p) for p in files]
        # the prune meets the damage: the file is latched, and nothing is rewritten
        result = db.maybe_auto_prune_and_vacuum(retention_days=30)
        assert result["vacuumed"] is False and "recover" in result["error"], result
        with pytest.raises(DatabaseDamagedError, match="recover"):
            db.vacuum()
        with pytest.raises(DatabaseDamagedError, match="recover"):  # VACUUM itself refuses
            db._backend.vacuum(db._engine, db.target)
        assert [rs.fingerprint(p) for p in files] == before  # not a byte written
    finally:
        db.close()
    # the file is damaged on purpose: its soundness is not the question, its bytes are
    assert_no_strays(tmp_path)
