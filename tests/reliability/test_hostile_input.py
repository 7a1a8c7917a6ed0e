"""Issue 5, item 5: hostile input is stored and read back exactly, or refused clearly,
and a refusal leaves nothing half-written.

Documented normalisations (api-catalog, upstream 0.19.0 behaviour kept for drop-in use):
* lone surrogates (U+D800-DFFF) in stored text become U+FFFD — SQLite cannot store them;
* titles go through ``sanitize_title`` (controls, zero-width and bidi characters removed,
  whitespace collapsed) — checked against that function, not against the raw input.
Everything else — NUL bytes, control characters, bidi overrides, SQL-looking text — must
come back byte for byte, and may not change what a filter selects.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest

from support import reliability as rs
from hermes_store import SessionDB
from hermes_store.errors import HermesStoreError

CONTROLS = "".join(chr(c) for c in range(1, 32)) + "\x7f"
BIDI = "\u202eevil\u202c \u2066isolate\u2069 \u200f\u200b\ufeff"
SQLISH = ["'); DROP TABLE messages; --", "\" OR 1=1 --", "x' OR '1'='1", "%", "_", "\\", "*",
          "a%b_c\\d", "NULL", "1; DELETE FROM sessions"]

HOSTILE_TEXT = {
    "nul": "before\x00after\x00",
    "controls": "ctl" + CONTROLS + "end",
    "bidi": BIDI,
    "sql": SQLISH[0],
    "sql_quote": SQLISH[2],
    "wildcards": SQLISH[7],
    "emoji_zwj": "👩\u200d👩\u200d👧 family",
    "sentinel_lookalike": "\x00json:this is not json",
}


@pytest.fixture
def db(tmp_path):
    with SessionDB(rs.fresh_store_file(tmp_path / "state.db")) as store:
        store.create_session("s", source="cli")
        yield store


def _state(path) -> tuple:
    """Everything a refused call could have half-written."""
    conn = rs.raw_connect(path)
    try:
        return (
            conn.execute("SELECT count(*) FROM messages").fetchone()[0],
            conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
            tuple(conn.execute("SELECT id, message_count, tool_call_count, title FROM sessions ORDER BY id")),
        )
    finally:
        conn.close()


# --------------------------------------------------------------------------- content

@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_hostile_text_in_every_message_field_reads_back_exactly(db, name):
    text = HOSTILE_TEXT[name]
    msg_id = db.append_message(
        "s", role="assistant", content=text, tool_name=text, reasoning=text,
        reasoning_content=text, finish_reason=text, tool_call_id=text,
        tool_calls=[{"id": text, "type": "function", "function": {"name": text, "arguments": text}}],
    )
    (row,) = db.get_messages("s")
    assert row["id"] == msg_id
    for field in ("content", "tool_name", "reasoning", "reasoning_content", "finish_reason", "tool_call_id"):
        assert row[field] == text, field
    assert row["tool_calls"] == [{"id": text, "type": "function", "function": {"name": text, "arguments": text}}]
    assert db.get_session("s")["message_count"] == 1


def test_lone_surrogates_are_replaced_everywhere_and_later_writes_still_work(db):
    """User pain #66924: one lone surrogate must not kill persistence for the session."""
    bad = "half \ud83d of an emoji \udc00"
    good = "half \ufffd of an emoji \ufffd"
    db.append_message("s", role="assistant", content=bad, tool_name=bad, reasoning=bad,
                      tool_calls=[{"function": {"name": bad}}])
    db.append_message("s", role="user", content="the next write works")
    first, second = db.get_messages("s")
    assert (first["content"], first["tool_name"], first["reasoning"]) == (good, good, good)
    # JSON escapes the surrogate (\\udc00 is plain ASCII), so it may also come back as given.
    assert first["tool_calls"] in ([{"function": {"name": good}}], [{"function": {"name": bad}}])
    assert second["content"] == "the next write works"
    assert db.set_session_title("s", "title \ud800 here") is True
    assert db.get_session_title("s") == "title \ufffd here"
    assert db.search_messages("emoji")  # and the row is indexed


