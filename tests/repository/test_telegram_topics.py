"""Telegram DM topic mode through SessionDB: the opt-in, the per-chat mode and the
topic -> session bindings. Expected values are what upstream 0.19.0 returns when run
with the same calls (see ``test_telegram_topics_side_by_side.py`` for the live
comparison); where we differ on purpose (error classes) the test says so."""

from __future__ import annotations

import multiprocessing

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, migrate
from hermes_store.errors import (
    InvalidArgumentError,
    SessionNotFoundError,
    StoreClosedError,
    StoreReadOnlyError,
)
from hermes_store.location import resolve
from support.repository import add_message, backend, db, db_path, db_target, set_fields  # noqa: F401

SPAWN = multiprocessing.get_context("spawn")
TOPIC_TABLES = {"telegram_dm_topic_mode", "telegram_dm_topic_bindings",
                "alembic_version_telegram_topics"}
BINDING_KEYS = ["chat_id", "thread_id", "user_id", "session_key", "session_id",
                "managed_mode", "linked_at", "updated_at"]


def _tables(target) -> set[str]:
    """The tables of the database (a file or a URL), read outside any store."""
    engine = sa.create_engine(resolve(target).url, poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _topic_revision(target) -> str | None:
    """The revision in the branch's version table (None: no table), read outside any store."""
    if "alembic_version_telegram_topics" not in _tables(target):
        return None
    engine = sa.create_engine(resolve(target).url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(
                "SELECT version_num FROM alembic_version_telegram_topics").scalar_one()
    finally:
        engine.dispose()


def _bind(db, thread, session, *, chat="100", user="7", **kw):
    db.bind_telegram_topic(chat_id=chat, thread_id=thread, user_id=user,
                           session_key=f"k:{chat}:{thread}", session_id=session, **kw)


@pytest.fixture
def sessions(db):
    for sid in ("a", "b", "c"):
        db.create_session(sid, "telegram", user_id="7")
    return db


# --------------------------------------------------------------------------- before opt-in

def test_opening_and_reading_never_create_the_topic_tables(db, db_target):
    db.create_session("t1", "telegram", user_id="7")
    assert db.is_telegram_topic_mode_enabled(chat_id="1", user_id="7") is False
    assert db.get_telegram_topic_binding(chat_id="1", thread_id="2") is None
    assert db.get_telegram_topic_binding_by_session(session_id="t1") is None
    assert db.list_telegram_topic_bindings_for_chat(chat_id="1") == []
    assert db.is_telegram_session_linked_to_topic(session_id="t1") is False
    assert db.delete_telegram_topic_binding(chat_id="1", thread_id="2") == 0
    db.disable_telegram_topic_mode(chat_id="1")
    # Without bindings every Telegram session of the user is "unlinked".
    assert [s["id"] for s in db.list_unlinked_telegram_sessions_for_user(chat_id="1", user_id="7")] == ["t1"]
    db.close()
    SessionDB(db_target).close()
    assert not _tables(db_target) & TOPIC_TABLES
    assert _topic_revision(db_target) is None


def test_apply_creates_the_tables_at_head_and_writes_upstreams_meta_key(db, db_target):
    db.apply_telegram_topic_migration()
    assert _tables(db_target) >= TOPIC_TABLES
    assert db.get_meta("telegram_dm_topic_schema_version") == "2"
    assert _topic_revision(db_target) == migrate.telegram_topics_head() == "t002"
    db.apply_telegram_topic_migration()  # idempotent
    assert migrate.check(db_target).ok


# --------------------------------------------------------------------------- mode

def test_enable_opts_in_and_enables_for_that_user_only(db):
    db.enable_telegram_topic_mode(chat_id=100, user_id=7, has_topics_enabled=True,
                                  allows_users_to_create_topics=False)
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is True
    assert db.is_telegram_topic_mode_enabled(chat_id=100, user_id=7) is True  # ids are text
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="8") is False
    assert db.is_telegram_topic_mode_enabled(chat_id="101", user_id="7") is False
    row = _mode_row(db, "100")
    assert row["user_id"] == "7" and row["enabled"] == 1
    assert (row["has_topics_enabled"], row["allows_users_to_create_topics"]) == (1, 0)
    assert row["activated_at"] == row["updated_at"] == row["capability_checked_at"]
    assert row["intro_message_id"] is None and row["pinned_message_id"] is None


def _mode_row(db, chat):
    import sqlalchemy as sa

    from hermes_store.telegram_schema import telegram_dm_topic_mode as MODE

    with db._read() as conn:
        return dict(conn.execute(sa.select(MODE).where(MODE.c.chat_id == chat)).one()._mapping)


def test_reenabling_keeps_activated_at_and_replaces_owner_and_capabilities(db):
    db.enable_telegram_topic_mode(chat_id="100", user_id="7", has_topics_enabled=True)
    first = _mode_row(db, "100")
    db.disable_telegram_topic_mode(chat_id="100")
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is False
    db.enable_telegram_topic_mode(chat_id="100", user_id="9")
    again = _mode_row(db, "100")
    assert again["activated_at"] == first["activated_at"]
    assert again["updated_at"] > first["updated_at"]
    assert again["user_id"] == "9" and again["enabled"] == 1
    assert again["has_topics_enabled"] is None  # upstream resets what is not given
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is False


def test_disable_clears_the_chats_bindings_unless_asked_to_keep_them(sessions):
    db = sessions
    db.enable_telegram_topic_mode(chat_id="100", user_id="7")
    db.enable_telegram_topic_mode(chat_id="200", user_id="7")
    _bind(db, "1", "a")
    _bind(db, "2", "b", chat="200")
    db.disable_telegram_topic_mode(chat_id="200", clear_bindings=False)
    assert db.is_telegram_topic_mode_enabled(chat_id="200", user_id="7") is False
    assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(chat_id="200")] == ["2"]
    db.disable_telegram_topic_mode(chat_id=100)
    assert db.list_telegram_topic_bindings_for_chat(chat_id="100") == []
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is False
    # the other chat is left alone
    assert db.get_telegram_topic_binding(chat_id="200", thread_id="2")["session_id"] == "b"


