"""The Core head schema renders, on SQLite, exactly the ordinary tables and indexes of the
reference head file — column order, types, NOT NULL, defaults, keys, FKs included."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from hermes_store import schema
from hermes_store.backends.sqlite.engine import create_engine
from support import schema_dump

HEAD_REFERENCE = Path(__file__).parent / "data" / "head-v30-reference.schema.json"

# Parts of a dump that the Core metadata does not describe (FTS, triggers, data).
_NOT_CORE = ("triggers", "views", "virtual_tables", "schema_version", "state_meta", "pragmas")


def _tables_and_indexes(dump: dict) -> dict:
    prepared = schema_dump._prepare(dump, column_order=True, schema_only=True, ignore_meta=[])
    for key in _NOT_CORE:
        prepared.pop(key, None)
    return prepared


def test_create_all_matches_reference_tables_and_indexes(tmp_path):
    path = tmp_path / "state.db"
    engine = create_engine(path)
    schema.metadata.create_all(engine)
    engine.dispose()

    got = _tables_and_indexes(schema_dump.load(str(path)))
    want = _tables_and_indexes(schema_dump.load(str(HEAD_REFERENCE)))

    assert schema_dump.diff(want, got) == []


def test_every_reference_table_is_a_module_attribute():
    reference = schema_dump.load(str(HEAD_REFERENCE))
    assert set(schema.metadata.tables) == set(reference["tables"])
    for name, table in schema.metadata.tables.items():
        assert getattr(schema, name) is table


def test_column_counts_of_the_wide_tables():
    assert len(schema.sessions.c) == 61
    assert len(schema.messages.c) == 26


def test_single_text_keys_accept_null_like_upstream_but_rowid_key_does_not(tmp_path):
    # Upstream's `id TEXT PRIMARY KEY` is nullable in SQLite; keep that quirk rather than
    # silently tightening it, so adopted files and fresh files have one shape.
    engine = create_engine(tmp_path / "state.db")
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(schema.state_meta.insert().values(key=None, value="x"))
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.state_meta)).scalar() == 1
    engine.dispose()


def test_messages_id_is_autoincrement_so_ids_are_never_reused(tmp_path):
    engine = create_engine(tmp_path / "state.db")
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(schema.sessions.insert().values(id="s", source="cli", started_at=1.0))
        insert = schema.messages.insert().values(session_id="s", role="user", timestamp=1.0)
        first = conn.execute(insert).inserted_primary_key[0]
        second = conn.execute(insert).inserted_primary_key[0]
        conn.execute(schema.messages.delete().where(schema.messages.c.id == second))
        third = conn.execute(insert).inserted_primary_key[0]
    engine.dispose()
    assert first < second < third


def test_foreign_keys_are_enforced_and_usage_cascades(tmp_path):
    engine = create_engine(tmp_path / "state.db")
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(schema.sessions.insert().values(id="s", source="cli", started_at=1.0))
        conn.execute(schema.session_model_usage.insert().values(session_id="s", model="m"))
        conn.execute(schema.sessions.delete())
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.session_model_usage)).scalar() == 0
    with engine.connect() as conn:
        with pytest.raises(sa.exc.IntegrityError, match="FOREIGN KEY"):
            conn.execute(schema.messages.insert().values(session_id="nope", role="user", timestamp=1.0))
    engine.dispose()


def test_metadata_also_compiles_for_postgresql():
    # Nothing SQLite-only may leak into the Core schema. The partial indexes' predicate is
    # written once (as SQLite's option) and given to PostgreSQL by its backend when it
    # loads (schema._partial): what a process that opens a PostgreSQL store does first.
    from hermes_store.backends import base as backends

    backends.get("postgresql")
    dialect = postgresql.dialect()
    for table in schema.metadata.sorted_tables:
        CreateTable(table).compile(dialect=dialect)
        for index in table.indexes:
            ddl = str(CreateIndex(index).compile(dialect=dialect))
            if index.name == "idx_sessions_title_unique":
                assert "WHERE title IS NOT NULL" in ddl
