"""Values on PostgreSQL come back exactly as on SQLite: the NUL encoding and 64-bit numbers."""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_store import schema
from hermes_store.backends.postgresql import codec as pg_codec
from hermes_store.backends.postgresql import engine as postgres
from hermes_store.backends.sqlite.engine import create_engine as sqlite_engine
from hermes_store.location import resolve

M = schema.messages

# Text as the store writes it: any code point but lone surrogates (scrubbed to U+FFFD
# before they reach a driver; SQLite's driver cannot bind them either), with the
# characters the encoding is about made frequent.
_special = st.sampled_from(["\x00", "\x01", "\x02", "\x00json:", "\x01\x02", "\ufffd", "%", "_"])
STORED_TEXT = st.lists(
    st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8), _special),
    max_size=12,
).map("".join)


def _pg(url):
    return postgres.create_engine(resolve(url), poolclass=sa.pool.NullPool)


@pytest.fixture
def pg_engine(pg_url):
    engine = _pg(pg_url)
    with engine.begin() as conn:
        conn.execute(schema.sessions.insert().values(id="s", source="cli", started_at=1.0))
    yield engine
    engine.dispose()


@pytest.fixture
def sqlite_head(tmp_path):
    engine = sqlite_engine(tmp_path / "state.db")
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(schema.sessions.insert().values(id="s", source="cli", started_at=1.0))
    yield engine
    engine.dispose()


# --------------------------------------------------------------------------- the codec


@given(STORED_TEXT)
def test_the_encoding_is_reversible_and_leaves_ordinary_text_alone(text):
    encoded = pg_codec.encode_text(text)
    assert "\x00" not in encoded
    assert pg_codec.decode_text(encoded) == text
    if "\x00" not in text and "\x01" not in text:
        assert encoded is text


@given(STORED_TEXT, STORED_TEXT, STORED_TEXT)
def test_the_encoding_keeps_substrings_of_nul_free_needles(before, needle, after):
    # per-character substitution: a needle without NUL/U+0001/U+0002 (every search term:
    # the sanitizer removes control characters; U+0002 is the second half of an encoded
    # NUL) is found in the encoded text exactly when it is in the original
    needle = needle.replace("\x00", "").replace("\x01", "").replace("\x02", "")
    haystack = before + after
    assert (needle in haystack) == (needle in pg_codec.encode_text(haystack))


# --------------------------------------------------------------------------- round trips


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=STORED_TEXT, tool_calls=STORED_TEXT, name=STORED_TEXT)
def test_every_string_that_round_trips_on_sqlite_round_trips_on_postgresql(
    pg_engine, sqlite_head, content, tool_calls, name
):
    values = {"session_id": "s", "role": "user", "content": content, "tool_calls": tool_calls,
              "tool_name": name, "timestamp": 1.5}
    got = {}
    for label, engine in (("sqlite", sqlite_head), ("postgresql", pg_engine)):
        with engine.begin() as conn:
            new_id = conn.execute(M.insert().values(**values)).inserted_primary_key[0]
            row = conn.execute(sa.select(M.c.content, M.c.tool_calls, M.c.tool_name)
                               .where(M.c.id == new_id)).one()
            # a statement that bypasses Core's types reads the same text
            raw = conn.exec_driver_sql(
                "SELECT content FROM messages WHERE id = " + str(int(new_id))).scalar()
            # equality on the stored text finds the row
            found = conn.execute(sa.select(sa.func.count()).select_from(M)
                                 .where(M.c.id == new_id, M.c.content == content)).scalar()
        got[label] = (tuple(row), raw, found)
    assert got["sqlite"] == ((content, tool_calls, name), content, 1)
    assert got["postgresql"] == got["sqlite"]


def test_the_multimodal_marker_and_nul_survive_every_path(pg_engine):
    content = "\x00json:" + '[{"type": "text", "text": "a\\u0000b"}]' + "\x00tail\x01"
    with pg_engine.begin() as conn:
        core_id = conn.execute(M.insert().values(session_id="s", role="user", content=content,
                                                 timestamp=1.0)).inserted_primary_key[0]
        conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (%(s)s, 'user', %(c)s, 2.0)", {"s": "s", "c": content})
        raw = conn.connection.driver_connection
        with raw.cursor() as cur, cur.copy(
            "COPY messages (session_id, role, content, timestamp) FROM STDIN"
        ) as copy:
            copy.write_row(("s", "user", content, 3.0))
        contents = conn.execute(sa.select(M.c.content).order_by(M.c.timestamp)).scalars().all()
        marked = conn.execute(sa.select(sa.func.count()).select_from(M)
                              .where(M.c.content.startswith("\x00json:"))).scalar()
        like = conn.execute(sa.select(M.c.id).where(M.c.content.contains("tail\x01"))).scalars().all()
        stored = conn.exec_driver_sql(
            "SELECT convert_to(content, 'UTF8') FROM messages WHERE id = %(i)s", {"i": core_id}).scalar()
    assert contents == [content, content, content]
    assert marked == 3 and len(like) == 3
    # what the server holds: no NUL byte, the escaped form
    assert b"\x00" not in stored and stored.startswith(b"\x01\x02json:")


def test_sqlite_stores_the_original_bytes(sqlite_head, tmp_path):
    content = "a\x00b\x01c"
    with sqlite_head.begin() as conn:
        conn.execute(M.insert().values(session_id="s", role="user", content=content, timestamp=1.0))
    raw = sqlite3.connect(tmp_path / "state.db")
    try:
        assert raw.execute("SELECT content FROM messages").fetchone()[0] == content
    finally:
        raw.close()


# --------------------------------------------------------------------------- numbers


def test_integers_and_reals_are_64_bit_as_on_sqlite(pg_engine):
    big = 3 * 2**40  # a long gateway session's cumulated input tokens
    when = 1735689600.123456  # sub-second timestamps
    with pg_engine.begin() as conn:
        conn.execute(schema.sessions.update().values(input_tokens=big, started_at=when))
        got = conn.execute(sa.select(schema.sessions.c.input_tokens, schema.sessions.c.started_at)).one()
        new_id = conn.execute(M.insert().values(session_id="s", role="user", timestamp=when)
                              ).inserted_primary_key[0]
        types = dict(conn.exec_driver_sql(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'messages' AND column_name IN ('id', 'timestamp', 'active')").all())
    assert tuple(got) == (big, when)
    assert isinstance(new_id, int)
    assert types == {"id": "bigint", "timestamp": "double precision", "active": "bigint"}
