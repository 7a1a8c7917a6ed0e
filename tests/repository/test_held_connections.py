"""Each thread's kept connections (engine.KeptConnections): released by close() whatever
thread holds them, released when their thread ends; the driver door and its Core
fallback give the same answers."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, StoreClosedError, schema
from hermes_store.backends.base import get
from hermes_store.connections import LENT_PER_STORE
from hermes_store.location import resolve
from hermes_store.sql.prebuilt import Prebuilt
from support.repository import copy_head, backend, db, db_path, db_target, other_target  # noqa: F401


def _open_descriptors(path: Path) -> int:
    """Descriptors this process holds on the database file or its sidecars."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") in names:
                count += 1
        except OSError:
            continue
    return count


def _use(db, tag: str) -> None:
    db.create_session(tag, "cli")
    db.append_message(tag, role="user", content=f"hello from {tag}")
    assert db.get_session(tag)["message_count"] == 1
    assert [m["content"] for m in db.get_messages(tag)] == [f"hello from {tag}"]


@pytest.mark.sqlite_only("counts the descriptors this process holds on the file")
def test_close_releases_the_connections_of_threads_still_running(db_path):
    store = SessionDB(db_path)
    ready, finish = threading.Barrier(4), threading.Event()
    after_close: list = []

    def worker(tag):
        _use(store, tag)
        ready.wait()
        finish.wait(30)
        try:
            store.get_session(tag)
        except StoreClosedError as exc:
            after_close.append(exc)

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    ready.wait(30)
    assert _open_descriptors(db_path) > 0
    store.close()
    assert _open_descriptors(db_path) == 0  # the three threads are still alive
    finish.set()
    for t in threads:
        t.join(30)
    assert len(after_close) == 3


@pytest.mark.sqlite_only("kept connections are SQLite's (PostgreSQL checks out per call: "
                         "tests/backends/postgresql/test_store.py)")
def test_a_thread_that_ends_releases_its_connections(db):
    _use(db, "main")

    def run_threads(tags, *, together=False):
        threads = [threading.Thread(target=_use, args=(db, tag)) for tag in tags]
        for t in threads:
            t.start()
            if not together:
                t.join(30)
        for t in threads:
            t.join(30)
        gc.collect()
        return _open_descriptors(db.db_path)

    pool = db.engine.pool
    assert pool.checkedout() == 2  # the main thread's reader and writer
    # Released connections go back to the engine's pool, which keeps a few for the
    # next thread: descriptors do not grow with the number of threads that ended.
    after_two = run_threads(["a0", "a1"])
    assert run_threads([f"b{i}" for i in range(10)]) == after_two
    assert pool.checkedout() == 2
    run_threads([f"c{i}" for i in range(8)], together=True)  # 18 held at once
    # (nine threads: past the store's cap, one borrowed a lent reader and shared a
    # writer, which the store keeps for the next thread past it: connections.py)
    assert pool.checkedout() <= 2 + LENT_PER_STORE + 1
    assert db.session_count() == 21


