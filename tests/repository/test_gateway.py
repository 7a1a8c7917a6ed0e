"""Gateway routing index and session peers, against real files.

Every expectation below was first observed by running upstream 0.19.0's SessionDB with
the same calls on a scratch HERMES_HOME; where this store refuses input upstream let
through to a sqlite3 error (or silently misread), the test says so.
"""

from __future__ import annotations


import pytest

from hermes_store.errors import InvalidArgumentError

from support.repository import backend, db, db_path, db_target, raw_rows, reopen, set_fields  # noqa: F401

PEER_FIELDS = ("source", "session_key", "user_id", "chat_id", "chat_type", "thread_id",
               "display_name", "origin_json")


def peer(db, session_id):
    row = db.get_session(session_id)
    return {k: row[k] for k in PEER_FIELDS}


def gateway_session(db, sid, *, source="telegram", key=None, chat="c1", user="u1",
                    chat_type="dm", thread=None, started, messages=0, end=None):
    """A gateway session started at ``started`` with ``messages`` user turns."""
    db.create_session(sid, source, user_id=user, session_key=key, chat_id=chat,
                      chat_type=chat_type, thread_id=thread)
    set_fields(db, sid, started_at=started)
    for i in range(messages):
        db.append_message(sid, "user", f"turn {i}")
    if end:
        db.end_session(sid, end)
    return sid


def routing_rows(db):
    return raw_rows(db, "SELECT scope, session_key, entry_json, updated_at FROM gateway_routing "
                        "ORDER BY scope, session_key")


# --------------------------------------------------------------------------- routing index


def test_save_upserts_one_entry_per_scope_and_key(db):
    assert db.save_gateway_routing_entry("k1", '{"v": 1}') is None
    db.save_gateway_routing_entry("k1", '{"v": 2}')                  # same key: replaced
    db.save_gateway_routing_entry("k1", '{"other": true}', scope="/srv/b")
    assert db.load_gateway_routing_entries() == {"k1": '{"v": 2}'}
    assert db.load_gateway_routing_entries(scope="/srv/b") == {"k1": '{"other": true}'}
    assert db.load_gateway_routing_entries(scope="/nowhere") == {}
    rows = routing_rows(db)
    assert [(r[0], r[1]) for r in rows] == [("", "k1"), ("/srv/b", "k1")]
    assert all(isinstance(r[3], float) and r[3] > 0 for r in rows)


@pytest.mark.parametrize("key, entry", [("", '{"v": 1}'), (None, '{"v": 1}'),
                                        ("k", ""), ("k", None)])
def test_save_without_a_key_or_an_entry_writes_nothing(db, key, entry):
    assert db.save_gateway_routing_entry(key, entry) is None
    assert routing_rows(db) == []


def test_save_refuses_what_is_not_an_entry_or_a_scope(db):
    # upstream: sqlite3.ProgrammingError / IntegrityError from the driver
    with pytest.raises(TypeError, match="json.dumps"):
        db.save_gateway_routing_entry("k", {"v": 1})
    with pytest.raises(InvalidArgumentError, match="scope"):
        db.save_gateway_routing_entry("k", "{}", scope=None)
    assert routing_rows(db) == []


def test_replace_makes_the_mapping_the_whole_scope(db):
    db.save_gateway_routing_entry("old", "o")
    db.save_gateway_routing_entry("kept", "x", scope="other")
    db.replace_gateway_routing_entries({"a": "1", "b": "2", "": "empty key", "c": ""})
    assert db.load_gateway_routing_entries() == {"a": "1", "b": "2"}
    assert db.load_gateway_routing_entries(scope="other") == {"kept": "x"}


@pytest.mark.parametrize("empty", [{}, None])
def test_replace_with_nothing_empties_only_that_scope(db, empty):
    db.replace_gateway_routing_entries({"a": "1"})
    db.replace_gateway_routing_entries({"a": "1"}, scope="other")
    db.replace_gateway_routing_entries(empty)
    assert db.load_gateway_routing_entries() == {}
    assert db.load_gateway_routing_entries(scope="other") == {"a": "1"}


def test_replace_is_all_or_nothing(db):
    db.replace_gateway_routing_entries({"a": "1"})
    with pytest.raises(TypeError, match=r"entries\['b'\]"):
        db.replace_gateway_routing_entries({"c": "3", "b": {"not": "text"}})
    with pytest.raises(TypeError, match="mapping"):
        db.replace_gateway_routing_entries([("c", "3")])
    assert db.load_gateway_routing_entries() == {"a": "1"}


