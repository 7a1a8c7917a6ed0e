"""SessionDB's messages concern against real files: api-catalog §3 behaviour by behaviour."""

from __future__ import annotations

import datetime as dt

import pytest

from hermes_store import SessionNotFoundError, schema
from hermes_store.errors import InvalidArgumentError

from support.repository import backend, db, db_path, db_target, fts_hits, raw_rows  # noqa: F401

MESSAGE_COLUMNS = set(schema.messages.c.keys())


def raw(db, sql, **params):
    """What is stored, read with plain SQL on the store's engine (no decoding of ours)."""
    return raw_rows(db, sql, **params)


def counters(db, session_id):
    row = db.get_session(session_id)
    return row["message_count"], row["tool_call_count"]


@pytest.fixture
def s1(db):
    db.create_session("s1", "cli")
    return "s1"


# --------------------------------------------------------------------------- append


def test_append_returns_increasing_ids_and_counts_messages(db, s1):
    ids = [db.append_message(s1, "user", f"m{i}") for i in range(3)]
    assert ids == sorted(ids) and len(set(ids)) == 3 and ids[0] >= 1
    assert counters(db, s1) == (3, 0)


@pytest.mark.parametrize(
    "tool_calls, added",
    [
        ([{"id": "a"}, {"id": "b"}], 2),  # a list counts its entries
        ({"id": "a"}, 1),  # any other value counts once
        ([], 0),
        (None, 0),
    ],
)
def test_tool_call_count_follows_upstream_rule(db, s1, tool_calls, added):
    db.append_message(s1, "assistant", "x", tool_calls=tool_calls)
    assert counters(db, s1) == (1, added)


def test_tool_rows_do_not_count_as_tool_calls(db, s1):
    db.append_message(s1, "tool", "result", tool_call_id="a", tool_name="terminal")
    assert counters(db, s1) == (1, 0)


def test_json_fields_are_stored_as_json_text_and_empty_ones_as_null(db, s1):
    mid = db.append_message(
        s1, "assistant", "x",
        tool_calls=[{"id": "c1"}],
        reasoning_details=[{"type": "summary", "text": "r"}],
        codex_reasoning_items=[{"id": "ri"}],
        codex_message_items=[],
    )
    (stored,) = raw(db, "SELECT tool_calls, reasoning_details, codex_reasoning_items, "
                    "codex_message_items FROM messages WHERE id = :id", id=mid)
    assert stored == ('[{"id": "c1"}]', '[{"type": "summary", "text": "r"}]',
                      '[{"id": "ri"}]', None)


def test_get_messages_decodes_tool_calls_but_keeps_reasoning_json_raw(db, s1):
    db.append_message(s1, "assistant", "x", tool_calls=[{"id": "c1"}],
                      reasoning_details=[{"t": 1}], codex_message_items=[{"m": 2}])
    (msg,) = db.get_messages(s1)
    assert msg["tool_calls"] == [{"id": "c1"}]
    assert msg["reasoning_details"] == '[{"t": 1}]'
    assert msg["codex_message_items"] == '[{"m": 2}]'


def test_multimodal_content_is_stored_with_the_json_marker_and_decoded(db, s1):
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}]
    mid = db.append_message(s1, "user", parts)
    (stored,) = raw(db, "SELECT content FROM messages WHERE id = :id", id=mid)
    assert stored[0].startswith("\x00json:")
    assert db.get_messages(s1)[0]["content"] == parts


def test_scalar_content_is_bound_as_is(db, s1):
    db.append_message(s1, "user", 42)
    assert db.get_messages(s1)[0]["content"] == "42"  # TEXT affinity, as upstream


def test_lone_surrogates_are_replaced_in_every_text_field(db, s1):
    bad = "a\ud800b"
    mid = db.append_message(s1, "assistant", bad, tool_name=bad, reasoning=bad,
                            reasoning_content=bad, api_content=bad, finish_reason=bad)
    (row,) = raw(db, "SELECT content, tool_name, reasoning, reasoning_content, "
                 "api_content, finish_reason FROM messages WHERE id = :id", id=mid)
    assert set(row) == {"a\ufffdb"}


