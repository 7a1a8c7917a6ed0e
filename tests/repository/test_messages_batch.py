"""``append_messages`` (one write unit for many messages) and the prebuilt statements
behind ``append_message``, against real files."""

from __future__ import annotations

import inspect

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, SessionNotFoundError, schema
from hermes_store.errors import InvalidArgumentError
from hermes_store.sql import prebuilt
from hermes_store.repository.messages import MessagesMixin

from support.repository import backend, db, db_path, db_target, other_target  # noqa: F401

#: one of every kind of message the encoding rules treat differently
MIXED = [
    {"role": "user", "content": "deploy the docker stack", "timestamp": 100.0},
    {"role": "assistant", "content": None, "timestamp": 101.0, "finish_reason": "tool_calls",
     "tool_calls": [{"id": "c1", "function": {"name": "shell"}},
                    {"id": "c2", "function": {"name": "read"}}],
     "reasoning": "think", "reasoning_details": [{"type": "summary", "text": "t"}]},
    {"role": "tool", "content": "ok\ud800", "tool_call_id": "c1", "tool_name": "shell",
     "timestamp": 102.0},
    {"role": "tool", "content": "file text", "tool_call_id": "c2", "tool_name": "read",
     "timestamp": 103.0, "effect_disposition": "applied"},
    {"role": "assistant", "tool_calls": {"id": "c3"}, "timestamp": 104.0, "token_count": 7},
    {"role": "user", "timestamp": 105.0, "platform_message_id": "p-9", "observed": True,
     "content": [{"type": "text", "text": "look at this"},
                 {"type": "image_url", "image_url": {"url": "data:x"}}]},
    {"role": "assistant", "content": "the stack is deployed", "timestamp": 106.0,
     "codex_reasoning_items": [{"id": "r"}], "codex_message_items": [{"id": "m"}],
     "reasoning_content": "", "api_content": "the stack is deployed (wire)"},
]


def raw_rows(store):
    """Every stored message row, as the engine hands it back (no decoding of ours)."""
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(
            sa.select(schema.messages).order_by(schema.messages.c.id))]


def hits(store, query):
    """Search results without the session's creation time (each store made its own)."""
    return [{k: v for k, v in hit.items() if k != "session_started"}
            for hit in store.search_messages(query)]


def counters(store, session_id):
    row = store.get_session(session_id)
    return row["message_count"], row["tool_call_count"]


def message_count_raw(store):
    with store.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(schema.messages)).scalar()


@pytest.fixture
def pair(db_target, other_target):
    """Two stores on two fresh databases at head (one engine), each with session s1."""
    stores = [SessionDB(db_target), SessionDB(other_target)]
    for store in stores:
        store.create_session("s1", "cli")
    yield stores
    for store in stores:
        store.close()


@pytest.fixture
def s1(db):
    db.create_session("s1", "cli")
    return "s1"


# --------------------------------------------------------------------------- batch


def test_a_batch_stores_what_one_call_per_message_stores(pair):
    one_by_one, batched = pair
    ids_single = [one_by_one.append_message("s1", **m) for m in MIXED]
    ids_batch = batched.append_messages("s1", MIXED)

    assert ids_batch == ids_single
    assert raw_rows(batched) == raw_rows(one_by_one)
    assert counters(batched, "s1") == counters(one_by_one, "s1") == (7, 3)
    # the full-text indexes saw the same rows, and they match the table
    for query in ("docker", "deployed", "shell", "look"):
        found = hits(batched, query)
        assert found and found == hits(one_by_one, query)
    assert batched.fts_integrity_check() == []


def test_returns_the_new_ids_in_order_after_earlier_messages(db, s1):
    first = db.append_message(s1, "user", "before")
    db.create_session("s2", "cli")
    db.append_message("s2", "user", "elsewhere")
    ids = db.append_messages(s1, ({"role": "user", "content": f"m{i}"} for i in range(5)))
    assert ids == [m["id"] for m in db.get_messages(s1)][1:]
    assert ids == sorted(ids) and ids[0] > first
    assert counters(db, s1) == (6, 0)


def test_unstamped_messages_get_the_call_time_in_order(db, s1):
    before = db.get_session(s1)["started_at"]
    db.append_messages(s1, [{"role": "user", "content": str(i)} for i in range(4)])
    stamps = [m["timestamp"] for m in db.get_messages(s1)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4 and stamps[0] >= before


@pytest.mark.parametrize("bad, reason", [
    ({"content": "no role"}, "role"),
    ({"role": "assistant", "tool_calls": [object()]}, "tool_calls must be JSON-serializable"),
    ({"role": "user", "content": object()}, "message content must be"),
    ({"role": "user", "name": "bob"}, "unknown field"),
    ("just text", "must be a dict"),
])
def test_a_bad_message_fails_the_whole_batch_and_names_it(db, s1, bad, reason):
    db.append_message(s1, "user", "kept")
    batch = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, bad]
    with pytest.raises(InvalidArgumentError, match=reason) as info:
        db.append_messages(s1, batch)
    assert "messages[2]" in str(info.value)
    assert [m["content"] for m in db.get_messages(s1)] == ["kept"]
    assert counters(db, s1) == (1, 0)