def test_delete_removes_the_named_keys_of_one_scope(db):
    db.replace_gateway_routing_entries({"a": "1", "b": "2"})
    db.replace_gateway_routing_entries({"a": "1"}, scope="other")
    db.delete_gateway_routing_entries(["a", "never-saved"])
    db.delete_gateway_routing_entries([])
    db.delete_gateway_routing_entries(None)
    assert db.load_gateway_routing_entries() == {"b": "2"}
    assert db.load_gateway_routing_entries(scope="other") == {"a": "1"}
    db.delete_gateway_routing_entries(("a",), scope="other")
    assert db.load_gateway_routing_entries(scope="other") == {}


def test_delete_refuses_a_bare_string(db):
    # upstream iterates it and deletes one key per character ("ab" -> "a", "b")
    db.replace_gateway_routing_entries({"a": "1", "b": "2", "ab": "3"})
    with pytest.raises(TypeError, match="single string"):
        db.delete_gateway_routing_entries("ab")
    assert db.load_gateway_routing_entries() == {"a": "1", "b": "2", "ab": "3"}


def test_routing_index_is_shared_between_stores_on_one_file(db):
    db.save_gateway_routing_entry("k", '{"session_id": "s1"}', scope="/srv")
    with reopen(db, read_only=True) as other:
        assert other.load_gateway_routing_entries(scope="/srv") == {"k": '{"session_id": "s1"}'}


# --------------------------------------------------------------------------- peers


def test_record_peer_overwrites_routing_fields_and_keeps_presentation(db):
    db.create_session("s1", "cli", system_prompt="SP")
    assert db.record_gateway_session_peer(
        "s1", source="telegram", session_key="agent:main:telegram:dm:1", chat_id="1",
        chat_type="dm", user_id="u1", display_name="Bob", origin_json='{"chat_id": "1"}',
    ) is None
    assert peer(db, "s1") == {
        "source": "telegram", "session_key": "agent:main:telegram:dm:1", "user_id": "u1",
        "chat_id": "1", "chat_type": "dm", "thread_id": None, "display_name": "Bob",
        "origin_json": '{"chat_id": "1"}'}
    # a second record replaces the routing columns (None clears them) but leaves
    # display_name/origin_json alone when they are not given
    db.record_gateway_session_peer("s1", source="Telegram", session_key="k2")
    assert peer(db, "s1") == {
        "source": "Telegram", "session_key": "k2", "user_id": None, "chat_id": None,
        "chat_type": None, "thread_id": None, "display_name": "Bob",
        "origin_json": '{"chat_id": "1"}'}
    assert db.get_session("s1")["system_prompt"] == "SP"


def test_record_peer_needs_an_id_a_key_and_an_existing_row(db):
    db.create_session("s1", "cli")
    before = peer(db, "s1")
    db.record_gateway_session_peer("s1", source="telegram", session_key="")
    db.record_gateway_session_peer("s1", source="telegram", session_key=None, chat_id="9")
    db.record_gateway_session_peer("", source="telegram", session_key="k")
    db.record_gateway_session_peer("missing", source="telegram", session_key="k")
    assert peer(db, "s1") == before
    assert db.get_session("missing") is None


def test_record_peer_refuses_a_missing_source(db):
    # upstream: sqlite3.IntegrityError (NOT NULL constraint failed: sessions.source)
    db.create_session("s1", "cli")
    with pytest.raises(InvalidArgumentError, match="source is required"):
        db.record_gateway_session_peer("s1", source=None, session_key="k")
    with pytest.raises(TypeError):
        db.record_gateway_session_peer("s1", session_key="k")  # source is keyword-required
    assert peer(db, "s1")["session_key"] is None


def test_record_peer_stores_integer_ids_as_text(db):
    # what SQLite's TEXT affinity made of upstream's bound int; done here explicitly
    db.create_session("s1", "cli")
    db.record_gateway_session_peer("s1", source="telegram", session_key="k", chat_id=5,
                                   user_id=42, thread_id=7)
    got = peer(db, "s1")
    assert (got["chat_id"], got["user_id"], got["thread_id"]) == ("5", "42", "7")
    with pytest.raises(TypeError, match="chat_id"):
        db.record_gateway_session_peer("s1", source="telegram", session_key="k", chat_id=[5])
    assert peer(db, "s1")["chat_id"] == "5"


# --------------------------------------------------------------------------- latest for peer


@pytest.fixture
def keyed(db):
    """Sessions of routing key K, oldest first."""
    gateway_session(db, "with-turns", key="K", started=100.0, messages=1)
    gateway_session(db, "empty", key="K", started=200.0)
    return db