# --------------------------------------------------------------------------- bindings

def test_bind_opts_in_and_returns_upstreams_row_shape(sessions):
    db = sessions
    db.bind_telegram_topic(chat_id=100, thread_id=11, user_id=7, session_key="k", session_id="a")
    row = db.get_telegram_topic_binding(chat_id="100", thread_id="11")
    assert list(row) == BINDING_KEYS
    assert {k: row[k] for k in BINDING_KEYS[:6]} == {
        "chat_id": "100", "thread_id": "11", "user_id": "7", "session_key": "k",
        "session_id": "a", "managed_mode": "auto",
    }
    assert row["linked_at"] == row["updated_at"]
    assert db.get_telegram_topic_binding_by_session(session_id="a") == row
    assert db.is_telegram_session_linked_to_topic(session_id="a") is True
    assert db.is_telegram_session_linked_to_topic(session_id="b") is False
    # binding does not enable the chat's mode: that is enable_telegram_topic_mode's job
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is False


def test_binding_a_topic_again_updates_it_and_keeps_linked_at(sessions):
    db = sessions
    _bind(db, "11", "a")
    first = db.get_telegram_topic_binding(chat_id="100", thread_id="11")
    db.bind_telegram_topic(chat_id="100", thread_id="11", user_id="8", session_key="k2",
                           session_id="a", managed_mode="manual")
    again = db.get_telegram_topic_binding(chat_id="100", thread_id="11")
    assert again["linked_at"] == first["linked_at"] and again["updated_at"] > first["updated_at"]
    assert (again["user_id"], again["session_key"], again["managed_mode"]) == ("8", "k2", "manual")
    # the topic can move to a session that is not linked anywhere
    _bind(db, "11", "b")
    assert db.get_telegram_topic_binding(chat_id="100", thread_id="11")["session_id"] == "b"
    assert db.get_telegram_topic_binding_by_session(session_id="a") is None