def test_every_message_column_is_returned(db, s1):
    db.append_message(s1, "user", "hi")
    (msg,) = db.get_messages(s1)
    assert set(msg) == MESSAGE_COLUMNS
    assert msg["active"] == 1 and msg["observed"] == 0


@pytest.mark.parametrize(
    "given, expected",
    [
        (1000.5, 1000.5),
        (dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc), 1767312000.0),
    ],
)
def test_explicit_timestamp(db, s1, given, expected):
    db.append_message(s1, "user", "x", timestamp=given)
    assert db.get_messages(s1)[0]["timestamp"] == expected


@pytest.mark.parametrize("unusable", ["yesterday", float("nan"), float("inf"), object()])
def test_unusable_timestamp_falls_back_to_now(db, s1, unusable):
    before = db.get_session(s1)["started_at"]
    db.append_message(s1, "user", "x", timestamp=unusable)
    assert db.get_messages(s1)[0]["timestamp"] >= before


def test_append_to_unknown_session_raises_and_writes_nothing(db):
    with pytest.raises(SessionNotFoundError, match="nope"):
        db.append_message("nope", "user", "x")
    assert raw(db, "SELECT COUNT(*) FROM messages") == [(0,)]


def test_append_without_role_is_a_clear_value_error(db, s1):
    with pytest.raises(InvalidArgumentError, match="role") as info:
        db.append_message(s1, None, "x")
    assert isinstance(info.value, ValueError)
    assert counters(db, s1) == (0, 0)


def test_unserializable_json_field_writes_nothing(db, s1):
    with pytest.raises(InvalidArgumentError, match="tool_calls must be JSON-serializable"):
        db.append_message(s1, "assistant", "x", tool_calls=[object()])
    assert db.get_messages(s1) == [] and counters(db, s1) == (0, 0)


