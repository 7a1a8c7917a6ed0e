"""Fixtures for the repository tests: real files in tmp_path, opened by SessionDB."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, schema


def _migrations_reach_head() -> bool:
    try:
        from hermes_store import migrate
        return migrate.head() == f"{schema.SCHEMA_VERSION:04d}"
    except Exception:  # noqa: BLE001 - the migration chain is still being written
        return False


MIGRATIONS_AT_HEAD = _migrations_reach_head()


def build_head_file(path) -> None:
    """A head file from the Core metadata + FTS + display triggers (used only while the
    migration chain does not reach head yet)."""
    from hermes_store import display_order
    from hermes_store.fts import ddl as fts_ddl

    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        if not sa.inspect(conn).has_table("sessions"):
            schema.metadata.create_all(conn)
            fts_ddl.create_fts(conn)
            display_order.create_display_triggers(conn)
            conn.execute(sa.insert(schema.schema_version).values(version=schema.SCHEMA_VERSION))
            fts_ddl.stamp_storage_version(conn)
    engine.dispose()


@pytest.fixture(autouse=True)
def _head_without_migrations(monkeypatch):
    if not MIGRATIONS_AT_HEAD:
        import hermes_store.store as store

        monkeypatch.setattr(store, "ensure_schema", lambda path, **_: build_head_file(path))


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "state.db"


@pytest.fixture
def db(db_path):
    store = SessionDB(db_path)
    yield store
    store.close()
