"""Rows another program wrote with broken JSON still read (never an exception).

The rows are edited with plain SQL on the store's engine, outside the repository — the
way a buggy third-party writer would — then read through every message read path.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from support.repository import backend, db, db_path, db_target  # noqa: F401


def write_behind(db, sql, **params):
    """Run plain SQL (``:name`` parameters) on the store's engine, as another program."""
    with db.engine.begin() as conn:
        conn.execute(sa.text(sql), params)

BROKEN = "{not json"


@pytest.fixture
def broken(db):
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "please deploy the widget")
    bad_id = db.append_message("s1", "assistant", "deploying widget now",
                               tool_calls=[{"id": "c1"}], reasoning_details=[{"r": 1}],
                               codex_reasoning_items=[{"c": 1}], codex_message_items=[{"m": 1}])
    db.append_message("s1", "user", "multimodal placeholder")
    write_behind(db, "UPDATE messages SET tool_calls = :b, reasoning_details = :b, "
                     "codex_reasoning_items = :b, codex_message_items = :b WHERE id = :id",
                 b=BROKEN, id=bad_id)
    write_behind(db, "UPDATE messages SET content = :c WHERE content = 'multimodal placeholder'",
                 c="\x00json:[{broken")
    return bad_id


def test_get_messages_reads_broken_json(db, broken):
    first, bad, marker = db.get_messages("s1")
    assert bad["tool_calls"] == []  # upstream's fallback: a replayable empty list
    assert bad["reasoning_details"] == BROKEN  # these are returned as stored text anyway
    assert bad["codex_message_items"] == BROKEN
    assert marker["content"] == "\x00json:[{broken"  # undecodable content: the raw text


def test_conversation_reads_broken_json(db, broken):
    _, assistant, marker = db.get_messages_as_conversation("s1")
    assert assistant["tool_calls"] == []
    assert assistant["reasoning_details"] is None
    assert assistant["codex_reasoning_items"] is None
    assert assistant["codex_message_items"] is None
    assert marker["content"] == "\x00json:[{broken"


def test_windows_and_search_read_broken_json(db, broken):
    around = db.get_messages_around("s1", broken, window=1)
    assert [m["tool_calls"] for m in around["window"]][1] == []
    view = db.get_anchored_view("s1", broken, window=0, bookend=1)
    assert view["window"][0]["tool_calls"] == []
    (hit,) = db.search_messages("deploying")
    assert [c["role"] for c in hit["context"]] == ["user", "assistant", "user"]
    assert hit["context"][2]["content"] == "\x00json:[{broken"
    assert db.list_recent_user_messages("s1")[0]["preview"] == "\x00json:[{broken"


def test_json_too_deep_to_decode_still_reads(db):
    db.create_session("s1", "cli")
    mid = db.append_message("s1", "assistant", "deep", tool_calls=[{"id": "c"}])
    deep = "[" * 50_000 + "]" * 50_000  # valid JSON, beyond Python's recursion limit
    write_behind(db, "UPDATE messages SET tool_calls = :d, reasoning_details = :d, content = :c "
                     "WHERE id = :id", d=deep, c="\x00json:" + deep, id=mid)
    (msg,) = db.get_messages("s1")
    assert msg["tool_calls"] == [] and msg["content"] == "\x00json:" + deep
    (turn,) = db.get_messages_as_conversation("s1")
    assert turn["tool_calls"] == [] and turn["reasoning_details"] is None
