"""Issue 5, items 1 and 9: several processes on one file lose nothing and apply nothing twice.

Each writer process appends a fixed number of messages through its own SessionDB (half
to its own session, half to one shared by all), reader processes search and list at
the same time. Every append a writer saw return must be in the file exactly once, the
per-session counters must equal the rows, and no error may reach a caller (a worker
that raised exits non-zero).
"""

from __future__ import annotations

from collections import Counter

import pytest

import relsupport as rs
from hermes_store import SessionDB

SHARED = "shared-session"


def _prepare(path):
    with SessionDB(rs.fresh_store_file(path)) as db:
        db.create_session(SHARED, source="gateway")


def _check_appends(path, reports):
    """Every reported append is present exactly once, in its session, with its text."""
    appends = [r for rep in reports for r in rep if "id" in r]
    ids = [a["id"] for a in appends]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates, f"append ids handed out twice: {duplicates[:10]}"

    rows = rs.message_ids(path)
    for a in appends:
        assert a["id"] in rows, f"append {a} reported committed but is missing"
        assert rows[a["id"]] == (a["session"], a["marker"]), f"row {a['id']} holds {rows[a['id']]}"
    # Nothing extra either: a unit re-run after its commit would leave a second row.
    contents = Counter(content for _, content in rows.values())
    twice = [c for c, n in contents.items() if n > 1]
    assert not twice, f"messages stored twice: {twice[:10]}"
    assert len(rows) == len(appends)
    return appends


def _run_load(path, writers, writes_each, readers, reads_each, policy=()):
    procs = [rs.spawn("writer", path, w, writes_each, SHARED, *policy) for w in range(writers)]
    procs += [rs.spawn("reader", path, reads_each, SHARED) for _ in range(readers)]
    outputs = [rs.finish(p, timeout=150) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, f"{proc.args[1]} failed (an error reached the caller):\n{err}"
    reports = [rs.json_lines(out) for out, _ in outputs]
    return reports[:writers], reports[writers:]


def test_four_writers_two_readers_lose_nothing(tmp_path):
    path = tmp_path / "state.db"
    _prepare(path)
    writes_each, reads_each = 150, 120

    writer_reports, reader_reports = _run_load(path, 4, writes_each, 2, reads_each)

    appends = _check_appends(path, writer_reports)
    assert len(appends) == 4 * writes_each
    rs.assert_store_whole(path)
    with SessionDB(path) as db:
        # Every append is findable through search, not only present in the table.
        found = {hit["id"] for hit in db.search_messages("loadmark", limit=-1)}
        assert {a["id"] for a in appends} <= found
        assert db.message_count(SHARED) == sum(1 for a in appends if a["session"] == SHARED)

    done = [r[-1] for r in writer_reports]
    reads = [r[-1] for r in reader_reports]
    retries = sum(d["retries"] for d in done)
    writes_per_s = sum(d["writes"] for d in done) / max(d["elapsed"] for d in done)
    reads_per_s = sum(r["ops"] for r in reads) / max(r["elapsed"] for r in reads)
    print(f"\nload held: 4 writers x {writes_each} appends, 2 readers x {reads_each} ops: "
          f"{writes_per_s:.0f} writes/s, {reads_per_s:.0f} reader ops/s, {retries} retries")


def test_retries_under_forced_contention_never_apply_a_unit_twice(tmp_path):
    """A busy timeout of 1 ms turns nearly every collision into a retry of the whole
    unit; the retry must re-run only units that did not commit."""
    path = tmp_path / "state.db"
    _prepare(path)
    # busy_timeout 1 ms, plenty of attempts, short jitter: retries, never exhaustion.
    policy = (0.001, 500, 0.005)

    writer_reports, _ = _run_load(path, 4, 80, 0, 0, policy)

    retries = sum(r[-1]["retries"] for r in writer_reports)
    assert retries > 0, "the test produced no contention, so it shows nothing"
    appends = _check_appends(path, writer_reports)
    assert len(appends) == 4 * 80
    assert rs.counter_mismatches(path) == []
    print(f"\nforced contention: {retries} retries, {len(appends)} appends, each stored once")


def test_lock_held_beyond_the_budget_raises_store_busy_and_writes_nothing(tmp_path):
    """User pain (locking): a lock held by another process past the retry budget gives
    a clear StoreBusyError naming the file, not a silent loss or a raw driver error."""
    from hermes_store.engine import RetryPolicy
    from hermes_store.errors import StoreBusyError

    path = tmp_path / "state.db"
    _prepare(path)
    holder = rs.spawn("lock_holder", path, 4)
    try:
        rs.wait_for_line(holder, "locked")
        with SessionDB(path, retry=RetryPolicy(attempts=2, busy_timeout=0.1)) as db:
            with pytest.raises(StoreBusyError) as excinfo:
                db.append_message(SHARED, role="user", content="never stored")
            assert str(path) in str(excinfo.value)
    finally:
        rs.finish(holder)
    assert holder.returncode == 0
    with SessionDB(path) as db:
        assert db.get_messages(SHARED) == []
        assert db.get_session(SHARED)["message_count"] == 0


def test_reads_proceed_while_another_process_holds_the_write_lock(tmp_path):
    """User pain (locking): readers never queue behind a writer (WAL)."""
    path = rs.fresh_store_file(tmp_path / "state.db")
    with SessionDB(path) as db:
        db.create_session(SHARED, source="cli")
        db.append_message(SHARED, role="user", content="visible while locked")
    holder = rs.spawn("lock_holder", path, 3)
    try:
        rs.wait_for_line(holder, "locked")
        with SessionDB(path) as db:
            assert [m["content"] for m in db.get_messages(SHARED)] == ["visible while locked"]
            assert [h["id"] for h in db.search_messages("visible")]
            assert holder.poll() is None, "the read only succeeded after the lock was gone"
    finally:
        rs.finish(holder)
