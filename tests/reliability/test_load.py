"""Issue 5, items 1 and 9 (and issue 11, item 8, on PostgreSQL): several processes on
one store lose nothing and apply nothing twice.

Each writer process appends a fixed number of messages through its own SessionDB (half
to its own session, half to one shared by all) and accounts tokens on them; reader
processes search, list and check snapshots at the same time. Every append a writer saw
return must be stored exactly once, the per-session counters and token totals must
equal the rows, a reader's snapshot must never hold half a unit, and no error may
reach a caller (a worker that raised exits non-zero). The first two tests run on both
engines (``[sqlite]`` a file, ``[postgresql]`` a database on the suite's server); the
lock-holder tests are about SQLite's file lock (PostgreSQL's unit lock has its own in
``tests/repository/test_concurrency.py``).
"""

from __future__ import annotations

from collections import Counter

import pytest

from support import reliability as rs
from hermes_store import SessionDB
from support.reliability import backend, store_target  # noqa: F401

SHARED = "shared-session"


def _prepare(target):
    with SessionDB(target) as db:
        db.create_session(SHARED, source="gateway")


def _check_tokens(target, reports):
    """Every accounted API call is counted once, in its session and its per-model row."""
    expected: dict[str, int] = {}
    for line in (r for rep in reports for r in rep if "usage" in r):
        expected[line["usage"]] = expected.get(line["usage"], 0) + line["input"]
    assert expected, "no tokens were accounted, so the check shows nothing"
    stored = rs.session_tokens(target)
    assert {sid: stored[sid] for sid in expected} == expected
    assert rs.token_mismatches(target) == []


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


def _run_load(path, writers, writes_each, readers, reads_each, policy=(), go=None):
    """``go`` (a path; with ``policy``): the writers start appending together, once
    every one of them is ready (a process starts in about a second: one started first
    could otherwise be done before the last begins)."""
    extra = (*policy, go) if go is not None else policy
    procs = [rs.spawn("writer", path, w, writes_each, SHARED, *extra) for w in range(writers)]
    if go is not None:
        for proc in procs:
            rs.wait_for_line(proc, "ready")
        go.touch()
    procs += [rs.spawn("reader", path, reads_each, SHARED) for _ in range(readers)]
    outputs = [rs.finish(p, timeout=150) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, f"{proc.args[1]} failed (an error reached the caller):\n{err}"
    reports = [rs.json_lines(out) for out, _ in outputs]
    return reports[:writers], reports[writers:]


def test_four_writers_two_readers_lose_nothing(store_target):
    path = store_target
    _prepare(path)
    # PostgreSQL: fewer, so the test stays a few seconds with six clients and the
    # server's backends on two cores (the figures in docs/reliability.md say which)
    writes_each, reads_each = (80, 60) if rs.is_server(path) else (150, 120)

    writer_reports, reader_reports = _run_load(path, 4, writes_each, 2, reads_each)

    appends = _check_appends(path, writer_reports)
    assert len(appends) == 4 * writes_each
    rs.assert_store_whole(path)
    _check_tokens(path, writer_reports)
    assert all(r[-1]["snapshots"] > 0 for r in reader_reports)
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
    print(f"\nload held ({'PostgreSQL' if rs.is_server(path) else 'SQLite'}): 4 writers x {writes_each} appends, 2 readers x {reads_each} ops: "
          f"{writes_per_s:.0f} writes/s, {reads_per_s:.0f} reader ops/s, {retries} retries")


def test_retries_under_forced_contention_never_apply_a_unit_twice(store_target, tmp_path):
    """A busy timeout of 1 ms turns nearly every collision into a retry of the whole
    unit (PostgreSQL: a lock_timeout of 1 ms on the session row and the unit lock);
    the retry must re-run only units that did not commit."""
    path = store_target
    _prepare(path)
    # busy_timeout 1 ms, plenty of attempts, short jitter: retries, never exhaustion.
    policy = (0.001, 500, 0.005)
    writes_each = 50 if rs.is_server(path) else 80

    writer_reports, _ = _run_load(path, 4, writes_each, 0, 0, policy, go=tmp_path / "go")

    retries = sum(r[-1]["retries"] for r in writer_reports)
    assert retries > 0, "the test produced no contention, so it shows nothing"
    appends = _check_appends(path, writer_reports)
    assert len(appends) == 4 * writes_each
    assert rs.counter_mismatches(path) == []
    _check_tokens(path, writer_reports)
    print(f"\nforced contention ({'PostgreSQL' if rs.is_server(path) else 'SQLite'}): {retries} retries, "
          f"{len(appends)} appends, each stored once")


def test_lock_held_beyond_the_budget_raises_store_busy_and_writes_nothing(tmp_path):
    """User pain (locking): a lock held by another process past the retry budget gives
    a clear StoreBusyError naming the file, not a silent loss or a raw driver error."""
    from hermes_store.units import RetryPolicy
    from hermes_store.errors import StoreBusyError

    path = rs.fresh_store_file(tmp_path / "state.db")
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


@pytest.mark.no_host_sqlite("another process holds the write lock while the test reads and "
                             "checks it still holds it after: a host writer between the "
                             "reads could only wait for that lock")
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
