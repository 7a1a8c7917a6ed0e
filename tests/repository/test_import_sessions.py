"""``import_sessions``: upstream 0.19.0's format, rules, caps and answers (issue 10).

The expected answers are upstream's, taken by running it; ``test_same_answers_and_rows_
as_upstream`` runs the same payloads through both side by side.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, schema
from hermes_store.errors import InvalidArgumentError, StoreReadOnlyError
from support.repository import copy_head, backend, db, db_path, db_target, reopen  # noqa: F401
from support.upstream_state import load_hermes_state

T0 = 1_700_000_000.0


def _session(sid, *messages, **fields):
    return {"id": sid, "source": "cli", "started_at": T0, **fields, "messages": list(messages)}


def _msg(role, content, ts, **fields):
    return {"role": role, "content": content, "timestamp": ts, **fields}


def _rows(db, table) -> int:
    with db._read() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


#: payloads with every value given (no "now"), so both stores must hold identical rows
SIDE_BY_SIDE = [
    [],
    [_session("plain", _msg("user", "hello", T0 + 1), _msg("assistant", "hi", T0 + 2))],
    [_session("rich",
              _msg("user", [{"type": "text", "text": "look"}, {"type": "image_url"}], T0 + 1),
              _msg("assistant", "", T0 + 2, tool_calls=[{"id": "c1", "function": {"name": "f"}}],
                   reasoning="why", reasoning_details='[{"r": 1}]', finish_reason="tool_calls",
                   token_count="12", codex_reasoning_items=[{"i": 2}]),
              _msg("tool", "out", T0 + 3, tool_name="terminal", tool_call_id="c1",
                   reasoning="dropped: not an assistant", message_id="tg-9", observed=True),
              model="m", model_config={"temperature": 0}, system_prompt="SP", user_id="u",
              session_key="routing is reset", chat_id="c", handoff_state="pending",
              rewind_count=3, ended_at=T0 + 9, end_reason="done", input_tokens="40",
              output_tokens=4.9, api_call_count=None, estimated_cost_usd="0.25",
              archived="yes", cwd="/w", git_branch="main", billing_provider="openrouter",
              title="Rich", message_count=99, tool_call_count=99)],
    # parents: in the payload (either order), in the store, nowhere, and a cycle
    [_session("child", parent_session_id="parent"), _session("parent"),
     _session("orphan", parent_session_id="nowhere"),
     _session("c1", parent_session_id="c2"), _session("c2", parent_session_id="c1"),
     _session("c3", parent_session_id="c2"), _session("of_existing", parent_session_id="existing")],
    # ids are text, stripped; an existing id is skipped with its messages
    [{"id": "  spaced  ", "started_at": T0}, {"id": 7, "started_at": T0, "source": ""},
     _session("existing", _msg("user", "not imported", T0))],
    # any error: nothing at all is written, every error is listed
    [5, {"id": ""}, {"id": None}, _session("q", messages=None), {**_session("m"), "messages": "x"},
     _session("q"), _session("q"), _session("r", model_config="[1]"),
     _session("y", model_config="{bad"), _session("s", title=5), _session("w", parent_session_id=5),
     _session("t", {"role": ""}), _session("u", {"role": "user", "token_count": "a"}),
     _session("v", 1), _session("x", {"role": "user", "tool_name": 3}),
     _session("ok", _msg("user", "fine", T0))],
    [_session("unserializable", extra=object())],
]


def _state(db, upstream: bool) -> dict:
    """Every session and message as upstream's SessionDB shows them (its columns)."""
    out = {}
    sessions = (
        [dict(r) for r in db._conn.execute("SELECT * FROM sessions ORDER BY id")] if upstream
        else [db.get_session(s["id"]) for s in sorted(db.search_sessions(limit=None),
                                                        key=lambda s: s["id"])]
    )
    for session in sessions:
        messages = db.get_messages(session["id"])
        out[session["id"]] = (session, [{k: v for k, v in m.items() if k != "id"} for m in messages])
    return out