def test_a_session_linked_to_another_topic_is_refused_with_upstreams_text(sessions):
    db = sessions
    _bind(db, "11", "a")
    before = db.list_telegram_topic_bindings_for_chat(chat_id="100")
    with pytest.raises(ValueError, match="^session is already linked to another Telegram topic$"):
        _bind(db, "12", "a")
    with pytest.raises(InvalidArgumentError):
        _bind(db, "11", "a", chat="101")
    assert db.list_telegram_topic_bindings_for_chat(chat_id="100") == before
    assert db.get_telegram_topic_binding(chat_id="100", thread_id="12") is None


def test_binding_an_unknown_session_or_no_mode_is_refused_and_stores_nothing(sessions):
    db = sessions
    # upstream: sqlite3.IntegrityError (FOREIGN KEY constraint failed); here the package's error
    with pytest.raises(SessionNotFoundError, match="nope"):
        _bind(db, "11", "nope")
    with pytest.raises(InvalidArgumentError, match="managed_mode"):
        _bind(db, "12", "a", managed_mode=None)
    assert db.list_telegram_topic_bindings_for_chat(chat_id="100") == []


def test_bindings_of_a_chat_are_listed_most_recently_updated_first(sessions):
    db = sessions
    _bind(db, "1", "a")
    _bind(db, "2", "b")
    _bind(db, "3", "c")
    _bind(db, "1", "a")  # touched again: newest
    rows = db.list_telegram_topic_bindings_for_chat(chat_id=100)
    assert [r["thread_id"] for r in rows] == ["1", "3", "2"]
    assert all(list(r) == BINDING_KEYS for r in rows)
    assert db.list_telegram_topic_bindings_for_chat(chat_id="101") == []


def test_deleting_the_last_binding_turns_the_chats_mode_off(sessions):
    db = sessions
    db.enable_telegram_topic_mode(chat_id="100", user_id="7")
    _bind(db, "1", "a")
    _bind(db, "2", "b")
    assert db.delete_telegram_topic_binding(chat_id="100", thread_id="9") == 0
    assert db.delete_telegram_topic_binding(chat_id=100, thread_id=1) == 1
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is True
    assert db.delete_telegram_topic_binding(chat_id="100", thread_id="1") == 0
    assert db.delete_telegram_topic_binding(chat_id="100", thread_id="2") == 1
    assert db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7") is False
    assert db.list_telegram_topic_bindings_for_chat(chat_id="100") == []


def test_deleting_a_bound_session_takes_its_binding_with_it(sessions):
    db = sessions
    db.create_session("d", "telegram", user_id="7")
    _bind(db, "1", "a")
    _bind(db, "2", "b")
    _bind(db, "3", "c")
    _bind(db, "4", "d")
    assert db.delete_session("a") is True
    assert db.get_telegram_topic_binding(chat_id="100", thread_id="1") is None
    assert db.delete_sessions(["b"]) == 1
    assert db.is_telegram_session_linked_to_topic(session_id="b") is False
    db.end_session("c", "user_exit")
    set_fields(db, "c", started_at=1.0, ended_at=2.0)
    assert db.prune_sessions(older_than_days=1) == 1
    assert [r["session_id"] for r in db.list_telegram_topic_bindings_for_chat(chat_id="100")] == ["d"]


