"""repository/dialect.py: the dialect-dependent constructs, run on both engines."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_store import schema
from hermes_store.sql.constructs import (
    ascii_lower,
    int_sum,
    json_text,
    like_nocase,
    limit_or_all,
    offset_or_zero,
    starts_with,
)

from support.repository import backend, db, db_path, db_target  # noqa: F401

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


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN")
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


def _ids(db, *where, order=S.c.id):
    with db._read() as conn:
        return conn.execute(sa.select(S.c.id).where(*where).order_by(order)).scalars().all()


def test_like_nocase_folds_ascii_letters_only_as_sqlite_does(db):
    for sid, title in [("a", "Deploy Plan"), ("b", "deploy plan"), ("c", "DEPLOY PLAN"),
                       ("d", "Écrit"), ("e", "écrit"), ("f", "100% sure"), ("g", "100x sure")]:
        db.create_session(sid, "cli")
        db.set_session_title(sid, title)
    assert _ids(db, like_nocase(S.c.title, "deploy%")) == ["a", "b", "c"]
    assert _ids(db, like_nocase(S.c.title, "%PLAN")) == ["a", "b", "c"]
    # beyond ASCII, case counts (SQLite's LIKE; PostgreSQL's ILIKE would fold it)
    assert _ids(db, like_nocase(S.c.title, "é%")) == ["e"]
    assert _ids(db, like_nocase(S.c.title, "É%")) == ["d"]
    # ASCII letters beside others: the letters fold, the rest must match exactly
    # (PostgreSQL: ILIKE lets both through, the ASCII-only fold keeps one)
    assert _ids(db, like_nocase(S.c.title, "éCRIT")) == ["e"]
    assert _ids(db, like_nocase(S.c.title, "%CRIT")) == ["d", "e"]
    assert _ids(db, like_nocase(S.c.title, "100/%%", escape="/")) == ["f"]
    assert _ids(db, ascii_lower(S.c.title) == "deploy plan") == ["a", "b", "c"]
    assert _ids(db, ascii_lower(S.c.title) == "écrit") == ["e"]


def test_int_sum_is_an_integer_and_null_over_no_rows(db):
    for sid, tokens in [("a", 2**40), ("b", 5)]:
        db.create_session(sid, "cli")
        db.update_token_counts(sid, input_tokens=tokens, api_call_count=1)
    with db._read() as conn:
        total = conn.execute(sa.select(int_sum(S.c.input_tokens))).scalar()
        none = conn.execute(sa.select(int_sum(S.c.input_tokens)).where(S.c.id == "x")).scalar()
    assert total == 2**40 + 5 and type(total) is int
    assert none is None


def test_negative_limits_and_offsets_read_as_sqlite_reads_them(db):
    for sid in "abcd":
        db.create_session(sid, "cli")
    def page(limit, offset):
        stmt = (sa.select(S.c.id).order_by(S.c.id)
                .limit(limit_or_all(sa.bindparam("l", type_=sa.Integer)))
                .offset(offset_or_zero(sa.bindparam("o", type_=sa.Integer))))
        with db._read() as conn:
            return conn.execute(stmt, {"l": limit, "o": offset}).scalars().all()
    assert page(-1, 0) == ["a", "b", "c", "d"]  # negative LIMIT: no limit
    assert page(2, -5) == ["a", "b"]  # negative OFFSET: from the first row
    assert page(-1, 3) == ["d"] and page(1, 1) == ["b"]
