"""repository/dialect.py: the dialect-dependent constructs, run on a real file."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_store import schema
from hermes_store.repository.dialect import json_text, starts_with

from repo_helpers import db, db_path  # noqa: F401

S = schema.sessions


def _ids_with_key(db, key):
    stmt = sa.select(S.c.id).where(json_text(S.c.model_config, key).is_not(None))
    with db._read() as conn:
        return conn.execute(stmt).scalars().all()


def test_json_text_statements_differing_only_in_the_key_are_not_confused(db):
    # The key is spelled into the SQL: if it were not part of the cache key, the
    # second statement would reuse the first one's compiled form and find "d".
    db.create_session("d", "cli", model_config={"_delegate_from": "p"})
    db.create_session("b", "cli", model_config={"_branched_from": "p"})
    assert _ids_with_key(db, "_delegate_from") == ["d"]
    assert _ids_with_key(db, "_branched_from") == ["b"]
    assert _ids_with_key(db, "_delegate_from") == ["d"]


def test_starts_with_is_exact_and_case_sensitive(db):
    ids = ["cron_a_", "cron_a_1", "cron_a_\U0001f600", "cron_a`", "cron_a", "cron_ab_1",
           "CRON_A_1", "cron_A_1", "xcron_a_1"]
    for sid in ids:
        db.create_session(sid, "cron")
    stmt = sa.select(S.c.id).where(starts_with(S.c.id, "cron_a_")).order_by(S.c.id)
    with db._read() as conn:
        found = conn.execute(stmt).scalars().all()
    assert found == ["cron_a_", "cron_a_1", "cron_a_\U0001f600"]


def test_starts_with_is_an_index_range_on_sqlite(db):
    stmt = sa.select(S.c.id).where(S.c.source == "cron", starts_with(S.c.id, "cron_a_"))
    with db._read() as conn:
        compiled = stmt.compile(conn)
        plan = conn.exec_driver_sql(
            f"EXPLAIN QUERY PLAN {compiled}", tuple(compiled.params[k] for k in compiled.positiontup)
        ).all()
    assert "USING COVERING INDEX idx_sessions_source_id (source=? AND id>? AND id<?)" in plan[0][3]


def test_starts_with_renders_postgresqls_function():
    from sqlalchemy.dialects import postgresql

    sql = str(sa.select(S.c.id).where(starts_with(S.c.id, "cron_a_"))
              .compile(dialect=postgresql.dialect()))
    assert "starts_with(sessions.id, " in sql and ">=" not in sql


def test_starts_with_needs_a_prefix():
    with pytest.raises(ValueError, match="non-empty"):
        starts_with(S.c.id, "")
