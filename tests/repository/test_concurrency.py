"""Write units across real processes, on both engines: the lock is taken before a
unit's body runs (SQLite: BEGIN IMMEDIATE; PostgreSQL: the unit lock), busy units are
re-run whole, a committed unit never runs again, readers see whole units only,
concurrent appenders lose and double nothing, and of two processes claiming one title
exactly one wins."""

from __future__ import annotations

import multiprocessing

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, StoreBusyError, schema
from hermes_store.units import RetryPolicy
from hermes_store.location import resolve
from support.workers import concurrency
from support.repository import backend, db, db_path, db_target  # noqa: F401

SPAWN = multiprocessing.get_context("spawn")
#: a short busy timeout so the contended write goes through several retries quickly
QUICK = RetryPolicy(attempts=40, busy_timeout=0.1, jitter_min=0.01, jitter_max=0.03)


def _start_holder(db_target, hold_seconds):
    locked, release = SPAWN.Event(), SPAWN.Event()
    proc = SPAWN.Process(target=concurrency.hold_write_lock,
                         args=(str(db_target), locked, release, hold_seconds))
    proc.start()
    assert locked.wait(30), "lock holder did not start"
    return proc, release


def test_second_writer_waits_at_begin_and_its_unit_runs_once(db_target):
    holder, _release = _start_holder(db_target, hold_seconds=1.5)
    executions = 0
    with SessionDB(db_target, retry=QUICK) as db:
        def unit(conn):
            nonlocal executions
            executions += 1
            conn.execute(sa.insert(schema.state_meta).values(key="second", value="ok"))
        db._write(unit)
        retries = db._units.retries
        holder.join(30)
        assert holder.exitcode == 0
        assert db.get_meta("holder") == "yes" and db.get_meta("second") == "ok"
    # The unit waited for the lock before its body (SQLite: BEGIN IMMEDIATE; PostgreSQL:
    # the unit lock, until lock_timeout): it retried, yet its body ran exactly once.
    assert retries >= 1
    assert executions == 1


@pytest.mark.no_host_sqlite("another process holds the file's write lock for the whole "
                             "test: a host writer could only wait for it and time out")
def test_unit_that_stays_locked_raises_store_busy_after_the_attempts(db_target):
    holder, release = _start_holder(db_target, hold_seconds=60)
    policy = RetryPolicy(attempts=3, busy_timeout=0.05, jitter_min=0.0, jitter_max=0.01)
    executions = 0
    try:
        with SessionDB(db_target, retry=policy) as db:
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
    assert err.value.attempts == 3 and resolve(db_target).display in str(err.value)
    assert "retry later" in str(err.value)
    assert executions == 0  # never started: the lock is taken before the body runs
    with SessionDB(db_target) as db:
        assert db.get_session("s") is None


def test_no_unit_runs_twice_under_contention(db_target):
    with SessionDB(db_target) as db:
        db.set_meta("counter", "0")
    start, results = SPAWN.Event(), SPAWN.Queue()
    units = 25
    workers = [SPAWN.Process(target=concurrency.bump_counter,
                             args=(str(db_target), units, start, results)) for _ in range(2)]
    for w in workers:
        w.start()
    start.set()
    reports = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    with SessionDB(db_target) as db:
        assert int(db.get_meta("counter")) == 2 * units  # no lost and no doubled update
    assert sum(executions for executions, _ in reports) == 2 * units


@pytest.mark.sqlite_only("SQLite's busy error; PostgreSQL's conflicts are the test below")
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


@pytest.mark.parametrize("condition", ["serialization_failure", "deadlock_detected",
                                       "lock_not_available"])
def test_a_unit_failing_on_a_postgresql_conflict_is_rolled_back_and_rerun(pg_url, condition):
    # PostgreSQL's conflicts (SQLSTATE 40001, 40P01, 55P03), raised by the server itself;
    # SQLite's busy case is the test above
    db = SessionDB(pg_url)
    calls = 0

    def unit(conn):
        nonlocal calls
        calls += 1
        conn.execute(sa.insert(schema.state_meta).values(key="k", value=str(calls)))
        if calls == 1:
            conn.exec_driver_sql(
                f"DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '{condition}'; END $$")

    db._write(unit)
    assert calls == 2 and db.get_meta("k") == "2"  # first attempt left nothing behind
    db.close()


def test_nested_units_join_the_outer_unit(db):
    def outer(conn):
        db.create_session("inner", "cli")  # its own _write joins this unit
        assert db.get_session("inner") is not None  # reads see the unit's own changes
        raise RuntimeError("abort the whole unit")

    with pytest.raises(RuntimeError):
        db._write(outer)
    assert db.get_session("inner") is None


