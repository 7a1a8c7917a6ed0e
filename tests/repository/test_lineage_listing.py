"""Lineage walks and listings: api-catalog §5, §6 and the token statistics."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from support.repository import backend, db, db_path, db_target, add_message, set_fields  # noqa: F401


def _chain(db):
    """root -(compression)-> c1 -(compression)-> c2, plus a branch and a delegate run."""
    db.create_session("root", "cli")
    db.create_session("c1", "cli", parent_session_id="root")
    db.create_session("c2", "cli", parent_session_id="c1")
    db.create_session("branch", "cli", parent_session_id="c2",
                      model_config={"_branched_from": "c2"})
    db.create_session("deleg", "cli", parent_session_id="c2",
                      model_config={"_delegate_from": "c2"})
    for i, sid in enumerate(("root", "c1", "c2", "branch", "deleg")):
        set_fields(db, sid, started_at=1000.0 + i * 10)
    db.end_session("root", "compression")
    db.end_session("c1", "compression")


def test_compression_tip_and_lineage(db):
    _chain(db)
    assert db.get_compression_tip("root") == "c2"
    assert db.get_compression_tip("c1") == "c2"
    assert db.get_compression_tip("branch") == "branch"
    assert db.get_compression_lineage("c1") == ["root", "c1", "c2"]
    assert db.get_compression_lineage("c2") == ["root", "c1", "c2"]
    assert db.get_compression_lineage("branch") == ["branch"]
    assert db.get_compression_lineage("missing") == []


def test_tip_prefers_compressed_then_live_continuation(db):
    db.create_session("p", "cli")
    db.end_session("p", "compression")
    db.create_session("stale", "cli", parent_session_id="p")
    db.end_session("stale", "ws_orphan_reap")
    db.create_session("live", "cli", parent_session_id="p")
    add_message(db, "stale", "user", "newer activity", timestamp=9e9)
    assert db.get_compression_tip("p") == "live"
    db.create_session("tool", "tool", parent_session_id="p")
    assert db.get_compression_tip("p") == "live"


def test_walks_survive_a_parent_cycle(db):
    db.create_session("x", "cli")
    db.create_session("y", "cli", parent_session_id="x")
    set_fields(db, "x", parent_session_id="y", end_reason="compression", ended_at=1.0)
    set_fields(db, "y", end_reason="compression", ended_at=1.0)
    assert db.get_compression_tip("x") in {"x", "y"}
    assert db.get_conversation_root("x") in {"x", "y"}
    assert [r["id"] for r in db.get_session_ancestors("x")] == ["y"]
    assert [r["id"] for r in db.get_session_descendants("x")] == ["y"]


def test_conversation_root_ancestors_descendants(db):
    _chain(db)
    assert db.get_conversation_root("deleg") == "root"
    assert db.get_conversation_root("root") == "root"
    assert db.get_conversation_root("unknown") == "unknown"
    assert [r["id"] for r in db.get_session_ancestors("deleg")] == ["c2", "c1", "root"]
    assert [r["id"] for r in db.get_session_descendants("c1")] == ["c2", "branch", "deleg"]
    assert db.get_session_ancestors("root") == []


def test_resolve_resume_session_id_follows_to_messages(db):
    _chain(db)
    add_message(db, "c2", "user", "hello")
    assert db.resolve_resume_session_id("root") == "c2"
    assert db.resolve_resume_session_id("branch") == "branch"  # nothing to follow
    assert db.resolve_resume_session_id("") == ""


@pytest.mark.parametrize("length, expected_len, dots", [
    (59, 59, False), (60, 60, False), (61, 63, True), (64, 63, True),
])
def test_preview_cut(db, length, expected_len, dots):
    db.create_session("s", "cli")
    add_message(db, "s", "assistant", "not a user message", timestamp=1.0)
    add_message(db, "s", "user", "a" * length, timestamp=2.0)
    (row,) = db.list_sessions_rich()
    assert len(row["preview"]) == expected_len
    assert row["preview"].endswith("...") is dots


def test_preview_edges_and_last_active(db):
    db.create_session("blank", "cli")
    add_message(db, "blank", "user", "   ", timestamp=5.0)
    add_message(db, "blank", "user", "second message", timestamp=6.0)
    db.create_session("none", "cli")
    set_fields(db, "none", started_at=123.0)
    db.create_session("lines", "cli")
    add_message(db, "lines", "user", "one\ntwo\r\nthree", timestamp=7.0)
    rows = {r["id"]: r for r in db.list_sessions_rich()}
    assert rows["blank"]["preview"] == ""  # no fall back to the next message
    assert rows["blank"]["last_active"] == 6.0
    assert rows["none"]["preview"] == "" and rows["none"]["last_active"] == 123.0
    assert rows["lines"]["preview"] == "one two  three"


def test_listing_hides_children_and_archived_and_projects_tips(db):
    _chain(db)
    add_message(db, "root", "user", "root question", timestamp=1001.0)
    add_message(db, "c2", "user", "tip question", timestamp=5000.0)
    db.set_session_title("c2", "Tip Title")
    db.create_session("other", "telegram")
    set_fields(db, "other", started_at=2000.0)

    rows = db.list_sessions_rich()
    assert [r["id"] for r in rows] == ["other", "branch", "c2"]  # started_at DESC
    tip = rows[2]
    assert tip["_lineage_root_id"] == "root"
    assert tip["started_at"] == 1000.0  # the root's start keeps its place in the order
    assert (tip["title"], tip["preview"], tip["last_active"]) == (
        "Tip Title", "tip question", 5000.0)

    raw = db.list_sessions_rich(project_compression_tips=False)
    assert [r["id"] for r in raw] == ["other", "branch", "root"]
    everything = db.list_sessions_rich(include_children=True)
    assert {r["id"] for r in everything} == {"root", "c1", "c2", "branch", "deleg", "other"}

    db.set_session_archived("other", True)
    assert "other" not in [r["id"] for r in db.list_sessions_rich()]
    assert [r["id"] for r in db.list_sessions_rich(archived_only=True)] == ["other"]
    assert len(db.list_sessions_rich(include_archived=True)) == 3


def test_listing_filters_and_paging(db):
    for i in range(5):
        db.create_session(f"s{i}", "cli" if i % 2 else "telegram", cwd=f"/w/p{i % 2}")
        set_fields(db, f"s{i}", started_at=100.0 + i)
    add_message(db, "s4", "user", "x")
    assert [r["id"] for r in db.list_sessions_rich(limit=2)] == ["s4", "s3"]
    assert [r["id"] for r in db.list_sessions_rich(limit=2, offset=2)] == ["s2", "s1"]
    assert {r["id"] for r in db.list_sessions_rich(source="cli")} == {"s1", "s3"}
    assert {r["id"] for r in db.list_sessions_rich(exclude_sources=["cli"])} == {"s0", "s2", "s4"}
    assert {r["id"] for r in db.list_sessions_rich(cwd_prefix="/w/p1")} == {"s1", "s3"}
    assert [r["id"] for r in db.list_sessions_rich(min_message_count=1)] == ["s4"]
    compact = db.list_sessions_rich(compact_rows=True)
    assert "system_prompt" not in compact[0] and "preview" in compact[0]


def test_order_by_last_active_uses_the_whole_chain(db):
    _chain(db)
    db.create_session("recent", "cli")
    set_fields(db, "recent", started_at=3000.0)
    add_message(db, "recent", "user", "hi", timestamp=3000.0)
    add_message(db, "c2", "user", "latest", timestamp=4000.0)
    by_start = [r["id"] for r in db.list_sessions_rich()]
    by_activity = [r["id"] for r in db.list_sessions_rich(order_by_last_active=True)]
    assert by_start[0] == "recent"
    assert by_activity[0] == "c2"  # old root, continued most recently

    found = db.list_sessions_rich(order_by_last_active=True, id_query="C1")
    assert [r["_lineage_root_id"] for r in found] == ["root"]
    db.set_session_title("c1", "AN-94 rifle")
    assert [r["id"] for r in db.list_sessions_rich(order_by_last_active=True,
                                                   search_query="an94")] == ["c2"]
    assert db.list_sessions_rich(order_by_last_active=True, search_query="100%") == []


def test_search_sessions_includes_children_and_archived(db):
    _chain(db)
    db.set_session_archived("branch", True)
    add_message(db, "deleg", "user", "x", timestamp=9000.0)
    rows = db.search_sessions(limit=100)
    assert len(rows) == 5 and rows[0]["id"] == "deleg" and rows[0]["last_active"] == 9000.0
    assert rows[1]["id"] == "branch"  # no messages: started_at is the activity
    assert [r["id"] for r in db.search_sessions(limit=2, offset=1)] == ["branch", "c2"]
    assert db.search_sessions(source="nope") == []


def test_token_statistics(db):
    db.create_session("a", "cli", model="m1")
    db.create_session("b", "cli", model="m1")
    db.create_session("c", "cli", model="m2")
    db.create_session("d", "cli")
    db.update_token_counts("a", 100, 50, estimated_cost_usd=0.5)
    db.update_token_counts("b", 10, 5, estimated_cost_usd=0.25)
    db.update_token_counts("c", 1000, 1, estimated_cost_usd=0.1)
    stats = db.token_stats_by_model()
    assert [s["model"] for s in stats] == ["m1", "m2"]  # cost descending
    assert stats[0] == {"model": "m1", "sessions": 2, "input_tokens": 110,
                        "output_tokens": 55, "estimated_cost_usd": 0.75}
    top = db.top_sessions_by_tokens(limit=2)
    assert [(t["id"], t["total_tokens"]) for t in top] == [("c", 1001), ("a", 150)]


def _compressed(db, *ids, started_at: float, last_live: bool = True):
    """A compression chain ``ids[0] -> ids[1] -> …``; every member but the last ended
    by compression (the last too when ``last_live`` is False)."""
    parent = None
    for i, sid in enumerate(ids):
        db.create_session(sid, "cli", parent_session_id=parent)
        set_fields(db, sid, started_at=started_at + i)
        if i < len(ids) - 1 or not last_live:
            db.end_session(sid, "compression")
        parent = sid


def test_listing_projects_every_root_onto_its_own_tip(db):
    # Tip statements are prebuilt and reused: each root must still get its own tip,
    # whatever the chain length, and a compression-ended last member is a tip too.
    _compressed(db, "a0", "a1", started_at=100.0)
    _compressed(db, "b0", "b1", "b2", "b3", started_at=200.0)
    _compressed(db, "c0", "c1", started_at=300.0, last_live=False)
    _compressed(db, "d0", started_at=400.0, last_live=False)  # ended, never continued
    for sid in ("a1", "b3", "c1"):
        add_message(db, sid, "user", f"question in {sid}")
    for compact in (False, True):
        rows = db.list_sessions_rich(compact_rows=compact)
        assert [(r["id"], r.get("_lineage_root_id")) for r in rows] == [
            ("d0", None), ("c1", "c0"), ("b3", "b0"), ("a1", "a0")]
        assert [r["preview"] for r in rows] == [
            "", "question in c1", "question in b3", "question in a1"]
        assert [r["started_at"] for r in rows] == [400.0, 300.0, 200.0, 100.0]
    assert [db.get_compression_tip(r) for r in ("a0", "b0", "b1", "c0", "d0")] == [
        "a1", "b3", "b3", "c1", "d0"]
    assert db.resolve_resume_session_id("b0") == "b3"
    assert db.get_compression_lineage("b2") == ["b0", "b1", "b2", "b3"]


def test_tip_walk_stops_where_a_compressed_chain_loops_back(db):
    _compressed(db, "x0", "x1", started_at=100.0, last_live=False)
    set_fields(db, "x0", parent_session_id="x1")  # x1 -> x0 -> x1 …
    assert db.get_compression_tip("x0") == "x1"
    assert db.get_compression_tip("x1") == "x0"


def test_repeated_listings_with_other_arguments_get_their_own_rows(db):
    # Listing statements are cached per set of filters: a call must never see the
    # filters, limit or offset of an earlier call.
    for i in range(6):
        db.create_session(f"s{i}", "cli" if i % 2 else "web", cwd=f"/p{i % 3}")
        set_fields(db, f"s{i}", started_at=10.0 + i)
    ids = lambda **kw: [r["id"] for r in db.list_sessions_rich(**kw)]  # noqa: E731
    assert ids(source="cli") == ["s5", "s3", "s1"]
    assert ids(source="web") == ["s4", "s2", "s0"]
    assert ids(source="cli", limit=1, offset=1) == ["s3"]
    assert ids(source="cli", limit=1, offset=2) == ["s1"]
    assert ids(exclude_sources=["web"]) == ["s5", "s3", "s1"]
    assert ids(exclude_sources=("cli",)) == ["s4", "s2", "s0"]
    assert ids(exclude_sources={"cli", "web"}) == []
    assert ids(cwd_prefix="/p0") == ["s3", "s0"]
    assert ids(cwd_prefix="/p1") == ["s4", "s1"]
    assert ids(limit=None) == ["s5", "s4", "s3", "s2", "s1", "s0"]
    assert ids(limit=-1, offset=4) == ["s1", "s0"]
    assert ids(order_by_last_active=True, id_query="s4") == ["s4"]
    assert ids(order_by_last_active=True, id_query="s2") == ["s2"]
    assert ids(id_query="s2", limit=2) == ["s5", "s4"]  # ignored without activity order


def test_listing_sends_one_select_plus_two_per_continued_root(db):
    # A walk stops at a continuation that did not end by compression without asking
    # for its (impossible) continuation: one step and one row fetch per root.
    for n in range(3):
        _compressed(db, f"r{n}", f"r{n}.tip", started_at=100.0 + 10 * n)
    db.create_session("plain", "cli")
    selects: list[str] = []

    def record(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        rows = db.list_sessions_rich()
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
    assert [r["id"] for r in rows] == ["plain", "r2.tip", "r1.tip", "r0.tip"]
    assert len(selects) == 1 + 2 * 3