def _nested(depth):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", [
    {"content": object()},  # upstream stored str(object): refused here instead
    {"content": [{"data": {1, 2}}]},
    {"tool_calls": _nested(100_000)},  # deeper than json can encode
    {"reasoning_details": [b"bytes"]},
])
def test_unstorable_values_are_refused_and_write_nothing(db, s1, bad):
    with pytest.raises(InvalidArgumentError, match="nothing was written|Nothing was written"):
        db.append_message(s1, "assistant", **{"content": "x", **bad})
    assert raw(db, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert counters(db, s1) == (0, 0)


def test_surrogates_in_ids_reach_the_scrubbed_row(db, s1):
    mid = db.append_message(s1, "user", "x", platform_message_id="p\ud800")
    assert db.has_platform_message_id(s1, "p\ud800")  # stored as "p\ufffd"
    assert db.get_messages("s1\ud800") == []  # no such session, and no encoding error
    assert db.get_messages_around(s1, mid)["window"][0]["platform_message_id"] == "p\ufffd"


def test_append_to_ended_session_does_not_reopen_it(db, s1):
    db.end_session(s1, "user_exit")
    db.append_message(s1, "user", "late")
    session = db.get_session(s1)
    assert session["ended_at"] is not None and session["message_count"] == 1


# --------------------------------------------------------------------------- get_messages


def test_messages_come_back_in_insertion_order_not_timestamp_order(db, s1):
    db.append_message(s1, "user", "first", timestamp=2000.0)
    db.append_message(s1, "assistant", "second", timestamp=1000.0)
    assert [m["content"] for m in db.get_messages(s1)] == ["first", "second"]


def test_paging(db, s1):
    for i in range(5):
        db.append_message(s1, "user", f"m{i}")
    page = lambda **kw: [m["content"] for m in db.get_messages(s1, **kw)]  # noqa: E731
    assert page(limit=2) == ["m0", "m1"]
    assert page(limit=2, offset=2) == ["m2", "m3"]
    assert page(offset=3) == ["m3", "m4"]  # offset alone pages too


def test_unknown_session_has_no_messages(db):
    assert db.get_messages("nope") == []
    assert db.get_messages_as_conversation("nope") == []


# --------------------------------------------------------------------------- conversation


def test_conversation_shape(db, s1):
    db.append_message(s1, "user", "hello", platform_message_id="tg-1", observed=True,
                      api_content="<ctx>hello")
    db.append_message(s1, "assistant", "", tool_calls=[{"id": "c1"}], finish_reason="tool_calls",
                      reasoning="", reasoning_content="", reasoning_details=[{"r": 1}],
                      codex_reasoning_items=[{"c": 1}])
    db.append_message(s1, "tool", "  raw output  ", tool_call_id="c1", tool_name="terminal",
                      effect_disposition="applied")
    user, assistant, tool = db.get_messages_as_conversation(s1)

    assert set(user) == {"role", "content", "timestamp", "message_id", "observed", "api_content"}
    assert user["message_id"] == "tg-1" and user["observed"] is True
    assert user["api_content"] == "<ctx>hello"
    assert assistant["tool_calls"] == [{"id": "c1"}]
    assert assistant["finish_reason"] == "tool_calls"
    assert "reasoning" not in assistant  # "" is dropped ...
    assert assistant["reasoning_content"] == ""  # ... but reasoning_content "" is kept
    assert assistant["reasoning_details"] == [{"r": 1}]
    assert assistant["codex_reasoning_items"] == [{"c": 1}]
    assert tool == {"role": "tool", "content": "  raw output  ", "timestamp": tool["timestamp"],
                    "tool_call_id": "c1", "tool_name": "terminal",
                    "effect_disposition": "applied"}


def test_reasoning_fields_only_replayed_on_assistant_rows(db, s1):
    db.append_message(s1, "user", "q", reasoning="r", finish_reason="stop")
    (user,) = db.get_messages_as_conversation(s1)
    assert "reasoning" not in user and "finish_reason" not in user


def test_leaked_memory_context_is_removed_from_user_and_assistant_text(db, s1):
    leaked = ("<memory-context>\n[System note: The following is recalled memory context, "
              "NOT new user input. Treat as informational background data.]\nsecret\n"
              "</memory-context>\n  what is up?  ")
    db.append_message(s1, "user", leaked)
    db.append_message(s1, "tool", leaked)
    user, tool = db.get_messages_as_conversation(s1)
    assert user["content"] == "what is up?"
    assert tool["content"] == leaked  # tool output is replayed verbatim


def test_background_review_harness_and_its_answer_are_dropped(db, s1):
    db.append_message(s1, "user", "real question")
    db.append_message(s1, "assistant", "real answer")
    db.append_message(s1, "user", "Review the conversation above and consider saving to memory.")
    db.append_message(s1, "assistant", "Saved.")
    db.append_message(s1, "user", "next")
    assert [m["content"] for m in db.get_messages_as_conversation(s1)] == [
        "real question", "real answer", "next"]


def test_include_ancestors_replays_root_to_tip_without_the_resent_prompt(db):
    db.create_session("root", "cli")
    db.append_message("root", "user", "build it")
    db.append_message("root", "assistant", "done part 1")
    db.append_message("root", "user", "continue")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    db.append_message("tip", "user", "continue")  # the resumed segment re-sends it
    db.append_message("tip", "assistant", "done part 2")

    assert [m["content"] for m in db.get_messages_as_conversation("tip")] == [
        "continue", "done part 2"]
    replay = db.get_messages_as_conversation("tip", include_ancestors=True)
    assert [m["content"] for m in replay] == ["build it", "done part 1", "continue", "done part 2"]


def test_repair_alternation_runs_the_configured_repair(db, s1):
    db.append_message(s1, "user", "a")
    db.append_message(s1, "user", "b")
    seen = []

    def merge_users(messages):
        seen.append(len(messages))
        messages[:] = [{"role": "user", "content": "a\nb"}]

    db.alternation_repair = merge_users
    assert db.get_messages_as_conversation(s1, repair_alternation=True) == [
        {"role": "user", "content": "a\nb"}]
    assert len(db.get_messages_as_conversation(s1)) == 2  # stored transcript untouched
    assert seen == [2]


# --------------------------------------------------------------------------- bulk rewrites


def test_replace_messages_rewrites_transcript_and_counters(db, s1):
    db.append_message(s1, "user", "old")
    db.replace_messages(s1, [
        {"role": "user", "content": "new q", "message_id": "p1"},
        {"role": "assistant", "content": "new a", "tool_calls": [{"id": "c"}],
         "reasoning": "why"},
    ])
    msgs = db.get_messages(s1)
    assert [m["content"] for m in msgs] == ["new q", "new a"]
    assert msgs[0]["platform_message_id"] == "p1"
    assert msgs[1]["reasoning"] == "why"
    assert counters(db, s1) == (2, 1)
    assert msgs[0]["timestamp"] < msgs[1]["timestamp"]  # missing timestamps stay ordered


def test_replace_messages_keeps_reasoning_only_for_assistant_rows(db, s1):
    db.replace_messages(s1, [{"role": "user", "content": "q", "reasoning": "leak"}])
    assert db.get_messages(s1)[0]["reasoning"] is None


def test_replace_messages_active_only_keeps_inactive_rows(db, s1):
    db.append_message(s1, "user", "live")
    db.archive_and_compact(s1, [{"role": "user", "content": "summary"}])
    db.replace_messages(s1, [{"role": "user", "content": "rewritten"}], active_only=True)
    everything = [m["content"] for m in db.get_messages(s1, include_inactive=True)]
    assert everything == ["live", "rewritten"]


def test_replace_messages_is_all_or_nothing(db, s1):
    db.append_message(s1, "user", "keep me")
    with pytest.raises(InvalidArgumentError, match=r"messages\[1\]"):
        db.replace_messages(s1, [{"role": "user", "content": "a"}, "not a dict"])
    assert [m["content"] for m in db.get_messages(s1)] == ["keep me"]
    assert counters(db, s1) == (1, 0)


def test_replace_messages_on_unknown_session(db):
    db.replace_messages("nope", [])  # nothing to write: no-op, as upstream
    with pytest.raises(SessionNotFoundError):
        db.replace_messages("nope", [{"role": "user", "content": "x"}])


def test_archive_and_compact_keeps_history_inactive_and_searchable(db, s1):
    db.append_message(s1, "user", "original kubernetes question")
    db.append_message(s1, "assistant", "long answer", tool_calls=[{"id": 1}, {"id": 2}])
    assert not db.has_archived_messages(s1)

    inserted = db.archive_and_compact(s1, [{"role": "user", "content": "summary of it"}])

    assert inserted == 1
    assert [m["content"] for m in db.get_messages(s1)] == ["summary of it"]
    archived = [m for m in db.get_messages(s1, include_inactive=True) if not m["active"]]
    assert [(m["active"], m["compacted"]) for m in archived] == [(0, 1), (0, 1)]
    assert counters(db, s1) == (1, 0)
    assert db.has_archived_messages(s1)
    assert db.message_count(s1) == 3  # message_count() counts every stored row
    assert [r["snippet"] for r in db.search_messages("kubernetes")] == [
        "original >>>kubernetes<<< question"]


def test_set_latest_user_api_content_only_when_content_matches(db, s1):
    db.append_message(s1, "user", "first")
    newest = db.append_message(s1, "user", "second")
    assert db.set_latest_user_api_content(s1, "first", "wire") == 0
    assert db.set_latest_user_api_content(s1, "second", "wire") == 1
    stored = {m["id"]: m["api_content"] for m in db.get_messages(s1)}
    assert stored[newest] == "wire" and list(stored.values()).count("wire") == 1


# --------------------------------------------------------------------------- rewind


@pytest.fixture
def four_turns(db, s1):
    return [db.append_message(s1, role, f"{role} {i}")
            for i, role in enumerate(["user", "assistant", "user", "assistant"])]


def test_rewind_soft_deletes_target_and_later_rows(db, s1, four_turns):
    u1, a1, u2, a2 = four_turns
    result = db.rewind_to_message(s1, u2)
    assert result["rewound_count"] == 2
    assert result["new_head_id"] == a1
    assert result["target_message"]["id"] == u2
    assert result["target_message"]["content"] == "user 2"
    assert [m["id"] for m in db.get_messages(s1)] == [u1, a1]
    assert len(db.get_messages(s1, include_inactive=True)) == 4
    session = db.get_session(s1)
    assert session["rewind_count"] == 1 and session["message_count"] == 4


def test_rewind_counts_every_call_even_when_nothing_changes(db, s1, four_turns):
    db.rewind_to_message(s1, four_turns[2])
    again = db.rewind_to_message(s1, four_turns[2])
    assert again["rewound_count"] == 0
    assert db.get_session(s1)["rewind_count"] == 2


def test_rewind_errors_keep_upstream_texts(db, s1, four_turns):
    with pytest.raises(ValueError, match=r"^message 999 not found in session s1$"):
        db.rewind_to_message(s1, 999)
    with pytest.raises(ValueError, match=(
            r"^rewind target must be a 'user' message \(got role='assistant', id=%d\)$"
            % four_turns[1])):
        db.rewind_to_message(s1, four_turns[1])
    assert db.get_session(s1)["rewind_count"] == 0  # a refused rewind writes nothing


def test_restore_rewound_reactivates_rows(db, s1, four_turns):
    db.rewind_to_message(s1, four_turns[2])
    assert db.restore_rewound(s1, four_turns[2]) == 2
    assert len(db.get_messages(s1)) == 4
    assert db.restore_rewound(s1, four_turns[2]) == 0


def test_list_recent_user_messages(db, s1):
    first = db.append_message(s1, "user", "short\n\n  one")
    db.append_message(s1, "assistant", "ignored")
    long_id = db.append_message(s1, "user", "x" * 81)
    media = db.append_message(s1, "user", [{"type": "image_url", "image_url": {"url": "u"}}])
    recent = db.list_recent_user_messages(s1)
    assert [r["id"] for r in recent] == [media, long_id, first]
    assert recent[0]["preview"] == "[multimodal content]"
    assert recent[1]["preview"] == "x" * 77 + "..."
    assert recent[2]["preview"] == "short one"
    assert set(recent[0]) == {"id", "timestamp", "preview"}
    assert len(db.list_recent_user_messages(s1, limit=1)) == 1


# --------------------------------------------------------------------------- clear / windows


def test_clear_messages_empties_transcript_and_index_but_keeps_session(db, s1):
    db.append_message(s1, "user", "zebra crossing")
    db.append_message(s1, "assistant", "ok", tool_calls=[{"id": 1}])
    assert db.search_messages("zebra")
    db.clear_messages(s1)
    assert db.get_messages(s1, include_inactive=True) == []
    assert counters(db, s1) == (0, 0)
    assert db.get_session(s1) is not None
    assert db.search_messages("zebra") == []
    assert fts_hits(db, "zebra") == 0  # the word index itself, not only search
    db.clear_messages("nope")  # unknown session: no-op


def test_get_messages_around(db, s1):
    ids = [db.append_message(s1, "user", f"m{i}") for i in range(10)]
    db.rewind_to_message(s1, ids[6])  # the window ignores `active`
    view = db.get_messages_around(s1, ids[5], window=2)
    assert [m["id"] for m in view["window"]] == ids[3:8]
    assert (view["messages_before"], view["messages_after"]) == (2, 2)
    edge = db.get_messages_around(s1, ids[0], window=3)
    assert [m["id"] for m in edge["window"]] == ids[:4]
    assert (edge["messages_before"], edge["messages_after"]) == (0, 3)
    db.create_session("s2", "cli")
    assert db.get_messages_around("s2", ids[5]) == {
        "window": [], "messages_before": 0, "messages_after": 0}


def test_get_anchored_view_adds_bookends_outside_the_window(db, s1):
    ids = []
    for i in range(6):
        ids.append(db.append_message(s1, "user", f"q{i}"))
        ids.append(db.append_message(s1, "tool", f"t{i}"))
        ids.append(db.append_message(s1, "assistant", "" if i == 0 else f"a{i}"))
    anchor = ids[8]  # the assistant turn a2
    view = db.get_anchored_view(s1, anchor, window=1, bookend=2)
    assert [m["content"] for m in view["window"]] == ["a2", "q3"]  # tool row t2 dropped
    assert [m["content"] for m in view["bookend_start"]] == ["q0", "q1"]  # empty a0 skipped
    assert [m["content"] for m in view["bookend_end"]] == ["q5", "a5"]
    assert view["messages_before"] == 1 and view["messages_after"] == 1


def test_message_count_and_platform_lookup(db, s1):
    db.create_session("s2", "telegram")
    db.append_message(s1, "user", "a")
    db.append_message("s2", "user", "b", platform_message_id="upd-7")
    assert db.message_count(s1) == 1
    assert db.message_count() == 2
    assert db.has_platform_message_id("s2", "upd-7")
    assert not db.has_platform_message_id(s1, "upd-7")