def test_reader_never_sees_half_a_unit(db_target):
    with SessionDB(db_target) as db:
        db.create_session("s", "cli")
    start = SPAWN.Event()
    writer = SPAWN.Process(target=concurrency.append_many, args=(str(db_target), "s", 60, start))
    writer.start()
    usage = schema.session_model_usage
    observed = set()
    with SessionDB(db_target) as db:
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


def test_concurrent_appenders_lose_and_double_nothing(db_target):
    # Four processes append at once, two to one shared session and each to one of its
    # own (append_message and append_messages, which run side by side on PostgreSQL):
    # every message is stored once, ids are unique, every counter is exact.
    with SessionDB(db_target) as db:
        for sid in ("shared", "own-0", "own-1", "own-2", "own-3"):
            db.create_session(sid, "cli")
    start, results = SPAWN.Event(), SPAWN.Queue()
    rounds = 15
    workers = [SPAWN.Process(target=concurrency.append_concurrently,
                             args=(str(db_target), n, rounds, start, results))
               for n in range(4)]
    for w in workers:
        w.start()
    start.set()
    reports = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    ids = [i for report in reports for i in report]
    assert len(ids) == len(set(ids)) == 4 * rounds * 4  # per round: 1 + 2 shared, 1 own
    with SessionDB(db_target) as db:
        shared = db.get_messages("shared")
        assert db.get_session("shared")["message_count"] == len(shared) == 4 * rounds * 3
        assert sorted(m["content"] for m in shared) == sorted(
            f"{n}:{r}:{k}" for n in range(4) for r in range(rounds) for k in range(3))
        assert db.get_session("shared")["tool_call_count"] == 4 * rounds
        for n in range(4):
            own = db.get_messages(f"own-{n}")
            assert db.get_session(f"own-{n}")["message_count"] == len(own) == rounds
        assert sorted(m["id"] for s in ("shared", "own-0", "own-1", "own-2", "own-3")
                      for m in db.get_messages(s)) == sorted(ids)


@pytest.mark.parametrize("claimers", [2, 3])
def test_processes_claiming_one_title_at_once_one_wins(db_target, claimers):
    # Each process owns a session and, released together, claims the same title; on
    # either engine exactly one claim succeeds and every other gets upstream's title error.
    rounds = 5
    with SessionDB(db_target) as db:
        for n in range(claimers):
            db.create_session(f"claimer-{n}", "cli")
    go = [SPAWN.Barrier(claimers) for _ in range(rounds)]
    results = SPAWN.Queue()
    workers = [SPAWN.Process(target=concurrency.claim_titles,
                             args=(str(db_target), f"claimer-{n}", rounds, go, results))
               for n in range(claimers)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    by_owner = dict(outcomes)
    for r in range(rounds):
        title = f"Deploy {r}"
        won = [owner for owner, results in by_owner.items() if results[r] == "won"]
        lost = [results[r] for owner, results in by_owner.items() if results[r] != "won"]
        assert len(won) == 1, (title, by_owner)
        assert lost == [f"Title '{title}' is already in use by session {won[0]}"] * (claimers - 1)
    with SessionDB(db_target) as db:  # the last round's winner holds its title
        assert db.get_session_by_title(f"Deploy {rounds - 1}")["id"] == won[0]
        others = [f"claimer-{n}" for n in range(claimers) if f"claimer-{n}" != won[0]]
        assert all(db.get_session(sid)["title"] != f"Deploy {rounds - 1}" for sid in others)


def test_processes_numbering_titles_of_one_lineage_at_once_get_distinct_numbers(db_target):
    # Lineage numbering (``get_next_title_in_lineage``) reads; the claim decides: four
    # processes numbering their own sessions off one base at once end with the base and
    # #2..#4, each exactly once, whichever claim met which (a collision is re-read).
    claimers = 4
    with SessionDB(db_target) as db:
        for n in range(claimers):
            db.create_session(f"numbered-{n}", "cli")
    barrier, results = SPAWN.Barrier(claimers), SPAWN.Queue()
    workers = [SPAWN.Process(target=concurrency.number_title,
                             args=(str(db_target), f"numbered-{n}", "Deploy", barrier, results))
               for n in range(claimers)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    titles = sorted(title for _, title, _ in outcomes)
    assert titles == ["Deploy", "Deploy #2", "Deploy #3", "Deploy #4"], outcomes
    with SessionDB(db_target) as db:
        assert sorted(db.get_session(f"numbered-{n}")["title"] for n in range(claimers)) == titles