def _exercise(db) -> list:
    """The prebuilt paths (writes, single-statement reads, snapshots, search shapes)."""
    calls = [{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]
    db.create_session("alpha-1", "telegram", model="m")
    db.create_session("beta-2", "cli", model="m")
    db.append_message("alpha-1", role="user", content="deploy the docker stack", timestamp=10.0)
    db.append_message("alpha-1", role="assistant", content="on it", tool_calls=calls,
                      timestamp=11.0)
    db.append_message("alpha-1", role="tool", content="docker: started", tool_name="terminal",
                      tool_call_id="c1", timestamp=12.0)
    ids = db.append_messages("beta-2", [{"role": "user", "content": "记忆断裂 的 问题",
                                         "timestamp": 20.0},
                                        {"role": "assistant", "content": "docker 记忆",
                                         "timestamp": 21.0}])
    session = db.get_session("alpha-1")
    return [
        ids,
        {k: session[k] for k in ("id", "source", "message_count", "tool_call_count")},
        db.message_count("alpha-1"), db.message_count(), db.session_count(),
        db.session_count(source="cli"), db.resolve_session_id("alpha"),
        db.resolve_session_id("alpha-1"), db.resolve_session_id("zzz"),
        [(m["role"], m["content"]) for m in db.get_messages("alpha-1")],
        [m["content"] for m in db.get_messages("alpha-1", limit=1, offset=1)],
        db.get_messages_as_conversation("alpha-1"),
        [(h["id"], h["snippet"], h["context"]) for h in db.search_messages("docker")],
        [h["id"] for h in db.search_messages("docker", source_filter=["cli"],
                                             role_filter=["assistant", "tool"])],
        [h["id"] for h in db.search_messages("docker", source_filter=[])],
        [h["id"] for h in db.search_messages("docker", sort="newest")],
        [h["id"] for h in db.search_messages("记忆断裂")],
        [h["id"] for h in db.search_messages("记忆")],
        [(r["id"], r["preview"]) for r in db.list_sessions_rich()],
    ]


def test_the_core_fallback_answers_as_the_driver_path_does(db_target, other_target, monkeypatch):
    seen: list = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(context)

    with SessionDB(db_target) as store:
        sa.event.listen(store.engine, "before_cursor_execute", record)
        expected = _exercise(store)
    assert any(context is None for context in seen)  # statements went through the driver

    # a dialect without the door: every statement through Core on the same doors
    monkeypatch.setattr(type(get(resolve(other_target).backend)), "door_drivers", frozenset())
    seen.clear()
    with SessionDB(other_target) as store:
        sa.event.listen(store.engine, "before_cursor_execute", record)
        assert _exercise(store) == expected
    assert seen and all(context is not None for context in seen)


def test_cursor_listeners_added_or_removed_between_units_apply_to_the_next_unit(db):
    # a transaction asks once whether anything listens (driver.listeners_fixed); the
    # answer must never outlive it: the next unit sees a listener added or removed
    seen = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement.split()[0].upper())

    db.create_session("s", "cli")
    db.append_message("s", "user", "before")
    assert seen == []
    sa.event.listen(db.engine, "before_cursor_execute", record)
    db.append_message("s", "user", "watched")
    if db.engine.dialect.name == "sqlite":  # its units BEGIN and COMMIT through the driver
        assert seen[0] == "BEGIN" and seen[-1] == "COMMIT"
    assert "INSERT" in seen and "UPDATE" in seen
    sa.event.remove(db.engine, "before_cursor_execute", record)
    seen.clear()
    db.append_message("s", "user", "after")
    assert seen == []
    assert [m["content"] for m in db.get_messages("s")] == ["before", "watched", "after"]


def test_prebuilt_statements_carry_numbers_in_their_sql_and_bind_text(db):
    # the driver path's compiled form: pysqlite's ``?`` or psycopg's ``%(name)s``
    m = schema.messages
    statement = Prebuilt(sa.select(m.c.id).where(
        m.c.session_id == sa.bindparam("sid", type_=sa.Text), m.c.active == 1,
        sa.func.coalesce(m.c.display_kind, "") != "hidden",
        m.c.timestamp > 1.5))
    form = statement._form(db.engine.dialect)
    assert "messages.active = 1" in form.sql and "messages.timestamp > 1.5" in form.sql
    assert [key for _, key, _, _ in form.slots if key is not None] == ["sid"]
    assert sorted(literal for _, key, _, literal in form.slots if key is None) == ["", "hidden"]
    assert form.named == (db.engine.dialect.name == "postgresql")
    with db._read() as conn:
        assert statement.rows(conn, {"sid": "nobody"}) == []


def test_an_insert_through_the_driver_returns_its_new_id(db):
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "one")
    assert db.append_message("s", "user", "two") == first + 1
    assert [m["id"] for m in db.get_messages("s")] == [first, first + 1]


def test_a_failed_commit_leaves_the_held_writer_usable(db):
    db.create_session("s", "cli")

    def failing(conn):
        conn.execute(sa.insert(schema.state_meta).values(key="k", value="v"))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        db._write(failing)
    assert db.get_meta("k") is None  # rolled back whole
    db.set_meta("k", "after")
    assert db.get_meta("k") == "after"
