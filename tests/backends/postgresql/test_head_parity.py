"""Head parity (D12): SQLite's head after revisions 0001..0030 and PostgreSQL's head (the
baseline) have the same tables, columns, types, nullability, defaults, keys and ordinary
indexes; the full-text and display-order objects have the same names and behave alike."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from hermes_store import migrate, schema
from hermes_store.backends.postgresql import engine as postgres
from hermes_store.backends.sqlite.engine import create_engine as sqlite_engine
from hermes_store.backends.sqlite.fts import ddl
from hermes_store.backends.postgresql.fts import ddl as fp
from hermes_store.location import resolve
from support import pg_schema, schema_dump

M, S = schema.messages, schema.sessions


@pytest.fixture(scope="module")
def sqlite_head(tmp_path_factory):
    path = tmp_path_factory.mktemp("parity") / "state.db"
    migrate.upgrade(path)  # every revision, 0001..0030
    return path


@pytest.fixture
def pg_head(pg_server, pg_url):
    name = sa.engine.make_url(pg_url).database
    with pg_server.connect(name) as conn:
        return pg_schema.describe(conn)


def _sqlite_side(path) -> dict:
    dump = schema_dump.load(str(path))
    tables = {}
    for name, table in dump["tables"].items():
        if name == "alembic_version":
            continue
        tables[name] = {
            "columns": {c: dict(info) for c, info in table["columns"].items()},
            "primary_key": table["primary_key"],
            "foreign_keys": [{k: fk[k] for k in ("table", "from", "to", "on_delete")}
                             for fk in table["foreign_keys"]],
            "autoincrement": table["autoincrement"],
        }
    indexes = {name: {k: ix[k] for k in ("table", "unique", "columns", "where")}
               for name, ix in dump["indexes"].items() if ix["origin"] == "c"}
    return {"tables": tables, "indexes": indexes, "triggers": dump["triggers"],
            "virtual_tables": dump["virtual_tables"]}


def _comparable(tables: dict, *, postgres_side: bool) -> dict:
    """Columns keyed by name (a migrated SQLite file appends added columns, so order
    differs), without ``position``; a key column's nullability is the key's business
    (PostgreSQL makes key columns NOT NULL; SQLite reports upstream's ``id TEXT PRIMARY
    KEY`` as nullable)."""
    out = {}
    for name, table in tables.items():
        columns = {}
        for column, info in table["columns"].items():
            if postgres_side and name == "messages" and column in fp.FTS_COLUMNS:
                continue  # the FTS layer's, compared below
            entry = {k: info[k] for k in ("type", "notnull", "default", "pk")}
            if entry["pk"]:
                entry["notnull"] = "key"
            columns[column] = entry
        out[name] = {**table, "columns": columns}
    return out


def test_both_heads_have_the_same_tables_columns_keys_and_defaults(sqlite_head, pg_head):
    sqlite_side = _comparable(_sqlite_side(sqlite_head)["tables"], postgres_side=False)
    pg_side = _comparable(pg_head["tables"], postgres_side=True)
    pg_side.pop("alembic_version")
    assert set(pg_side) == set(sqlite_side) == set(schema.metadata.tables)
    assert schema_dump.diff(sqlite_side, pg_side) == []


def test_both_heads_have_the_same_ordinary_indexes(sqlite_head, pg_head):
    sqlite_side = _sqlite_side(sqlite_head)["indexes"]
    pg_side = {name: ix for name, ix in pg_head["indexes"].items()
               if not fp.is_fts_object(name) and name != "alembic_version_pkc"}
    # SQLite spells a partial predicate as written; PostgreSQL prints its own form
    for side in (sqlite_side, pg_side):
        for ix in side.values():
            ix["where"] = pg_schema.normalize_expression(ix["where"])
            ix["columns"] = [pg_schema.normalize_expression(c) for c in ix["columns"]]
    assert len(sqlite_side) == sum(len(t.indexes) for t in schema.metadata.tables.values())
    assert schema_dump.diff(sqlite_side, pg_side) == []


def test_the_full_text_and_display_objects_have_the_same_names(sqlite_head, pg_head):
    sqlite_side = _sqlite_side(sqlite_head)
    sqlite_indexes = {n for n in sqlite_side["virtual_tables"] if n in ddl.FTS_TABLES}
    pg_indexes = {n for n in pg_head["indexes"] if n in fp.FTS_INDEXES}
    assert sqlite_indexes == pg_indexes == {"messages_fts", "messages_fts_trigram"}
    display = {n for n in sqlite_side["triggers"] if n.startswith("messages_display")}
    assert len(display) == 4
    assert display <= set(pg_head["triggers"])
    assert set(pg_head["triggers"]) - display == set(fp.FTS_TRIGGERS)


# --------------------------------------------------------------------------- behaviour

_SESSIONS = [
    ("plain", "cli", None), ("tg", "telegram", {"model": "x"}), ("cron", "cron", None),
    ("sub", "subagent", None), ("deleg", "cli", {"_delegate_from": "plain"}),
    ("bad", "cli", "not json {"),
]
_LIMIT = ddl.TOOL_CONTENT_PREFIX_CHARS
_BODY = "headword " + "y" * (_LIMIT - 9)


def _rows():
    for session_id, _, _ in _SESSIONS:
        yield dict(session_id=session_id, role="user", content=f"hello {session_id} world")
        yield dict(session_id=session_id, role="assistant", content=None,
                   tool_calls='[{"name": "grep"}]')
        yield dict(session_id=session_id, role="tool", content=_BODY + " tailword",
                   tool_name="shell")
        yield dict(session_id=session_id, role="user", content=_BODY + " tailword")


def _fill(conn):
    for session_id, source, config in _SESSIONS:
        conn.execute(S.insert().values(
            id=session_id, source=source, started_at=1.0,
            model_config=json.dumps(config) if isinstance(config, dict) else config))
    for i, row in enumerate(_rows()):
        conn.execute(M.insert().values(timestamp=float(i), **row))


def _sqlite_index_ids(conn, table):
    return set(conn.exec_driver_sql(f"SELECT id FROM {table}_docsize").scalars())


def _sqlite_match(conn, word):
    return set(conn.exec_driver_sql(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (word,)).scalars())


def _pg_match(conn, word):
    return set(conn.exec_driver_sql(
        f"SELECT id FROM messages WHERE {fp.DOCUMENT_COLUMN} @@ to_tsquery('simple', %(w)s)",
        {"w": word}).scalars())


def test_both_indexes_hold_the_same_rows_on_both_engines(tmp_path, pg_url):
    lite = sqlite_engine(tmp_path / "state.db")
    migrate.upgrade(tmp_path / "state.db")
    pg = postgres.create_engine(resolve(pg_url), poolclass=sa.pool.NullPool)
    try:
        with lite.begin() as conn:
            _fill(conn)
            lite_trigram = _sqlite_index_ids(conn, "messages_fts_trigram")
            lite_words = {w: _sqlite_match(conn, w)
                          for w in ("headword", "tailword", "grep", "shell", "hello")}
        with pg.begin() as conn:
            _fill(conn)
            pg_trigram = set(conn.exec_driver_sql(
                f"SELECT id FROM messages WHERE {fp.TRIGRAM_SCOPE_COLUMN}").scalars())
            pg_words = {w: _pg_match(conn, w) for w in lite_words}
    finally:
        lite.dispose()
        pg.dispose()
    assert pg_trigram == lite_trigram and len(lite_trigram) == 9  # 3 sessions x 3 non-tool rows
    assert pg_words == lite_words
    assert len(lite_words["tailword"]) == 6  # tool rows are cut, user rows are not


def _display_state(conn):
    return conn.execute(sa.select(M.c.id, M.c.active, M.c.compacted, M.c.display_identity,
                                  M.c.display_order).order_by(M.c.id)).all()


def _display_scenario(conn):
    """Inserts with peers, visibility flips, an identity change and a delete, one row
    per statement (the triggers' per-row behaviour), with the state after each."""
    states = []
    conn.execute(S.insert().values(id="s", source="cli", started_at=1.0))
    for i, identity in enumerate([b"a", b"b", b"a", None, b"a", b"b"]):
        conn.execute(M.insert().values(session_id="s", role="user", content=f"m{i}",
                                       timestamp=float(i), display_identity=identity))
    states.append(_display_state(conn))
    for message_id, values in [(1, {"active": 0}), (3, {"active": 0, "compacted": 1}),
                               (1, {"active": 1}), (5, {"active": 0}), (2, {"active": 0})]:
        conn.execute(M.update().where(M.c.id == message_id).values(**values))
        states.append(_display_state(conn))
    conn.execute(M.update().where(M.c.id == 6).values(content="changed"))
    states.append(_display_state(conn))
    conn.execute(M.delete().where(M.c.id == 1))
    states.append(_display_state(conn))
    conn.execute(M.insert().values(session_id="s", role="user", content="again", timestamp=9.0,
                                   display_identity=b"a"))
    states.append(_display_state(conn))
    return states


def test_the_display_order_triggers_behave_alike(tmp_path, pg_url):
    lite = sqlite_engine(tmp_path / "state.db")
    migrate.upgrade(tmp_path / "state.db")
    pg = postgres.create_engine(resolve(pg_url), poolclass=sa.pool.NullPool)
    try:
        with lite.begin() as conn:
            expected = _display_scenario(conn)
        with pg.begin() as conn:
            got = _display_scenario(conn)
    finally:
        lite.dispose()
        pg.dispose()
    assert [[tuple(r) for r in state] for state in got] == \
        [[tuple(r) for r in state] for state in expected]
    # the scenario exercised every rule: peers share the first copy's place
    assert expected[0][4].display_order == 1 and expected[-1][-1].display_order is not None
