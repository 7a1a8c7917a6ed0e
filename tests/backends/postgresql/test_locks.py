"""Scoped write locks on PostgreSQL (issue 17, D16): a unit locks the sessions, titles
and prompts it decides on, and the store only where it must.

Each test holds a real unit open in a thread — a unit that names nothing of its own
(``unit_locks.ROWS``) and calls one public method inside it, so that method's own locks
are what is held — and then runs other public calls beside it: a call that must wait
is seen waiting for an advisory lock in ``pg_locks`` and finishes only once the holder
commits; a call that must not wait finishes while the holder still holds its locks
(with a lock wait far longer than the test, a call that waited would hang, not pass).
The rules across processes (one title, lineage numbering, handoff claims, appenders)
are in ``tests/repository/test_concurrency.py`` and ``test_handoff.py``, on both
engines.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, TitleError, schema, unit_locks
from hermes_store.errors import SessionNotFoundError
from hermes_store.unit_locks import ROWS, STORE, HeldLocks, Locks
from hermes_store.units import RetryPolicy

#: waits for a lock for as long as any test runs: a call that waits blocks, never retries
PATIENT = RetryPolicy(attempts=2, busy_timeout=60.0, jitter_min=0.0, jitter_max=0.001)
PROMPT = "You are Hermes. " * 10


def _waiting_advisory(db: SessionDB) -> int:
    """Advisory lock requests not granted in this store's database."""
    with db.engine.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND NOT l.granted "
            "AND d.datname = current_database()").scalar()


class Holder:
    """A unit held open in a thread: ``inside(db)`` runs in it (a public method, whose
    locks the unit then holds), then the unit waits until ``release()``."""

    def __init__(self, db: SessionDB, inside, locks: Locks = ROWS) -> None:
        self.ready, self.done = threading.Event(), threading.Event()
        self.error: BaseException | None = None

        def unit(conn):
            inside(db)
            self.ready.set()
            assert self.done.wait(60)

        def run():
            try:
                db._write(unit, locks=locks)
            except BaseException as exc:  # noqa: BLE001 - re-raised by release()
                self.error = exc
                self.ready.set()

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.ready.wait(30) and self.error is None, self.error

    def release(self) -> None:
        self.done.set()
        self.thread.join(30)
        if self.error is not None:
            raise self.error


class Call:
    """A public call in a thread of its own; ``result()`` waits for it."""

    def __init__(self, fn, *args, **kwargs) -> None:
        self.value = self.error = None
        self.finished = threading.Event()

        def run():
            try:
                self.value = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to result()
                self.error = exc
            self.finished.set()

        threading.Thread(target=run, daemon=True).start()

    def result(self, timeout: float = 30):
        assert self.finished.wait(timeout), "the call did not finish"
        if self.error is not None:
            raise self.error
        return self.value


def _must_wait(db: SessionDB, call: Call, before: int = 0) -> None:
    deadline = time.monotonic() + 15
    while _waiting_advisory(db) <= before:
        assert not call.finished.is_set(), f"finished without waiting ({call.error!r})"
        assert time.monotonic() < deadline, "never seen waiting for a lock"
        time.sleep(0.02)
    assert not call.finished.is_set()


@pytest.fixture
def db(pg_url):
    store = SessionDB(pg_url, retry=PATIENT)
    for sid in ("a", "b"):
        store.create_session(sid, "telegram", system_prompt=PROMPT)
    yield store
    store.close()


def _usage(db, sid):
    db.update_token_counts(sid, input_tokens=10, output_tokens=2, model="m",
                           billing_provider="p", api_call_count=1)