@pytest.mark.parametrize("not_a_batch", [{"role": "user"}, "user", None, 3])
def test_messages_must_be_an_iterable_of_dicts(db, s1, not_a_batch):
    with pytest.raises(InvalidArgumentError, match="iterable of dicts"):
        db.append_messages(s1, not_a_batch)


def test_unknown_session_raises_and_writes_nothing(db):
    with pytest.raises(SessionNotFoundError, match="nope"):
        db.append_messages("nope", [{"role": "user", "content": "x"}])
    assert message_count_raw(db) == 0


def test_empty_batch_is_a_no_op(db, s1):
    assert db.append_messages(s1, []) == []
    assert db.append_messages("nope", iter(())) == []
    assert message_count_raw(db) == 0 and counters(db, s1) == (0, 0)


def test_batch_fields_are_exactly_append_message_arguments():
    from hermes_store.repository.message_rows import _APPEND_FIELDS

    single = set(inspect.signature(MessagesMixin.append_message).parameters) - {
        "self", "session_id"}
    assert set(_APPEND_FIELDS) == single


_REFUSING_TRIGGER = {
    "sqlite": ["CREATE TRIGGER test_refuse BEFORE INSERT ON messages "
               "WHEN new.content = '{content}' BEGIN SELECT RAISE(ABORT, 'refused'); END"],
    "postgresql": [
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.content = '{content}' THEN RAISE EXCEPTION 'refused'; END IF; "
        "RETURN NEW; END $$",
        "CREATE TRIGGER test_refuse BEFORE INSERT ON messages "
        "FOR EACH ROW EXECUTE FUNCTION test_refuse()",
    ],
}


def _fail_inserts_of(store, content):
    """A trigger that aborts inserting a message with this content (a failure inside
    the write unit, after the counters were updated), added behind the store's back."""
    with store.engine.begin() as conn:
        for ddl in _REFUSING_TRIGGER[store.engine.dialect.name]:
            conn.exec_driver_sql(ddl.format(content=content))


def test_a_failure_inside_the_unit_rolls_back_rows_and_counters(db_target):
    with SessionDB(db_target) as store:
        store.create_session("s1", "cli")
        store.append_message("s1", "user", "kept")
        _fail_inserts_of(store, "boom")
    with SessionDB(db_target) as store:
        with pytest.raises(Exception, match="refused"):
            store.append_messages("s1", [{"role": "user", "content": "a"},
                                         {"role": "user", "content": "boom"}])
        with pytest.raises(Exception, match="refused"):
            store.append_message("s1", "user", "boom")
        assert [m["content"] for m in store.get_messages("s1")] == ["kept"]
        assert counters(store, "s1") == (1, 0)
        assert store.fts_integrity_check() == []


# --------------------------------------------------------------------------- prebuilt


@pytest.mark.sqlite_only("compares SQLite's driver path with its Core path")
def test_core_fallback_stores_the_same_rows(pair, monkeypatch):
    """A dialect the driver shortcut cannot serve runs the Core statements: same result."""
    fast, core = pair
    fast.append_message("s1", **MIXED[0])
    fast.append_messages("s1", MIXED[1:])
    monkeypatch.setattr(prebuilt.Prebuilt, "_driver_form", lambda self, dialect: None)
    for statement in _prebuilt_statements():
        monkeypatch.setattr(statement, "_forms", {})
    core.append_message("s1", **MIXED[0])
    core.append_messages("s1", MIXED[1:])
    assert raw_rows(core) == raw_rows(fast)
    assert counters(core, "s1") == counters(fast, "s1")
    with pytest.raises(SessionNotFoundError):
        core.append_message("nope", "user", "x")


def _prebuilt_statements():
    from hermes_store.repository import messages, search

    return [v for module in (messages, search) for v in vars(module).values()
            if isinstance(v, prebuilt.Prebuilt)]


def test_driver_shortcut_refuses_what_needs_core_at_run_time():
    from sqlalchemy.dialects import postgresql, sqlite

    from hermes_store.backends.base import get
    from hermes_store.repository.message_rows import INSERT_MESSAGE as _INSERT_MESSAGE

    lite, pg = get("sqlite"), get("postgresql")  # bare dialects carry them as engines do
    assert _INSERT_MESSAGE._driver_form(lite.carry(sqlite.dialect())) is not None
    # psycopg: named parameters, and the new id comes back through RETURNING
    form = _INSERT_MESSAGE._driver_form(pg.carry(postgresql.psycopg.dialect()))
    assert form.named and form.returns_key and form.sql.endswith("RETURNING messages.id")
    # a driver without the door (psycopg2 is refused at open anyway)
    assert _INSERT_MESSAGE._driver_form(pg.carry(postgresql.psycopg2.dialect())) is None
    # RETURNING anything but the new key needs Core
    returning = prebuilt.Prebuilt(sa.insert(schema.messages).returning(schema.messages.c.role),
                                  column_keys=["session_id", "role", "timestamp"])
    assert returning._driver_form(pg.carry(postgresql.psycopg.dialect())) is None