def test_same_answers_and_rows_as_upstream(db, hermes_home, tmp_path):
    hermes_state = load_hermes_state()
    for number, payload in enumerate(SIDE_BY_SIDE):
        up = hermes_state.SessionDB(db_path=tmp_path / f"upstream-{number}.db")
        ours = SessionDB(copy_head(tmp_path / f"ours-{number}.db")) if number else db
        for store in (up, ours):
            store.create_session("existing", "cli")
        want = up.import_sessions(copy.deepcopy(payload))
        got = ours.import_sessions(copy.deepcopy(payload))
        assert got == want, number
        theirs, mine = _state(up, upstream=True), _state(ours, upstream=False)
        assert mine.keys() == theirs.keys(), number
        for sid, (session, messages) in theirs.items():
            if sid == "existing":  # created by each store at its own "now"
                session = {k: v for k, v in session.items() if k != "started_at"}
            assert {k: mine[sid][0][k] for k in session} == session, (number, sid)
            assert [{k: m[k] for k in theirs_m} for m, theirs_m in zip(mine[sid][1], messages)] == messages
            assert len(mine[sid][1]) == len(messages)
        up.close()
        if number:
            ours.close()


def test_refusals_list_every_bad_entry_and_write_nothing(db):
    result = db.import_sessions(SIDE_BY_SIDE[5])
    assert result == {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": [
        {"index": 0, "error": "session must be an object"},
        {"index": 1, "error": "session id is required"},
        {"index": 2, "error": "session id is required"},
        {"index": 4, "error": "messages must be a list", "session_id": "m"},
        {"index": 5, "error": "duplicate session id", "session_id": "q"},
        {"index": 6, "error": "duplicate session id", "session_id": "q"},
        {"index": 7, "error": "model_config must be a JSON object", "session_id": "r"},
        {"index": 8, "error": "model_config must be valid JSON", "session_id": "y"},
        {"index": 9, "error": "title must be a string", "session_id": "s"},
        {"index": 10, "error": "parent_session_id must be a string", "session_id": "w"},
        {"index": 11, "error": "messages[0].role must be a non-empty string", "session_id": "t"},
        {"index": 12, "error": "token_count must be an integer", "session_id": "u"},
        {"index": 13, "error": "messages must contain only objects", "session_id": "v"},
        {"index": 14, "error": "tool_name must be a string", "session_id": "x"},
    ]}
    assert db.search_sessions(limit=None) == []
    # where 0.19.0 raised from inside its transaction, the entry is refused up front
    for entry, error in (
        (_session("big", input_tokens=2 ** 64), "input_tokens is out of range"),
        (_session("big", _msg("user", "x", T0, token_count=2 ** 70)), "token_count is out of range"),
        (_session("deep", _msg("user", "x", T0, tool_calls=[set()])),
         "session must be JSON serializable"),
    ):
        result = db.import_sessions([_session("fine"), entry])
        assert result["errors"] == [{"index": 1, "error": error, "session_id": entry["id"]}]
    assert db.search_sessions(limit=None) == []


def test_not_a_list_and_too_many_entries_raise(db):
    for payload in ({"id": "a"}, None, "a", ({"id": "a"},)):
        with pytest.raises(InvalidArgumentError, match="^sessions must be a list$"):
            db.import_sessions(payload)
    with pytest.raises(ValueError, match="^sessions must contain at most 500 entries$"):
        db.import_sessions([{"id": f"s{i}"} for i in range(501)])
    assert db.import_sessions([{"id": f"s{i}"} for i in range(500)])["imported"] == 500