# One session's units, as an agent turn and its gateway run them.
SESSION_UNITS = {
    "append_message": lambda db, s: db.append_message(s, "user", "hi"),
    "append_messages": lambda db, s: db.append_messages(s, [{"role": "user", "content": "x"}]),
    "update_token_counts": _usage,
    "record_auxiliary_usage": lambda db, s: db.record_auxiliary_usage(s, "vision", input_tokens=1),
    "set_session_title": lambda db, s: db.set_session_title(s, f"Title of {s}"),
    "create_session": lambda db, s: db.create_session(s, "telegram", model="m"),
    "end_session": lambda db, s: db.end_session(s, "user_exit"),
    "update_system_prompt": lambda db, s: db.update_system_prompt(s, PROMPT),
    "request_handoff": lambda db, s: db.request_handoff(s, "telegram"),
    "try_acquire_compression_lock": lambda db, s: db.try_acquire_compression_lock(s, "me"),
    "replace_messages": lambda db, s: db.replace_messages(s, [{"role": "user", "content": "y"}]),
}


@pytest.mark.parametrize("held", ["update_token_counts", "append_message", "set_session_title"])
def test_units_of_different_sessions_do_not_wait_for_each_other(db, held):
    holder = Holder(db, lambda d: SESSION_UNITS[held](d, "a"))
    try:
        for name, call in SESSION_UNITS.items():
            call(db, "b")  # would block (PATIENT) if it waited for session a's unit
        db.create_session("c", "cli", system_prompt=PROMPT)  # a new session, same prompt
        db.append_message("c", "user", "hello")
        assert _waiting_advisory(db) == 0
    finally:
        holder.release()
    assert db.get_session("b")["title"] == "Title of b"


@pytest.mark.parametrize("name", sorted(SESSION_UNITS))
def test_units_of_one_session_wait_for_each_other(db, name):
    holder = Holder(db, lambda d: _usage(d, "a"))
    call = Call(SESSION_UNITS[name], db, "a")
    try:
        _must_wait(db, call)
    finally:
        holder.release()
    call.result()
    assert db.get_session("a")["input_tokens"] >= 10  # the holder's unit committed


def test_a_unit_takes_its_locks_in_its_first_statement(db):
    seen = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda conn, cur, statement, *rest: seen.append(statement))
    db.end_session("a", "user_exit")
    lock, update = seen[-2:]
    # one round trip: the transaction's id (for a lost COMMIT), the store's lock shared,
    # then the session's (its key a parameter)
    assert lock.startswith("SELECT txid_current(), pg_advisory_xact_lock_shared(")
    assert lock.count("pg_advisory_xact_lock(") == 1 and update.startswith("UPDATE sessions")


def test_claims_of_one_title_queue_on_the_title_and_one_wins(db):
    holder = Holder(db, lambda d: d.set_session_title("a", "Deploy"))
    other_title = Call(db.set_session_title, "b", "Something else")
    assert other_title.result() is True  # another title: no wait
    same_title = Call(db.set_session_title, "b", "Deploy")
    try:
        _must_wait(db, same_title)
    finally:
        holder.release()
    with pytest.raises(TitleError, match="already in use by session a"):
        same_title.result()
    assert db.get_session("a")["title"] == "Deploy"
    assert db.get_session("b")["title"] == "Something else"


def test_a_title_handed_over_from_an_ancestor_that_renamed_meanwhile_is_not_cleared(db):
    # b continues a (a ended by compression) and takes a's title; a renames itself at
    # the same moment: the hand-over must not clear a's new title
    db.set_session_title("a", "Deploy")
    db.end_session("a", "compression")
    db.create_session("a2", "telegram", parent_session_id="a")
    holder = Holder(db, lambda d: d.set_session_title("a", "Renamed"))
    takeover = Call(db.set_session_title, "a2", "Deploy")
    try:
        _must_wait(db, takeover)  # it needs a's lock to clear a's title
    finally:
        holder.release()
    assert takeover.result() is True
    assert db.get_session("a")["title"] == "Renamed"
    assert db.get_session("a2")["title"] == "Deploy"


