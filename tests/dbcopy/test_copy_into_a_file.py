"""A copy into a file is readable by the version the user came from (issue 32, item 2).

hermes-agent 0.19.0 (schema 22) reads a session's system prompt only from
``sessions.system_prompt``; this package keeps each prompt once, in ``system_prompts``
(schema v25), and a file the agent ran on is marked to keep them inline too
(``state_meta.inline_system_prompts``, ``hermes_store/agent/prompts.py``). A PostgreSQL
database never is (no pre-v25 reader opens it), so a file copied back from the server
with ``hermes-store db copy`` showed ``system_prompt: null`` for every session in
0.19.0's export. Every copy into a file now leaves it as the switch back from a SQLite
store does: every prompt inline, the file marked. The copy still verifies equal: an
inline copy of the prompt a row references is the same data, and the mark is each
file's own (neither is copied to PostgreSQL).
"""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, dbcopy, schema
from hermes_store.repository.system_prompts import INLINE_PROMPTS_KEY
from support.repository import copy_head
from support.upstream_state import load_hermes_state

PROMPTS = {"p1": "From the server.", "p2": "Shared \x00 prompt \x01", "p3": "Shared \x00 prompt \x01",
           "p4": "", "p5": None}


@pytest.fixture
def upstream():
    return load_hermes_state()


def _fill(db) -> None:
    for sid, prompt in PROMPTS.items():
        db.create_session(sid, "cli", system_prompt=prompt)
        db.append_message(sid, "user", f"hello from {sid}")


def _as_upstream_reads_it(upstream, path) -> dict:
    db = upstream.SessionDB(db_path=path)
    try:
        return {s["id"]: s["system_prompt"] for s in db.export_all()}
    finally:
        db.close()


def _inline(path) -> dict:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, system_prompt FROM sessions"))
    finally:
        conn.close()


def _meta(target) -> str | None:
    with SessionDB(target, read_only=True) as db:
        return db.get_meta(INLINE_PROMPTS_KEY)


def test_a_copy_from_postgresql_shows_upstream_every_prompt(upstream, pg_url, tmp_path):
    with SessionDB(pg_url) as server:
        _fill(server)
    back = tmp_path / "state.db"
    report = dbcopy.copy_store(pg_url, back)
    assert _as_upstream_reads_it(upstream, back) == PROMPTS
    assert report.ok and report.inline_prompts == 4
    assert _inline(back) == PROMPTS
    assert _meta(back) == "1"
    # still the same store: verification compares the prompts, not where they are kept
    assert dbcopy.verify_copy(pg_url, back).ok
    with SessionDB(back) as db:  # and it keeps them inline as it is written on
        db.create_session("later", "cli", system_prompt="Written after the copy.")
    assert _as_upstream_reads_it(upstream, back)["later"] == "Written after the copy."


def test_a_copy_between_files_shows_upstream_every_prompt(upstream, tmp_path):
    source = copy_head(tmp_path / "source.db")
    with SessionDB(source) as db:
        _fill(db)
    assert set(_inline(source).values()) == {None}  # unmarked: kept once, by hash
    copied = tmp_path / "copied.db"
    assert dbcopy.copy_store(source, copied).ok
    assert _as_upstream_reads_it(upstream, copied) == PROMPTS
    assert dbcopy.verify_copy(source, copied).ok


def test_the_mark_stays_with_the_file(pg_url, tmp_path):
    """A marked file copied to PostgreSQL: the server gets the prompts (by hash, and the
    inline copies as they are) but not the mark, so it writes new prompts once."""
    source = copy_head(tmp_path / "source.db")
    with SessionDB(source) as db:
        _fill(db)
        db.set_meta(INLINE_PROMPTS_KEY, "1")
    with SessionDB(source) as db:
        db.create_session("inline", "cli", system_prompt="Kept inline too.")
    assert _inline(source)["inline"] == "Kept inline too."
    assert dbcopy.copy_store(source, pg_url).ok
    assert dbcopy.verify_copy(source, pg_url).ok
    assert _meta(pg_url) is None
    with SessionDB(pg_url) as server:
        server.create_session("new", "cli", system_prompt="Once.")
        assert server.get_session("inline")["system_prompt"] == "Kept inline too."
        with server.engine.connect() as conn:
            stored = conn.execute(sa.select(schema.sessions.c.system_prompt)
                                  .where(schema.sessions.c.id == "new")).scalar()
        assert stored is None


def test_a_mismatch_in_a_prompt_is_still_found(pg_url, tmp_path):
    """Comparing prompts wherever they are kept still sees a different prompt."""
    with SessionDB(pg_url) as server:
        _fill(server)
    back = tmp_path / "state.db"
    dbcopy.copy_store(pg_url, back)
    conn = sqlite3.connect(back)
    with conn:
        conn.execute("UPDATE sessions SET system_prompt = 'changed' WHERE id = 'p1'")
    conn.close()
    assert dbcopy.verify_copy(pg_url, back).mismatched == ["sessions"]