def test_unlinked_sessions_of_a_user_newest_activity_first_with_preview(sessions):
    db = sessions
    db.create_session("other_user", "telegram", user_id="8")
    db.create_session("cli_same_user", "cli", user_id="7")
    set_fields(db, "a", started_at=100.0)
    set_fields(db, "b", started_at=200.0)
    set_fields(db, "c", started_at=300.0)
    add_message(db, "a", "user", "first line\nsecond line " + "x" * 80, timestamp=400.0)
    add_message(db, "b", "assistant", "not a user message", timestamp=250.0)
    rows = db.list_unlinked_telegram_sessions_for_user(chat_id="100", user_id=7)
    assert [r["id"] for r in rows] == ["a", "c", "b"]
    by_id = {r["id"]: r for r in rows}
    assert by_id["a"]["last_active"] == 400.0 and by_id["c"]["last_active"] == 300.0
    assert by_id["a"]["preview"] == ("first line second line " + "x" * 80)[:60] + "..."
    assert by_id["b"]["preview"] == "" and "_preview_raw" not in by_id["b"]
    assert {"source", "user_id", "title", "started_at", "system_prompt"} <= set(by_id["a"])

    _bind(db, "1", "a")
    assert [r["id"] for r in db.list_unlinked_telegram_sessions_for_user(chat_id="x", user_id="7")] == ["c", "b"]
    assert [r["id"] for r in db.list_unlinked_telegram_sessions_for_user(chat_id="x", user_id="7", limit=1)] == ["c"]
    assert db.list_unlinked_telegram_sessions_for_user(chat_id="x", user_id="7", limit=0) == []
    assert len(db.list_unlinked_telegram_sessions_for_user(chat_id="x", user_id="7", limit=-1)) == 2
    assert db.list_unlinked_telegram_sessions_for_user(chat_id="x", user_id="nobody") == []


# --------------------------------------------------------------------------- store states

def test_a_read_only_store_reads_and_refuses_every_write(db_target):
    with SessionDB(db_target) as db:
        db.create_session("a", "telegram", user_id="7")
        _bind(db, "1", "a")
    with SessionDB(db_target, read_only=True) as ro:
        assert ro.get_telegram_topic_binding(chat_id="100", thread_id="1")["session_id"] == "a"
        for call in (
            ro.apply_telegram_topic_migration,
            lambda: ro.enable_telegram_topic_mode(chat_id="1", user_id="2"),
            lambda: ro.disable_telegram_topic_mode(chat_id="100"),
            lambda: ro.delete_telegram_topic_binding(chat_id="100", thread_id="1"),
            lambda: _bind(ro, "2", "a"),
        ):
            with pytest.raises(StoreReadOnlyError):
                call()
    with SessionDB(db_target) as db:
        assert db.get_telegram_topic_binding(chat_id="100", thread_id="1") is not None


def test_a_read_only_store_never_opts_in(db_target):
    with SessionDB(db_target, read_only=True) as ro:
        with pytest.raises(StoreReadOnlyError):
            ro.enable_telegram_topic_mode(chat_id="1", user_id="2")
    assert not _tables(db_target) & TOPIC_TABLES


def test_a_closed_store_refuses_the_topic_methods(db):
    db.close()
    with pytest.raises(StoreClosedError):
        db.is_telegram_topic_mode_enabled(chat_id="1", user_id="2")
    with pytest.raises(StoreClosedError):
        db.apply_telegram_topic_migration()


def _opt_in(path: str, chat: str, start) -> None:
    with SessionDB(path) as store:
        start.wait(30)
        store.enable_telegram_topic_mode(chat_id=chat, user_id="7")


def test_two_processes_opting_in_at_once_create_the_tables_once(db_target):
    start = SPAWN.Barrier(2)
    workers = [SPAWN.Process(target=_opt_in, args=(str(db_target), chat, start))
               for chat in ("1", "2")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    with SessionDB(db_target) as db:
        assert db.is_telegram_topic_mode_enabled(chat_id="1", user_id="7")
        assert db.is_telegram_topic_mode_enabled(chat_id="2", user_id="7")
    assert _topic_revision(db_target) == "t002"
    assert migrate.check(db_target).ok


#: recorded from ``inspect.signature`` of upstream 0.19.0's SessionDB (annotations dropped)