def test_a_delete_holds_its_delegate_runs_and_a_new_child_waits_then_finds_no_parent(db):
    db.create_session("x", "cli")
    db.create_session("d1", "subagent", parent_session_id="x",
                      model_config={"_delegate_from": "x"})
    holder = Holder(db, lambda d: d.delete_session("x"))
    child = Call(db.create_session, "late", "cli", parent_session_id="x")
    append = Call(db.append_message, "d1", "assistant", "a delegate still talking")
    try:
        _must_wait(db, child)
        _must_wait(db, append, before=1)
        db.append_message("a", "user", "an unrelated session goes on")
    finally:
        holder.release()
    with pytest.raises(SessionNotFoundError):
        child.result()
    with pytest.raises(SessionNotFoundError):
        append.result()
    assert db.get_session("x") is None and db.get_session("d1") is None
    assert db.get_session("late") is None


def test_a_prompt_being_dropped_is_stored_again_by_a_session_that_needs_it(db):
    # a and b share PROMPT; b moves away, then a moves away: a's unit deletes the
    # prompt row (nobody references it); c, created meanwhile with that prompt, must
    # find it stored once a's unit has committed
    db.update_system_prompt("b", "another prompt")
    holder = Holder(db, lambda d: d.update_system_prompt("a", "a third prompt"))
    create = Call(db.create_session, "c", "telegram", system_prompt=PROMPT)
    try:
        _must_wait(db, create)
    finally:
        holder.release()
    create.result()
    assert db.get_session("c")["system_prompt"] == PROMPT


def test_units_over_the_whole_store_wait_for_every_unit_and_block_new_ones(db):
    holder = Holder(db, lambda d: _usage(d, "a"))
    prune = Call(db.prune_sessions, older_than_days=None)
    try:
        _must_wait(db, prune)
        beside = Call(db.append_message, "b", "user", "queued behind the prune")
        _must_wait(db, beside, before=1)
    finally:
        holder.release()
    prune.result()
    beside.result()


def test_a_unit_joined_by_one_that_must_run_alone_takes_the_store(db):
    holder = Holder(db, lambda d: d._write(lambda conn: None))  # a STORE unit inside
    call = Call(db.append_message, "b", "user", "waits: the store is held alone")
    try:
        _must_wait(db, call)
    finally:
        holder.release()
    call.result()


# --------------------------------------------------------------------------- Locks


def test_locks_combine_and_what_is_held_is_not_taken_twice():
    both = unit_locks.sessions("a", "b") | unit_locks.title("T") | unit_locks.prompt_users("h")
    assert both.exclusive == {("session", "a"), ("session", "b"), ("title", "T")}
    assert both.shared == {("prompt", "h")}
    assert unit_locks.sessions(None, "") == ROWS and unit_locks.title(None) == ROWS
    # exclusive wins over shared for one name
    assert (unit_locks.prompt_users("h") | unit_locks.prompt_dropper("h")).shared == set()
    held = HeldLocks()
    assert held.missing(ROWS) == ROWS  # nothing held: at least the store, shared
    held.add(both)
    assert held.missing(unit_locks.sessions("a")) is None
    assert held.missing(unit_locks.prompt_users("h")) is None
    assert held.missing(unit_locks.sessions("a", "c")) == unit_locks.sessions("c")
    assert held.missing(STORE) == STORE
    held.add(STORE)
    assert held.missing(unit_locks.sessions("z")) is None


def test_lock_keys_are_stable_and_kinds_never_share_one():
    from hermes_store.backends.postgresql.locks import UNIT_LOCK_KEY, lock_key

    assert lock_key("session", "a") == lock_key("session", "a")
    assert lock_key("session", "T") != lock_key("title", "T")
    assert UNIT_LOCK_KEY not in {lock_key("session", "a"), lock_key("title", "a")}
    assert -(2 ** 63) <= lock_key("session", "\U0001f600" * 50) < 2 ** 63
    # the key of a name is fixed for good: processes of two releases must agree
    assert lock_key("session", "s1") == -4540597457087063439
