"""How search_messages reaches the database: a fixed handful of statements per search
(both engines), plans that use the indexes (SQLite: EXPLAIN QUERY PLAN on the SQL
actually sent), and the orders that the faster plans must keep (rank ties, context at
equal timestamps; both engines)."""

from __future__ import annotations

import logging
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
from contextlib import contextmanager

import pytest
from sqlalchemy import event

from support.repository import backend, db, db_path, db_target  # noqa: F401


@contextmanager
def sent_sql(store):
    """Every (statement, parameters) the store sends while the block runs."""
    sent: list[tuple[str, tuple]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append((statement, parameters))

    event.listen(store._engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(store._engine, "before_cursor_execute", record)


def plans(db_path, sent) -> list[str]:
    """EXPLAIN QUERY PLAN of each SELECT sent, one string per statement."""
    conn = sqlite3.connect(db_path)
    try:
        return [
            " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
            for sql, params in sent if sql.lstrip().upper().startswith("SELECT")
        ]
    finally:
        conn.close()


@pytest.fixture
def long_session(db):
    """One session with a few hundred messages, a tenth of them mentioning docker."""
    db.create_session("long", "cli")
    db.create_session("tg", "telegram")
    messages = [{"role": "user" if i % 2 else "assistant",
                 "content": f"turn {i} " + ("docker compose up" if i % 10 == 0 else "chatter"),
                 "timestamp": 1000.0 + i} for i in range(400)]
    db.append_messages("long", messages)
    db.append_messages("tg", [{"role": "user", "content": "docker on telegram",
                               "timestamp": 5000.0}])
    return db


@pytest.mark.parametrize("kwargs", [
    {},
    {"sort": "newest"},
    {"sort": "oldest", "offset": 3},
    {"source_filter": ["cli"], "role_filter": ["assistant"], "exclude_sources": ["cron"]},
    {"include_inactive": True, "limit": -1},
])
def test_statements_per_search_do_not_grow_with_the_hits(long_session, kwargs):
    long_session.search_messages("docker")  # PostgreSQL keeps the index lookup's answer
    with sent_sql(long_session) as few:
        assert len(long_session.search_messages("docker", limit=2, **{
            k: v for k, v in kwargs.items() if k != "limit"})) == 2
    with sent_sql(long_session) as many:
        hits = long_session.search_messages("docker", **kwargs)
    assert len(hits) >= 18
    assert len(many) == len(few) <= 5  # (BEGIN, index lookup,) one or two SELECTs


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN of FTS5 statements")
def test_relevance_order_is_left_to_fts5_and_context_uses_the_session_index(
        long_session, db_path):
    with sent_sql(long_session) as sent:
        long_session.search_messages("docker", source_filter=["cli"])
    (main,) = [p for p in plans(db_path, sent) if "messages_fts" in p]
    # no sort of all matches by SQLite: FTS5 hands rows over best first
    assert "USE TEMP B-TREE" not in main
    # each neighbour is a range of (session_id, timestamp), not a walk of the session
    assert "idx_messages_session (session_id=? AND timestamp<?)" in main
    assert "idx_messages_session (session_id=? AND timestamp>?)" in main


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN of FTS5 statements")
def test_time_order_sorts_ids_only_then_reads_the_page(long_session, db_path):
    with sent_sql(long_session) as sent:
        hits = long_session.search_messages("docker", sort="newest", limit=3)
    ids_plan, details_plan = [p for p in plans(db_path, sent) if "messages_fts" in p]
    assert "USE TEMP B-TREE FOR ORDER BY" in ids_plan
    assert "USE TEMP B-TREE" not in details_plan
    assert [h["timestamp"] for h in hits] == [5000.0, 1390.0, 1380.0]
    assert all(">>>docker<<<" in h["snippet"] for h in hits)


def test_equal_ranks_come_back_in_id_order(db):
    db.create_session("s", "cli")
    ids = db.append_messages("s", [{"role": "user", "content": "same words here",
                                    "timestamp": float(t)} for t in (30, 10, 20, 40)])
    assert [h["id"] for h in db.search_messages("words")] == ids
    assert [h["id"] for h in db.search_messages("words", limit=2, offset=2)] == ids[2:]


def test_context_at_equal_timestamps_follows_ids(db):
    db.create_session("s", "cli")
    first, middle, last = db.append_messages("s", [
        {"role": "user", "content": "alpha", "timestamp": 7.0},
        {"role": "assistant", "content": "bravo", "timestamp": 7.0},
        {"role": "user", "content": "charlie", "timestamp": 7.0},
    ])
    (hit,) = db.search_messages("bravo")
    assert [c["content"] for c in hit["context"]] == ["alpha", "bravo", "charlie"]
    (hit,) = db.search_messages("charlie", sort="newest")
    assert [c["content"] for c in hit["context"]] == ["bravo", "charlie"]


@pytest.mark.sqlite_only("damages an FTS5 shadow table")
def test_damaged_index_with_time_order_falls_back(db, db_path, caplog):
    db.create_session("s", "cli")
    db.append_messages("s", [{"role": "user", "content": f"docker {i}"} for i in range(30)])
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("DELETE FROM messages_fts_data WHERE id > 10")
    conn.close()
    with caplog.at_level(logging.WARNING, logger="hermes_store.repository.search"):
        for sort in (None, "newest"):
            assert len(db.search_messages("docker", sort=sort)) == 20
    assert "bounded LIKE scan" in caplog.text
    # the connection that met the failed MATCH reads on normally
    assert len(db.get_messages("s")) == 30