def latest_id(db, **kw):
    row = db.find_latest_gateway_session_for_peer(**kw)
    return row["id"] if row else None


def test_latest_for_peer_is_the_newest_session_with_a_transcript(keyed):
    assert latest_id(keyed, source="telegram", session_key="K") == "with-turns"
    assert latest_id(keyed, source="Telegram", session_key="K") is None  # source is exact


@pytest.mark.parametrize("reason, recoverable", [
    ("agent_close", True), ("ws_orphan_reap", True),
    ("session_reset", False), ("compression", False), ("user_exit", False),
])
def test_latest_for_peer_reopens_only_accidental_closes(keyed, reason, recoverable):
    gateway_session(keyed, "closed", key="K", started=300.0, messages=2, end=reason)
    expected = "closed" if recoverable else "with-turns"
    assert latest_id(keyed, source="telegram", session_key="K") == expected


def test_latest_for_peer_counts_message_rows_when_the_counter_is_zero(db):
    gateway_session(db, "old", key="K", started=100.0, messages=1)
    gateway_session(db, "counter-lost", key="K", started=200.0, messages=1)
    set_fields(db, "counter-lost", message_count=0)  # a build that did not keep it
    assert latest_id(db, source="telegram", session_key="K") == "counter-lost"


def test_latest_for_peer_returns_the_whole_session_row(keyed):
    keyed.update_system_prompt("with-turns", "prompt text")
    row = keyed.find_latest_gateway_session_for_peer(source="telegram", session_key="K")
    assert row == keyed.get_session("with-turns")
    assert row["system_prompt"] == "prompt text" and row["message_count"] == 1


def test_latest_for_peer_without_a_key_finds_nothing(keyed):
    assert latest_id(keyed, source="telegram", chat_id="c1", chat_type="dm",
                     user_id="u1") is None


def test_latest_for_peer_falls_back_to_the_complete_peer(keyed):
    full = {"source": "telegram", "chat_id": "c1", "chat_type": "dm", "user_id": "u1"}
    assert latest_id(keyed, session_key="lost-key", **full) == "with-turns"
    assert latest_id(keyed, session_key="lost-key", thread_id="", **full) == "with-turns"
    assert latest_id(keyed, session_key="lost-key", thread_id="t9", **full) is None
    assert latest_id(keyed, session_key="lost-key", **{**full, "user_id": "u2"}) is None
    # no fallback without both chat_id and chat_type
    assert latest_id(keyed, session_key="lost-key", source="telegram", chat_id="c1",
                     user_id="u1") is None
    assert latest_id(keyed, session_key="lost-key", source="telegram", chat_type="dm",
                     user_id="u1") is None


def test_latest_for_peer_fallback_treats_null_and_empty_alike(db):
    gateway_session(db, "anon", source="slack", chat="c9", user=None, chat_type="",
                    started=100.0, messages=1)
    assert latest_id(db, source="slack", session_key="Z", chat_id="c9", chat_type="",
                     user_id="") == "anon"
    assert latest_id(db, source="slack", session_key="Z", chat_id="c9",
                     chat_type="") == "anon"


# --------------------------------------------------------------------------- by origin


def by_origin(db, **kw):
    kw.setdefault("platform", "telegram")
    return db.find_session_by_origin(**kw)


def test_origin_finds_the_live_keyed_session_of_a_chat(db):
    gateway_session(db, "g1", key="K1", chat="100", user="u1", started=100.0)
    assert by_origin(db, platform="TELEGRAM", chat_id=100) == "g1"
    # the chat's only session is the answer even for another sender
    assert by_origin(db, chat_id="100", user_id="u9") == "g1"


@pytest.mark.parametrize("platform, chat_id", [("", "100"), (None, "100"),
                                               ("telegram", ""), ("telegram", None)])
def test_origin_without_a_platform_or_a_chat_is_none(db, platform, chat_id):
    gateway_session(db, "g1", key="K1", chat="100", started=100.0)
    assert db.find_session_by_origin(platform=platform, chat_id=chat_id) is None


def test_origin_never_hands_one_users_session_to_another(db):
    gateway_session(db, "g1", key="K1", chat="100", user="u1", started=100.0)
    gateway_session(db, "g2", key="K2", chat="100", user="u2", started=200.0)
    assert by_origin(db, chat_id="100") is None
    assert by_origin(db, chat_id="100", user_id="u1") == "g1"
    assert by_origin(db, chat_id="100", user_id="u2") == "g2"
    assert by_origin(db, chat_id="100", user_id="u9") is None


