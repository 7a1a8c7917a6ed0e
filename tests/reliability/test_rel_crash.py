"""Issue 5, item 2: a writer killed with SIGKILL at random moments loses nothing it
reported and leaves no half-applied unit.

The victim prints each message id only after append_message returned (flushed), so
every printed id is a promise: with synchronous=FULL in WAL mode that row must survive
the kill. After every kill the file must open, pass PRAGMA integrity_check and the FTS
integrity-check, and each session's counters must equal its rows (a unit is the message
row *and* the counter update: half of it would show as a mismatch).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import relsupport as rs
from hermes_store import SessionDB

KILLS = 20


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


def test_sigkill_at_random_moments_loses_no_committed_append(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    with SessionDB(path) as db:
        db.create_session("crash", source="cli")
    rng = random.Random(20240605)
    promised: dict[int, str] = {}
    killed_with_rows = 0
    zygote = rs.spawn("crash_zygote", path, "crash", stdin=subprocess.PIPE)
    try:
        _read_until(zygote, lambda r: r.get("zygote") == "ready")
        for run in range(KILLS):
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

            # The file opens through the store (recovering the hot WAL) ...
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
    assert killed_with_rows >= KILLS // 2
    with SessionDB(path) as db:
        found = {h["id"] for h in db.search_messages("crashmark", limit=-1)}
    assert set(promised) <= found
    print(f"\ncrash: {KILLS} SIGKILLs, {len(promised)} reported appends all present, "
          f"{len(rs.message_ids(path))} rows, file whole after every kill")