def test_twenty_megabytes_of_content_round_trip(db, tmp_path):
    big = ("needle-start " + "0123456789abcdef" * (20 * 1024 * 1024 // 16) + " endmarker")
    msg_id = db.append_message("s", role="user", content=big)
    (row,) = db.get_messages("s")
    assert row["id"] == msg_id and row["content"] == big
    assert [h["id"] for h in db.search_messages("endmarker")] == [msg_id]


def test_deeply_nested_tool_calls_round_trip(db):
    nested: object = "leaf"
    for depth in range(300):
        nested = {"level": depth, "inner": [nested]}
    calls = [{"id": "deep", "type": "function", "function": {"name": "deep", "arguments": nested}}]
    db.append_message("s", role="assistant", content="deep", tool_calls=calls)
    (row,) = db.get_messages("s")
    assert row["tool_calls"] == calls
    assert db.get_session("s")["tool_call_count"] == 1


@pytest.mark.parametrize("kwargs", [
    pytest.param({"tool_calls": [{"arguments": object()}]}, id="object-in-tool-calls"),
    pytest.param({"tool_calls": [{"ids": {1, 2}}]}, id="set-in-tool-calls"),
    pytest.param({"reasoning_details": [b"bytes"]}, id="bytes-in-reasoning-details"),
    pytest.param({"codex_message_items": [{"n": 1j}]}, id="complex-in-codex-items"),
    pytest.param({"content": object()}, id="object-as-content"),
    pytest.param({"tool_calls": "too-deep"}, id="tool-calls-too-deep-to-encode"),
])
def test_values_json_cannot_encode_are_refused_clearly_and_write_nothing(db, kwargs):
    if kwargs.get("tool_calls") == "too-deep":
        nested: list = []
        for _ in range(100_000):
            nested = [nested]
        kwargs = {"tool_calls": nested}
    before = _state(db.db_path)
    with pytest.raises(HermesStoreError) as excinfo:
        db.append_message("s", role="assistant", content=kwargs.pop("content", "x"), **kwargs)
    assert str(excinfo.value), "the refusal must say what was wrong"
    assert _state(db.db_path) == before
    db.append_message("s", role="user", content="still usable")
    assert db.get_session("s")["message_count"] == 1


# --------------------------------------------------------------------------- ids and titles

ID_CASES = {name: f"id-{text}" for name, text in HOSTILE_TEXT.items()} | {
    f"sqlish-{i}": s for i, s in enumerate(SQLISH)}


@pytest.mark.parametrize("name", sorted(ID_CASES))
def test_hostile_session_ids_round_trip(db, name):
    sid = ID_CASES[name]
    assert db.create_session(sid, source="cli") == sid
    assert db.get_session(sid)["id"] == sid
    db.append_message(sid, role="user", content="hello hostile id")
    assert [m["content"] for m in db.get_messages(sid)] == ["hello hostile id"]
    assert db.get_session(sid)["message_count"] == 1
    assert db.get_session("s")["message_count"] == 0  # nothing leaked to another session
    assert db.resolve_session_id(sid) == sid
    assert db.delete_session(sid) is True
    assert db.get_session(sid) is None and db.get_session("s") is not None


def test_session_id_with_lone_surrogate_is_stored_consistently_or_refused(db):
    sid = "id-\ud800-x"
    before = _state(db.db_path)
    try:
        stored = db.create_session(sid, source="cli")
    except HermesStoreError:
        assert _state(db.db_path) == before
        return
    # Stored (scrubbed): the same id keeps reaching the same row.
    assert db.get_session(sid) is not None
    db.append_message(sid, role="user", content="x")
    assert len(db.get_messages(sid)) == 1
    assert db.get_session(stored)["message_count"] == 1


def test_wildcards_in_an_id_prefix_are_literal(db):
    db.create_session("a%b-1", source="cli")
    db.create_session("axb-2", source="cli")
    db.create_session("a_c-3", source="cli")
    db.create_session("azc-4", source="cli")
    assert db.resolve_session_id("a%") == "a%b-1"
    assert db.resolve_session_id("a_") == "a_c-3"


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_hostile_titles_store_their_sanitised_form(db, name):
    raw = f"title {HOSTILE_TEXT[name]}"
    expected = SessionDB.sanitize_title(raw)
    assert db.set_session_title("s", raw) is True
    assert db.get_session_title("s") == expected
    assert db.get_session_by_title(expected)["id"] == "s"


@pytest.mark.parametrize("title", SQLISH)
def test_sql_looking_titles_round_trip_and_match_only_themselves(db, title):
    db.create_session("other", source="cli")
    db.set_session_title("other", "plain other title")
    assert db.set_session_title("s", title) is True
    assert db.get_session_title("s") == title
    assert db.get_session_by_title(title)["id"] == "s"
    assert db.resolve_session_by_title(title) == "s"
    assert db.get_session_title("other") == "plain other title"


def test_title_wildcards_do_not_match_other_titles(db):
    """`_` and `%` in a title are literal in every title lookup (LIKE patterns escaped)."""
    db.set_session_title("s", "deploy_x")
    db.create_session("t", source="cli")
    db.set_session_title("t", "deployAx #3")
    db.create_session("v", source="cli")
    db.set_session_title("v", "1000 things #2")
    assert db.get_session_by_title("deploy_x")["id"] == "s"
    assert db.resolve_session_by_title("deploy_x") == "s"
    assert db.get_next_title_in_lineage("deploy_x") == "deploy_x #2"
    assert db.resolve_session_by_title("100%") is None
    assert db.get_next_title_in_lineage("100%") == "100%"


# --------------------------------------------------------------------------- filters

FILTER_VALUES = SQLISH + ["\ud800"]


@pytest.fixture
def populated(db):
    for i, source in enumerate(["cli", "telegram", "cron"]):
        sid = f"{source}-session"
        db.create_session(sid, source=source, cwd=f"/home/u/proj{i}")
        db.append_message(sid, role="user", content=f"findme in {source}")
        db.append_message(sid, role="assistant", content=f"findme reply {source}")
        db.end_session(sid, "done")
    return db


def _call_or_refused(fn):
    """Result of fn(), or None when it refused with the package's own error."""
    try:
        return fn()
    except HermesStoreError:
        return None


@pytest.mark.parametrize("value", FILTER_VALUES)
def test_sql_looking_filters_select_nothing_and_change_nothing(populated, value):
    db = populated
    before = _state(db.db_path)
    checks = {
        "search source_filter": lambda: db.search_messages("findme", source_filter=[value]),
        "search role_filter": lambda: db.search_messages("findme", role_filter=[value]),
        "list source": lambda: db.list_sessions_rich(source=value),
        "list cwd_prefix": lambda: db.list_sessions_rich(cwd_prefix=value),
        "count source": lambda: db.session_count(source=value),
        "prune candidates title": lambda: db.list_prune_candidates(title_like=value),
        "prune candidates source": lambda: db.list_prune_candidates(source=value),
        "prune candidates model": lambda: db.list_prune_candidates(model_like=value),
        "prune candidates cwd": lambda: db.list_prune_candidates(cwd_prefix=value),
        "prune source": lambda: db.prune_sessions(older_than_days=None, source=value),
        "prune title": lambda: db.prune_sessions(older_than_days=None, title_like=value),
        "by title": lambda: db.get_session_by_title(value),
        "resolve id": lambda: db.resolve_session_id(value),
    }
    checks["search exclude_sources"] = lambda: len(
        db.search_messages("findme", exclude_sources=[value], limit=-1)) - 6  # excludes nothing real
    wrong = []
    for what, fn in checks.items():
        try:
            result = _call_or_refused(fn)
        except Exception as exc:  # noqa: BLE001 - reported below, all at once
            wrong.append(f"{what}: raised {type(exc).__name__}: {exc}")
            continue
        if result not in (None, [], 0):
            wrong.append(f"{what}: selected {result!r}")
    assert not wrong, f"filter value {value!r}:\n" + "\n".join(wrong)
    assert _state(db.db_path) == before


@pytest.mark.parametrize("query", SQLISH + ["\ud800", "findme\x00", "findme" + CONTROLS, BIDI,
                                            "a AND OR b", "e.g.", '"unterminated', "NEAR(", "*"])
def test_hostile_search_queries_never_raise_or_change_anything(populated, query):
    db = populated
    before = _state(db.db_path)
    assert isinstance(db.search_messages(query), list)
    assert _state(db.db_path) == before


# --------------------------------------------------------------------------- other programs' rows

def test_rows_with_invalid_json_written_by_another_program_still_read(db):
    deep = "[" * 50_000 + "]" * 50_000  # valid JSON, too deep for Python's decoder
    conn = sqlite3.connect(str(db.db_path), isolation_level=None)
    with conn:
        conn.execute("UPDATE sessions SET model_config = '{not json' WHERE id = 's'")
        rows = [
            ("{not json", "[unclosed", "nope", "\x00json:{broken", "findbroken one"),
            (deep, "{}", "[]", "plain", "findbroken two"),
            ("[1, 2", None, None, None, "findbroken three"),
        ]
        for tool_calls, details, codex, api_content, content in rows:
            conn.execute(
                "INSERT INTO messages (session_id, role, content, tool_calls, reasoning_details,"
                " codex_reasoning_items, api_content, timestamp) VALUES ('s', 'assistant', ?, ?, ?, ?, ?, 1)",
                (content, tool_calls, details, codex, api_content),
            )
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp)"
                     " VALUES ('s', 'user', ?, 2)", ("\x00json:{broken",))
    conn.close()

    messages = db.get_messages("s")
    assert [m["content"] for m in messages[:3]] == ["findbroken one", "findbroken two", "findbroken three"]
    assert messages[3]["content"] == "\x00json:{broken"  # undecodable sentinel: raw text back
    assert isinstance(db.get_messages_as_conversation("s"), list)
    exported = db.export_session("s")
    assert len(exported["messages"]) == 4
    assert db.get_session("s")["model_config"] == "{not json"
    assert isinstance(db.list_sessions_rich(), list)
    assert len(db.search_messages("findbroken")) == 3
    assert isinstance(db.get_messages_around("s", messages[1]["id"]), dict)
