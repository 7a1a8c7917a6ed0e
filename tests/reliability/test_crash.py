"""Issue 5, item 2 (and issue 11, item 8, on PostgreSQL): a writer killed with SIGKILL
loses nothing it reported, leaves no half-applied unit, and does not stop the others.

The victim prints each message id only after append_message returned (flushed), so
every printed id is a promise: with synchronous=FULL in WAL mode (PostgreSQL: a
committed transaction) that row must survive the kill. After every kill the store must
open, pass its integrity checks (SQLite: PRAGMA integrity_check and the FTS
integrity-check; PostgreSQL: the FTS layout's check), and each session's counters must
equal its rows (a unit is the message row *and* the counter update: half of it would
show as a mismatch). Both tests run on both engines.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from support import reliability as rs
from hermes_store import SessionDB
from support.reliability import backend, store_target  # noqa: F401

#: kills per run (PostgreSQL: fewer, each victim opens a pooled engine and the checks
#: are client round trips; the test stays a few seconds)
KILLS = {"sqlite": 20, "postgresql": 12}


def _read_until(zygote, predicate, timeout=60):
    """Lines the zygote and its child print, up to and including the one `predicate` wants."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = zygote.stdout.readline()
        if not raw:
            raise AssertionError(f"crash zygote exited:\n{zygote.stderr.read()}")
        record = rs.json_lines(raw)
        if record:
            lines.append(record[0])
            if predicate(record[0]):
                return lines
    raise AssertionError("crash zygote went quiet")


def test_sigkill_at_random_moments_loses_no_committed_append(store_target, backend):
    path = store_target
    kills = KILLS[backend]
    with SessionDB(path) as db:
        db.create_session("crash", source="cli")
    rng = random.Random(20240605)
    promised: dict[int, str] = {}
    killed_with_rows = 0
    zygote = rs.spawn("crash_zygote", path, "crash", stdin=subprocess.PIPE)
    try:
        _read_until(zygote, lambda r: r.get("zygote") == "ready")
        for run in range(kills):
            zygote.stdin.write(f"run {run}\n")
            zygote.stdin.flush()
            seen = set()

            def both(record):  # the zygote's pid line and the child's ready line, any order
                seen.update(k for k in ("child", "ready") if k in record)
                return seen == {"child", "ready"}

            started = _read_until(zygote, both)
            (pid,) = [r["child"] for r in started if "child" in r]
            time.sleep(rng.uniform(0.02, 0.4))
            os.kill(pid, signal.SIGKILL)
            lines = started + _read_until(zygote, lambda r: r.get("reaped") == pid)
            assert lines[-1]["signal"] == signal.SIGKILL, f"the writer died on its own: {lines[-1]}"
            reported = {r["id"]: r["marker"] for r in lines if "id" in r and r.get("run") == run}
            killed_with_rows += bool(reported)
            promised.update(reported)

            # The store opens (SQLite: recovering the hot WAL) ...
            with SessionDB(path) as db:
                assert db.get_session("crash") is not None
            # ... and is whole by SQLite's, the FTS index's and the counters' measure.
            rs.assert_store_whole(path)
            rows = rs.message_ids(path)
            missing = [i for i in promised if i not in rows]
            assert not missing, f"run {run}: appends reported committed are gone: {missing[:10]}"
            for msg_id, marker in promised.items():
                assert rows[msg_id][1].startswith(marker + " "), f"row {msg_id} is not {marker}"
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=30)

    # The kills must have landed while the writer was writing, or the test shows nothing.
    assert killed_with_rows >= kills // 2
    with SessionDB(path) as db:
        found = {h["id"] for h in db.search_messages("crashmark", limit=-1)}
    assert set(promised) <= found
    print(f"\ncrash ({backend}): {kills} SIGKILLs, {len(promised)} reported appends all present, "
          f"{len(rs.message_ids(path))} rows, file whole after every kill")


def test_a_writer_killed_inside_a_unit_leaves_nothing_and_the_others_carry_on(store_target):
    """The victim is inside a unit (a message appended, tokens accounted, the write lock
    or unit lock held) when it is killed, while two writers wait for that lock. Nothing
    of the victim's unit may be visible, the waiting writers must finish without an
    error reaching them, and every append they reported must be stored exactly once."""
    path = store_target
    with SessionDB(path) as db:
        db.create_session("victim", source="cli")
        db.create_session("shared-session", source="gateway")
    victim = rs.spawn("unit_holder", path, "victim")
    writers = []
    try:
        rs.wait_for_line(victim, "inside")
        writers = [rs.spawn("writer", path, w, 24, "shared-session") for w in range(2)]
        time.sleep(1.0)  # let the writers reach the lock the victim holds
        assert victim.poll() is None
        # nothing got past the lock while the victim held it (each writer's first unit
        # creates its own session)
        assert set(rs.session_tokens(path)) == {"victim", "shared-session"}
        victim.kill()
        victim.wait(timeout=30)
        outputs = [rs.finish(w, timeout=120) for w in writers]
    finally:
        for proc in [victim, *writers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    for proc, (out, err) in zip(writers, outputs):
        assert proc.returncode == 0, f"a writer failed after the kill:\n{err}"
    appends = [r for out, _ in outputs for r in rs.json_lines(out) if "id" in r]
    assert len(appends) == 2 * 24

    rows = rs.message_ids(path)
    assert not [r for r in rows.values() if r[1].startswith("halfmark")], "half a unit stayed"
    assert sorted(rows) == sorted(a["id"] for a in appends)  # each once, nothing else
    for a in appends:
        assert rows[a["id"]] == (a["session"], a["marker"])
    rs.assert_store_whole(path)
    assert rs.token_mismatches(path) == []
    assert rs.session_tokens(path)["victim"] == 0
    with SessionDB(path) as db:
        assert db.get_session("victim")["message_count"] == 0
        assert db.get_messages("victim") == []
