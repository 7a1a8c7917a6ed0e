"""Helpers for the head-schema tests: build a head file straight from the head DDL, add
rows, look inside the FTS indexes, and the ``head_engine`` fixture.

Deliberately not a conftest.py: other test packages do ``from conftest import ...``,
which a second conftest module on sys.path would shadow."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from hermes_store import schema
from hermes_store.display_order import create_display_triggers
from hermes_store.backends.sqlite.engine import create_engine
from hermes_store.connections import writer
from hermes_store.backends.sqlite.fts import ddl


def build_head(path, **fts_options) -> sa.engine.Engine:
    """Every head object on an empty file, stamped like a fresh v30 file."""
    engine = create_engine(path)
    with writer(engine).begin() as conn:
        schema.metadata.create_all(conn)
        ddl.create_fts(conn, **fts_options)
        create_display_triggers(conn)
        conn.execute(schema.schema_version.insert().values(version=schema.SCHEMA_VERSION))
        ddl.stamp_storage_version(conn)
    return engine


@pytest.fixture
def head_engine(tmp_path):
    """A fresh head file; the engine begins every transaction with BEGIN IMMEDIATE."""
    engine = build_head(tmp_path / "state.db")
    yield writer(engine)
    engine.dispose()


def add_session(conn, session_id, *, source="cli", model_config=None, **values):
    if isinstance(model_config, dict):
        model_config = json.dumps(model_config)
    conn.execute(schema.sessions.insert().values(
        id=session_id, source=source, model_config=model_config, started_at=1.0, **values
    ))


def add_message(conn, session_id, content, *, role="user", **values) -> int:
    values.setdefault("timestamp", 1.0)
    result = conn.execute(schema.messages.insert().values(
        session_id=session_id, role=role, content=content, **values
    ))
    return result.inserted_primary_key[0]


def indexed_ids(conn, table) -> set[int]:
    """Row ids FTS5 holds in ``table``'s index (its docsize shadow has one row per
    indexed document; reading the FTS table itself would read the content view)."""
    return set(conn.exec_driver_sql(f"SELECT id FROM {table}_docsize").scalars())


def match(conn, table, query) -> set[int]:
    return set(conn.exec_driver_sql(
        f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (query,)
    ).scalars())
