"""Empty and ghost sessions, orphaned compression continuations (issue 10).

Every expectation below is what upstream 0.19.0 answers for the same calls, except
where a test says it does better (a ghost that is a parent).
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, schema
from support.repository import backend, db, db_path, db_target, add_message, set_fields  # noqa: F401
from support.upstream_state import load_hermes_state

OLD = time.time() - 10 * 86400


def _ids(db) -> set[str]:
    return {s["id"] for s in db.search_sessions(limit=None)}


def _count(db, table) -> int:
    with db._read() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def _ended(db, sid, source="cli", **create):
    db.create_session(sid, source, **create)
    db.end_session(sid, "done")


# --------------------------------------------------------------------------- empty

def test_empty_sessions_are_ended_unarchived_and_without_messages(db, tmp_path):
    _ended(db, "empty", system_prompt="only this one uses it")
    db.create_session("live", "cli")  # no message yet, but live: never a candidate
    _ended(db, "kept_archived")
    db.set_session_archived("kept_archived", True)
    _ended(db, "talked")
    add_message(db, "talked", "user", "hello")
    _ended(db, "child", parent_session_id="empty")
    add_message(db, "child", "user", "kept transcript")
    _ended(db, "empty_delegate", parent_session_id="empty", model_config={"_delegate_from": "empty"})
    db.update_token_counts("empty", input_tokens=3, model="m", api_call_count=1)
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    for name in ("empty.json", "request_dump_empty_1.json", "talked.json"):
        (sessions_dir / name).write_text("{}")

    assert db.count_empty_sessions() == 2
    assert db.delete_empty_sessions(sessions_dir=sessions_dir) == 2
    assert _ids(db) == {"live", "kept_archived", "talked", "child"}
    assert db.get_session("child")["parent_session_id"] is None  # detached, transcript kept
    assert [m["content"] for m in db.get_messages("child")] == ["kept transcript"]
    assert _count(db, schema.session_model_usage) == 0
    assert _count(db, schema.system_prompts) == 0
    assert sorted(p.name for p in sessions_dir.iterdir()) == ["talked.json"]
    assert db.count_empty_sessions() == 0
    assert db.delete_empty_sessions() == 0


def test_delete_session_if_empty(db, tmp_path):
    db.create_session("live", "cli", system_prompt="p")  # live sessions qualify
    db.create_session("titled", "cli")
    db.set_session_title("titled", "Keep me")
    db.create_session("rewound", "cli")
    add_message(db, "rewound", "user", "undone", active=0)
    set_fields(db, "rewound", message_count=0)  # any message row counts, not the counter
    db.create_session("parent", "cli")
    db.create_session("kid", "cli", parent_session_id="parent")
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    (sessions_dir / "live.jsonl").write_text("")

    assert db.delete_session_if_empty("live", sessions_dir=sessions_dir) is True
    assert db.get_session("live") is None and not any(sessions_dir.iterdir())
    assert _count(db, schema.system_prompts) == 0
    for sid in ("titled", "rewound", "parent", "missing", ""):
        assert db.delete_session_if_empty(sid) is False, sid
    assert _ids(db) == {"titled", "rewound", "parent", "kid"}
    assert db.delete_session_if_empty("kid") is True
    assert db.delete_session_if_empty("parent") is True  # its child is gone now


# --------------------------------------------------------------------------- ghosts

def _ghost(db, sid, **create):
    _ended(db, sid, "tui", **create)
    set_fields(db, sid, started_at=OLD)


def test_ghost_selection(db, tmp_path):
    _ghost(db, "ghost")
    _ghost(db, "cli_session")
    set_fields(db, "cli_session", source="cli")
    _ghost(db, "titled")
    db.set_session_title("titled", "Named")
    _ghost(db, "spoke")
    add_message(db, "spoke", "user", "hi", active=0)
    db.create_session("live", "tui")
    set_fields(db, "live", started_at=OLD)
    _ended(db, "recent", "tui")  # started less than 24 hours ago
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    (sessions_dir / "ghost.json").write_text("{}")

    assert db.prune_empty_ghost_sessions(sessions_dir=sessions_dir) == 1
    assert _ids(db) == {"cli_session", "titled", "spoke", "live", "recent"}
    assert not any(sessions_dir.iterdir())
    assert db.prune_empty_ghost_sessions() == 0


def test_a_ghost_that_is_a_parent_is_kept_and_the_others_are_pruned(db):
    # Issue 10 item 5: 0.19.0 fails the whole prune with a foreign-key error here.
    _ghost(db, "ghost_a")
    _ghost(db, "ghost_b")
    _ghost(db, "ghost_parent")
    db.create_session("child", "tui", parent_session_id="ghost_parent",
                      model_config={"_delegate_from": "ghost_parent"})
    add_message(db, "child", "user", "the child's transcript")
    # a chain of ghosts above a real session stays whole; a chain of ghosts only goes
    _ghost(db, "grandparent_ghost")
    set_fields(db, "ghost_parent", parent_session_id="grandparent_ghost")
    _ghost(db, "chain_top")
    _ghost(db, "chain_bottom", parent_session_id="chain_top")

    assert db.prune_empty_ghost_sessions() == 4
    assert _ids(db) == {"grandparent_ghost", "ghost_parent", "child"}
    assert db.get_session("child")["parent_session_id"] == "ghost_parent"
    assert db.get_session("ghost_parent")["parent_session_id"] == "grandparent_ghost"
    assert [m["content"] for m in db.get_messages("child")] == ["the child's transcript"]

    # the kept ghosts qualify once the child is gone
    assert db.delete_session("child") is True
    assert db.prune_empty_ghost_sessions() == 2
    assert _ids(db) == set()


def _upstream_ghost_store(hermes_state, path):
    """The scenario of the test above, written by upstream 0.19.0 itself."""
    up = hermes_state.SessionDB(db_path=path)
    for sid in ("ghost_a", "ghost_b", "ghost_parent"):
        up.create_session(sid, "tui")
        up.end_session(sid, "tui_close")
    up.create_session("child", "tui", parent_session_id="ghost_parent")
    up.append_message("child", "user", "the child's transcript")
    up._conn.execute("UPDATE sessions SET started_at = ?", (OLD,))
    up._conn.commit()
    return up


def test_upstream_prunes_no_ghost_when_one_is_a_parent_and_we_prune_the_others(hermes_home, tmp_path):
    hermes_state = load_hermes_state()
    up = _upstream_ghost_store(hermes_state, tmp_path / "upstream.db")
    for _ in range(2):  # every start of the agent fails the same way
        with pytest.raises(Exception, match="FOREIGN KEY constraint failed"):
            up.prune_empty_ghost_sessions()
    assert sorted(r[0] for r in up._conn.execute("SELECT id FROM sessions")) == [
        "child", "ghost_a", "ghost_b", "ghost_parent"]
    up.close()

    # the very file upstream could not clean, opened by hermes_store
    with SessionDB(tmp_path / "upstream.db") as ours:
        assert ours.prune_empty_ghost_sessions() == 2
        assert _ids(ours) == {"ghost_parent", "child"}
        assert ours.get_session("child")["parent_session_id"] == "ghost_parent"
        assert [m["content"] for m in ours.get_messages("child")] == ["the child's transcript"]


# --------------------------------------------------------------------------- compression

def test_finalize_orphaned_compression_sessions(db):
    db.create_session("root", "cli")
    add_message(db, "root", "user", "before compression")
    db.end_session("root", "compression")

    def child(sid, *, parent="root", message=True, old=True, **fields):
        db.create_session(sid, "cli", parent_session_id=parent)
        if message:
            add_message(db, sid, "user", "after compression")
        if old:
            set_fields(db, sid, started_at=OLD)
        if fields:
            set_fields(db, sid, **fields)

    child("orphan")
    child("recent", old=False)
    child("called_api", api_call_count=1)
    child("no_messages", message=False)
    child("ended", ended_at=OLD, end_reason="user_exit")
    child("reason_only", end_reason="x")
    _ended(db, "other_parent")
    child("not_compression", parent="other_parent")
    db.create_session("live_parent", "cli")
    child("parent_live", parent="live_parent")
    set_fields(db, "live_parent", end_reason="compression")  # reason, but never ended

    before = time.time()
    assert db.finalize_orphaned_compression_sessions() == 1
    orphan = db.get_session("orphan")
    assert orphan["end_reason"] == "orphaned_compression" and orphan["ended_at"] >= before
    assert [m["content"] for m in db.get_messages("orphan")] == ["after compression"]
    for sid in ("recent", "called_api", "no_messages", "reason_only", "not_compression",
                "parent_live"):
        assert db.get_session(sid)["ended_at"] is None, sid
    assert db.get_session("ended")["end_reason"] == "user_exit"
    assert db.finalize_orphaned_compression_sessions() == 0


def test_cleanup_methods_refuse_a_read_only_store(db_target):
    from hermes_store.errors import StoreReadOnlyError

    with SessionDB(db_target, read_only=True) as reader:
        assert reader.count_empty_sessions() == 0
        for call in (reader.delete_empty_sessions, reader.prune_empty_ghost_sessions,
                     reader.finalize_orphaned_compression_sessions,
                     lambda: reader.delete_session_if_empty("x")):
            with pytest.raises(StoreReadOnlyError):
                call()


def test_delete_session_if_empty_never_loses_a_message_written_meanwhile(db_target):
    # Another process writes the first message and holds its unit open: the check and
    # the delete wait for that commit, see the message, and keep the session.
    import multiprocessing

    from support.workers import cleanup
    from hermes_store.units import RetryPolicy

    with SessionDB(db_target) as setup:
        setup.create_session("s", "cli")
    spawn = multiprocessing.get_context("spawn")
    written = spawn.Event()
    writer = spawn.Process(target=cleanup.write_first_message_slowly,
                           args=(str(db_target), "s", written, 1.0))
    writer.start()
    assert written.wait(30), "the writer did not start"
    patient = RetryPolicy(attempts=60, busy_timeout=0.1, jitter_min=0.01, jitter_max=0.03)
    with SessionDB(db_target, retry=patient) as db:
        assert db.delete_session_if_empty("s") is False
        retries = db._units.retries
        assert [m["content"] for m in db.get_messages("s")] == ["just in time"]
    writer.join(30)
    assert writer.exitcode == 0
    assert retries >= 1  # it did wait for the other unit