def test_size_and_count_caps(db):
    many = [{"role": "user", "content": "m"}] * 10_001
    assert db.import_sessions([_session("long", *many)])["errors"] == [
        {"index": 0, "error": "messages exceeds the per-session import limit",
         "session_id": "long"}]
    huge = "x" * (5 * 1024 * 1024)
    assert db.import_sessions([_session("huge", _msg("user", huge, T0))])["errors"] == [
        {"index": 0, "error": "session exceeds the import size limit", "session_id": "huge"}]
    # six sessions of ~4.6 MiB pass one by one, the sixth passes 25 MiB in all
    big = "y" * (46 * 1024 * 1024 // 10)
    answer = db.import_sessions([_session(f"b{i}", _msg("user", big, T0)) for i in range(6)])
    assert answer["errors"] == [
        {"index": 5, "error": "import exceeds the total size limit", "session_id": "b5"}]
    # six sessions of 9,000 messages: the sixth passes 50,000 messages in all
    nine = [{"role": "user", "content": "m"}] * 9_000
    answer = db.import_sessions([_session(f"n{i}", *nine) for i in range(6)])
    assert answer["errors"] == [
        {"index": 5, "error": "messages exceeds the total import limit", "session_id": "n5"}]
    assert db.search_sessions(limit=None) == []
    # the caps are upstream's class attributes, so a deployment can change them
    db._IMPORT_MAX_TOTAL_MESSAGES = 2
    answer = db.import_sessions([_session("a", _msg("user", "1", T0)),
                                 _session("b", _msg("user", "2", T0), _msg("user", "3", T0))])
    assert answer["errors"][0]["error"] == "messages exceeds the total import limit"


def test_an_export_imports_back_with_its_history_but_not_its_runtime_state(db):
    db.create_session("src", "telegram", model="m", system_prompt="SP", user_id="u",
                      session_key="agent:main:telegram", chat_id="42",
                      model_config={"temperature": 0})
    db.append_message("src", "user", "hello")
    db.append_message("src", "assistant", [{"type": "text", "text": "hi"}],
                      tool_calls=[{"id": "1", "function": {"name": "f", "arguments": "{}"}}],
                      reasoning="think", reasoning_details=[{"x": 1}], token_count=5)
    db.append_message("src", "tool", "out", tool_name="terminal", tool_call_id="1")
    db.update_token_counts("src", input_tokens=10, output_tokens=5, api_call_count=2,
                           estimated_cost_usd=0.5)
    db.set_session_title("src", "My title")
    db.end_session("src", "done")
    exported = db.export_session("src")
    before = db.get_messages("src")
    db.delete_session("src")

    assert db.import_sessions([exported]) == {
        "ok": True, "imported": 1, "skipped": 0, "detached": 0,
        "imported_ids": ["src"], "skipped_ids": [], "errors": []}
    session = db.get_session("src")
    for key in ("source", "model", "system_prompt", "user_id", "model_config", "title",
                "started_at", "ended_at", "end_reason", "input_tokens", "output_tokens",
                "api_call_count", "estimated_cost_usd", "message_count", "tool_call_count"):
        assert session[key] == exported[key], key
    assert (session["session_key"], session["chat_id"]) == (None, None)  # routing is reset
    drop = ("id", "display_identity", "display_order")
    assert [{k: v for k, v in m.items() if k not in drop} for m in db.get_messages("src")] == [
        {k: v for k, v in m.items() if k not in drop} for m in before]
    assert db.search_messages("hello")[0]["session_id"] == "src"  # indexed by the triggers

    again = db.import_sessions([exported])
    assert (again["imported"], again["skipped"], again["skipped_ids"]) == (0, 1, ["src"])
    assert db.message_count("src") == 3


def test_titles_stay_unique_and_surrogates_are_scrubbed(db):
    db.create_session("holder", "cli")
    db.set_session_title("holder", "Deploy")
    answer = db.import_sessions([
        _session("a", title="Deploy"), _session("b", title="Deploy"),
        _session("c", _msg("user", "bad \ud800 text", T0), title="ok \udfff"),
    ])
    assert answer["ok"] is True and answer["imported"] == 3  # 0.19.0: IntegrityError
    assert db.get_session("a")["title"] == "Deploy (imported)"
    assert db.get_session("b")["title"] == "Deploy (imported 2)"
    assert db.get_session("c")["title"] == "ok \ufffd"
    assert db.get_messages("c")[0]["content"] == "bad \ufffd text"


def test_odd_values_fall_back_as_upstream_does(db):
    answer = db.import_sessions([
        {"id": "nan", "started_at": math.nan, "ended_at": math.inf, "input_tokens": "lots",
         "model_config": '{"k": 1}', "archived": 0},
        {"id": "empty_config", "model_config": {}, "started_at": "12.5"},
    ])
    assert answer["ok"] is True
    nan = db.get_session("nan")
    assert math.isfinite(nan["started_at"]) and nan["ended_at"] is None
    assert nan["input_tokens"] == 0 and nan["model_config"] == '{"k": 1}'
    assert nan["source"] == "import" and nan["archived"] == 0
    other = db.get_session("empty_config")
    assert other["model_config"] == "{}" and other["started_at"] == 12.5


def test_all_or_nothing_when_the_store_refuses(db):
    db.import_sessions([_session("first")])
    with reopen(db, read_only=True) as reader:
        with pytest.raises(StoreReadOnlyError):
            reader.import_sessions([_session("second")])
    assert [s["id"] for s in db.search_sessions(limit=None)] == ["first"]
    assert _rows(db, schema.system_prompts) == 0
    assert json.dumps(db.import_sessions([]))  # the answer is plain JSON
