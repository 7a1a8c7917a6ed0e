"""Switching back (issue 16, item 4's last paragraph): after the agent ran on this package,
upstream 0.19.0 — which reads only ``sessions.system_prompt`` — still sees every system
prompt of the file (decision: ``hermes_store/agent/prompts.py``, docs/agent.md)."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import copy_fixture
from hermes_store import SessionDB as CoreSessionDB
from hermes_store.agent import hermes_state as ours
from hermes_store.agent.prompts import keep_prompts_inline, shares_prompts_inline
from support.upstream_state import load_hermes_state

FIXTURE = "upstream-0.19.0-v22"


@pytest.fixture
def upstream():
    return load_hermes_state()


def _prompts_as_upstream_reads_them(upstream, path) -> dict:
    db = upstream.SessionDB(db_path=path)
    try:
        return {s["id"]: s["system_prompt"] for s in db.export_all()}
    finally:
        db.close()


def _inline_column(path) -> dict:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, system_prompt FROM sessions"))
    finally:
        conn.close()


def test_a_users_file_keeps_its_prompts_for_019_after_the_agent_ran_on_us(upstream, tmp_path):
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    before = copy_fixture(FIXTURE, tmp_path / "before")
    after = copy_fixture(FIXTURE, tmp_path / "after")
    expected = _prompts_as_upstream_reads_them(upstream, before)
    assert any(expected.values())  # the fixture has a prompt to lose

    db = ours.SessionDB(db_path=after)  # adopts v22, migrates to v30 (0025 moves prompts)
    assert db.get_meta("inline_system_prompts") == "1"
    ours_view = {s["id"]: s["system_prompt"] for s in db.export_all()}
    # the agent keeps running on us: new sessions, a changed prompt, an import
    db.create_session("new-1", "cli", system_prompt="You are Hermes, on hermes_store.")
    db.create_session("new-2", "telegram")
    db.create_session("new-2", "telegram", system_prompt="Filled later.")   # fills a NULL
    db.update_system_prompt("new-1", "You are Hermes, v2.")
    db.import_sessions([{"id": "imp-1", "source": "cli", "system_prompt": "Imported prompt.",
                         "started_at": 1.0, "messages": []}])
    db.create_session("new-3", "cli", system_prompt="Routed.")
    db.update_session_billing_route("new-3", provider="openrouter", base_url="https://x")
    final = {s["id"]: s["system_prompt"] for s in db.export_all()}
    db.close()

    assert ours_view == expected
    assert final["new-1"] == "You are Hermes, v2." and final["new-3"] is None
    # switching back: upstream 0.19.0 reads the same prompts as we do
    assert _prompts_as_upstream_reads_them(upstream, after) == final
    assert _inline_column(after) == final
    # and upstream writes on: we read what it wrote
    theirs = upstream.SessionDB(db_path=after)
    theirs.update_system_prompt("new-1", "Written by 0.19.0.")
    theirs.create_session("up-1", "cli", system_prompt="Up.")
    theirs.close()
    with ours.SessionDB(db_path=after) as again:
        assert again.get_session("new-1")["system_prompt"] == "Written by 0.19.0."
        assert again.get_session("up-1")["system_prompt"] == "Up."


def test_core_writers_honour_the_marker_and_refill_covers_others(tmp_path):
    path = tmp_path / "state.db"
    ours.SessionDB(db_path=path).close()  # the agent opened it once: marked
    with CoreSessionDB(path) as core:  # e.g. `hermes-store sessions import`
        assert shares_prompts_inline(core)
        core.create_session("c1", "cli", system_prompt="Core write.")
        # a writer that does not know the marker (an older hermes_store, a v25+ upstream)
        with core.engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO system_prompts (hash, prompt) VALUES ('h1', 'Hash only.')")
            conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at, system_prompt_hash) "
                                 "VALUES ('x1', 'cli', 1.0, 'h1')")
        assert keep_prompts_inline(core) == 0          # marked: nothing to do
        assert keep_prompts_inline(core, refill=True) == 1
    assert _inline_column(path) == {"c1": "Core write.", "x1": "Hash only."}


def test_an_unmarked_file_stays_deduplicated(tmp_path):
    path = tmp_path / "state.db"
    with CoreSessionDB(path) as core:
        core.create_session("c1", "cli", system_prompt="Stored once.")
        assert not shares_prompts_inline(core)
        assert core.get_session("c1")["system_prompt"] == "Stored once."
    assert _inline_column(path) == {"c1": None}


def test_a_read_only_open_marks_nothing(tmp_path):
    path = tmp_path / "state.db"
    CoreSessionDB(path).close()
    with ours.SessionDB(db_path=path, read_only=True) as db:
        assert db.get_meta("inline_system_prompts") is None


def test_postgresql_is_never_marked(pg_url):
    with ours.SessionDB(pg_url) as db:
        db.create_session("p1", "cli", system_prompt="On the server.")
        assert db.get_meta("inline_system_prompts") is None
        assert keep_prompts_inline(db, refill=True) == 0
        assert db.get_session("p1")["system_prompt"] == "On the server."
        row = db._conn.execute("SELECT system_prompt, system_prompt_hash FROM sessions").fetchone()
        assert row["system_prompt"] is None and row["system_prompt_hash"]


def test_a_file_copied_back_from_postgresql_is_made_readable_for_019(upstream, pg_url, tmp_path):
    from hermes_store.agent.prompts import keep_file_readable_by_pre_v25
    from hermes_store.dbcopy import copy_store

    with ours.SessionDB(pg_url) as server:
        server.create_session("p1", "cli", system_prompt="From the server.")
    back = tmp_path / "state.db"
    copy_store(pg_url, back)  # a copy into a file keeps the prompts inline (issue 32)
    assert _prompts_as_upstream_reads_them(upstream, back)["p1"] == "From the server."
    assert keep_file_readable_by_pre_v25(back) == 0  # nothing left to put back
    assert _prompts_as_upstream_reads_them(upstream, back)["p1"] == "From the server."
