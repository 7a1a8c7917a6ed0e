"""Write units across real processes: the lock is taken at BEGIN, busy units are
re-run whole, a committed unit never runs again, readers see whole units only."""

from __future__ import annotations

import multiprocessing

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, StoreBusyError, schema
from hermes_store.engine import RetryPolicy
import repo_workers
from repo_helpers import db, db_path  # noqa: F401

SPAWN = multiprocessing.get_context("spawn")
#: a short busy timeout so the contended write goes through several retries quickly
QUICK = RetryPolicy(attempts=40, busy_timeout=0.1, jitter_min=0.01, jitter_max=0.03)


def _start_holder(db_path, hold_seconds):
    locked, release = SPAWN.Event(), SPAWN.Event()
    proc = SPAWN.Process(target=repo_workers.hold_write_lock,
                         args=(str(db_path), locked, release, hold_seconds))
    proc.start()
    assert locked.wait(30), "lock holder did not start"
    return proc, release


def test_second_writer_waits_at_begin_and_its_unit_runs_once(db_path):
    holder, _release = _start_holder(db_path, hold_seconds=1.5)
    executions = 0
    with SessionDB(db_path, retry=QUICK) as db:
        def unit(conn):
            nonlocal executions
            executions += 1
            conn.execute(sa.insert(schema.state_meta).values(key="second", value="ok"))
        db._write(unit)
        retries = db._units.retries
        holder.join(30)
        assert holder.exitcode == 0
        assert db.get_meta("holder") == "yes" and db.get_meta("second") == "ok"
    # The unit waited at BEGIN IMMEDIATE: it retried, yet its body ran exactly once.
    assert retries >= 1
    assert executions == 1


def test_unit_that_stays_locked_raises_store_busy_after_the_attempts(db_path):
    holder, release = _start_holder(db_path, hold_seconds=60)
    policy = RetryPolicy(attempts=3, busy_timeout=0.05, jitter_min=0.0, jitter_max=0.01)
    executions = 0
    try:
        with SessionDB(db_path, retry=policy) as db:
            def unit(conn):
                nonlocal executions
                executions += 1
            with pytest.raises(StoreBusyError) as err:
                db._write(unit)
            with pytest.raises(StoreBusyError):
                db.create_session("s", "cli")
    finally:
        release.set()
        holder.join(30)
    assert err.value.attempts == 3 and str(db_path) in str(err.value)
    assert "retry later" in str(err.value)
    assert executions == 0  # never started: the lock is taken before the body runs
    with SessionDB(db_path) as db:
        assert db.get_session("s") is None


def test_no_unit_runs_twice_under_contention(db_path):
    with SessionDB(db_path) as db:
        db.set_meta("counter", "0")
    start, results = SPAWN.Event(), SPAWN.Queue()
    units = 25
    workers = [SPAWN.Process(target=repo_workers.bump_counter,
                             args=(str(db_path), units, start, results)) for _ in range(2)]
    for w in workers:
        w.start()
    start.set()
    reports = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    with SessionDB(db_path) as db:
        assert int(db.get_meta("counter")) == 2 * units  # no lost and no doubled update
    assert sum(executions for executions, _ in reports) == 2 * units


def test_a_unit_failing_busy_mid_way_is_rolled_back_and_rerun(db):
    calls = 0

    def unit(conn):
        nonlocal calls
        calls += 1
        conn.execute(sa.insert(schema.state_meta).values(key="k", value=str(calls)))
        if calls == 1:
            raise sa.exc.OperationalError("COMMIT", {}, _Busy("database is locked"))

    db._write(unit)
    assert calls == 2 and db.get_meta("k") == "2"  # first attempt left nothing behind


class _Busy(Exception):
    sqlite_errorname = "SQLITE_BUSY"


def test_nested_units_join_the_outer_unit(db):
    def outer(conn):
        db.create_session("inner", "cli")  # its own _write joins this unit
        assert db.get_session("inner") is not None  # reads see the unit's own changes
        raise RuntimeError("abort the whole unit")

    with pytest.raises(RuntimeError):
        db._write(outer)
    assert db.get_session("inner") is None


def test_reader_never_sees_half_a_unit(db_path):
    with SessionDB(db_path) as db:
        db.create_session("s", "cli")
    start = SPAWN.Event()
    writer = SPAWN.Process(target=repo_workers.append_many, args=(str(db_path), "s", 60, start))
    writer.start()
    usage = schema.session_model_usage
    observed = set()
    with SessionDB(db_path) as db:
        start.set()
        while writer.is_alive() or not observed:
            with db._read() as conn:  # one snapshot for every read below
                session = db.get_session("s")
                messages = db.message_count("s")
                per_model = conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(usage.c.input_tokens), 0))
                    .where(usage.c.session_id == "s")
                ).scalar()
            assert session["message_count"] == messages
            assert session["input_tokens"] == per_model
            observed.add(messages)
        writer.join(30)
        assert writer.exitcode == 0
        assert db.get_session("s")["message_count"] == db.message_count("s") == 60
    assert len(observed) > 1  # the reader really ran while the writer wrote


def test_threads_share_one_store(db):
    import threading

    errors = []

    def work(n):
        try:
            for i in range(10):
                db.create_session(f"t{n}-{i}", "cli")
                db.update_token_counts(f"t{n}-{i}", input_tokens=1, api_call_count=1)
                assert db.get_session(f"t{n}-{i}")["input_tokens"] == 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert db.session_count() == 40