def test_origin_skips_unkeyed_and_ended_sessions(db):
    gateway_session(db, "live", key="K", chat="300", started=100.0)
    gateway_session(db, "unkeyed", key=None, chat="300", started=200.0)
    gateway_session(db, "ended", key="K2", chat="300", started=300.0, end="user_exit")
    assert by_origin(db, chat_id="300") == "live"


def test_origin_thread_must_match_when_given(db):
    gateway_session(db, "main", key="K1", chat="100", user="u1", started=100.0)
    gateway_session(db, "other-user", key="K2", chat="100", user="u2", started=150.0)
    gateway_session(db, "in-thread", key="K4", chat="100", user="u1", thread="t1",
                    started=200.0)
    assert by_origin(db, chat_id="100", thread_id="t1") == "in-thread"
    assert by_origin(db, chat_id="100", thread_id="") is None         # main + other-user
    assert by_origin(db, chat_id="100", thread_id="", user_id="u1") == "main"
    assert by_origin(db, chat_id="100", user_id="u1") == "in-thread"  # newest of u1
    assert by_origin(db, chat_id=100, thread_id=0) is None


def test_origin_anonymous_sessions_do_not_count_as_other_users(db):
    gateway_session(db, "u1-old", key="K9", chat="400", user="u1", started=100.0)
    gateway_session(db, "anon", key="K10", chat="400", user=None, started=200.0)
    assert by_origin(db, chat_id="400") == "anon"
    assert by_origin(db, chat_id="400", user_id="u2") is None
    gateway_session(db, "blank", key="K11", chat="500", user="", started=100.0)
    gateway_session(db, "null", key="K12", chat="500", user=None, started=200.0)
    assert by_origin(db, chat_id="500") == "null"


def test_origin_compares_senders_exactly_but_counts_users_trimmed(db):
    gateway_session(db, "padded", key="K1", chat="500", user=" u1 ", started=100.0)
    gateway_session(db, "plain", key="K2", chat="500", user="u1", started=200.0)
    assert by_origin(db, chat_id="500") == "plain"      # " u1 " and "u1": one user
    assert by_origin(db, chat_id="500", user_id=" u1 ") == "padded"


# --------------------------------------------------------------------------- listing


@pytest.fixture
def routed(db):
    gateway_session(db, "a", key="K1", started=100.0, messages=1)
    gateway_session(db, "b", key="K1", started=200.0)
    gateway_session(db, "c", source="Discord", key="K2", started=300.0, messages=2)
    gateway_session(db, "d", source="discord", key="K3", started=400.0, end="x")
    gateway_session(db, "e", source="cli", key=None, started=500.0)
    gateway_session(db, "f", key="K4", started=600.0, end="y")
    set_fields(db, "b", started_at=200.0)
    return db


def listed(db, **kw):
    return [r["id"] for r in db.list_gateway_sessions(**kw)]


def test_list_gateway_sessions_is_the_newest_session_per_key(routed):
    # the messages were appended just now, so "c" is the most recently active
    assert listed(routed) == ["c", "b"]
    assert listed(routed, active_only=False) == ["c", "f", "d", "b"]
    assert listed(routed, platform="DISCORD") == ["c"]
    assert listed(routed, platform="") == ["c", "b"]


def test_list_gateway_sessions_rows_carry_last_active(routed):
    rows = {r["id"]: r for r in routed.list_gateway_sessions(active_only=False)}
    assert set(rows["b"]) == set(routed.get_session("b")) | {"last_active"}
    assert rows["b"]["last_active"] == 200.0                         # no messages: start
    assert rows["c"]["last_active"] > 300.0                          # latest message


def test_an_ended_newest_session_hides_its_key_from_the_live_list(routed):
    routed.append_message("b", "user", "late")
    assert listed(routed) == ["b", "c"]
    routed.end_session("b", "session_reset")
    assert listed(routed) == ["c"]            # "a" (older, live) does not stand in
    assert "a" not in listed(routed, active_only=False)


def test_lone_surrogates_in_entries_are_replaced_not_fatal(db):
    db.save_gateway_routing_entry("k\udc80", '{"name": "\ud800"}')
    db.replace_gateway_routing_entries({"a\udc80": '"\udfff"'}, scope="s")
    assert db.load_gateway_routing_entries() == {"k\ufffd": '{"name": "\ufffd"}'}
    assert db.load_gateway_routing_entries(scope="s") == {"a\ufffd": '"\ufffd"'}
    db.delete_gateway_routing_entries(["a\udc80"], scope="s")    # reaches the scrubbed key
    assert db.load_gateway_routing_entries(scope="s") == {}
