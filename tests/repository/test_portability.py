"""Export and cleanup: api-catalog §8 (export, delete, prune, archive in bulk)."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from hermes_store import schema
from support.repository import (  # noqa: F401
    add_message, backend, db, db_path, db_target, fts_hits, set_fields,
)

OLD = time.time() - 200 * 86400


def _count(db, table, **where):
    with db._read() as conn:
        stmt = sa.select(sa.func.count()).select_from(table)
        for name, value in where.items():
            stmt = stmt.where(table.c[name] == value)
        return conn.execute(stmt).scalar()


def test_export_session_has_active_messages_only(db):
    db.create_session("s", "cli", model="m")
    first = add_message(db, "s", "user", "kept message")
    add_message(db, "s", "assistant", "rewound reply", active=0)
    exported = db.export_session("s")
    assert exported["id"] == "s" and exported["model"] == "m"
    assert [m["id"] for m in exported["messages"]] == [first]
    assert exported["messages"][0]["content"] == "kept message"
    assert db.export_session("missing") is None


def test_export_all_orders_by_activity_and_filters_source(db):
    for sid, source, ts in (("a", "cli", 10.0), ("b", "telegram", 30.0), ("c", "cli", 20.0)):
        db.create_session(sid, source)
        add_message(db, sid, "user", f"hello from {sid}", timestamp=ts)
    db.set_session_archived("c", True)
    everything = db.export_all()
    assert [s["id"] for s in everything] == ["b", "c", "a"]
    assert all(len(s["messages"]) == 1 and "last_active" in s for s in everything)
    assert [s["id"] for s in db.export_all(source="cli")] == ["c", "a"]
    assert [s["id"] for s in db.iter_export(source="cli")] == ["c", "a"]


def test_export_session_lineage(db):
    db.create_session("r", "cli")
    add_message(db, "r", "user", "part one")
    db.end_session("r", "compression")
    db.create_session("t", "cli", parent_session_id="r")
    add_message(db, "t", "user", "part two")
    merged = db.export_session_lineage("r")
    assert merged["id"] == "t" and merged["lineage_session_ids"] == ["r", "t"]
    assert [m["content"] for m in merged["messages"]] == ["part one", "part two"]
    assert merged["message_count"] == 2 and len(merged["segments"]) == 2
    assert db.export_session_lineage("missing") is None


def test_delete_cascades_delegates_and_detaches_other_children(db, tmp_path):
    db.create_session("p", "cli", system_prompt="unique prompt")
    db.create_session("deleg", "cli", parent_session_id="p", model_config={"_delegate_from": "p"})
    db.create_session("deleg2", "cli", parent_session_id="deleg",
                      model_config={"_delegate_from": "deleg"})
    db.create_session("branch", "cli", parent_session_id="p", model_config={"_branched_from": "p"})
    db.create_session("plain", "cli", parent_session_id="p")
    for sid in ("p", "deleg", "deleg2", "branch"):
        add_message(db, sid, "user", f"zebraword {sid}")
    db.update_token_counts("p", input_tokens=5, api_call_count=1, model="m")
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    for name in ("p.json", "p.jsonl", "request_dump_p_1.json", "deleg.json", "keep.json"):
        (sessions_dir / name).write_text("{}")
    assert fts_hits(db, "zebraword") == 4

    assert db.delete_session("p", sessions_dir=sessions_dir) is True
    assert {s["id"] for s in db.search_sessions(limit=None)} == {"branch", "plain"}
    assert db.get_session("branch")["parent_session_id"] is None
    assert db.get_session("plain")["parent_session_id"] is None
    assert _count(db, schema.session_model_usage) == 0  # ON DELETE CASCADE
    assert _count(db, schema.system_prompts) == 0
    assert fts_hits(db, "zebraword") == 1  # only the branch's message is left
    assert sorted(p.name for p in sessions_dir.iterdir()) == ["keep.json"]
    assert db.delete_session("p") is False


def test_delete_survives_cyclic_delegate_markers(db):
    db.create_session("a", "cli")
    db.create_session("b", "cli", model_config={"_delegate_from": "a"})
    db.update_session_meta("a", '{"_delegate_from": "b"}')
    db.create_session("c", "cli")
    assert db.delete_sessions(["a", "zz", "a", None, 5]) == 1
    assert db.get_session("a") is None and db.get_session("b") is None
    assert db.get_session("c") is not None
    assert db.delete_sessions([]) == 0


def test_delete_sessions_bulk(db):
    for sid in ("a", "b", "c"):
        db.create_session(sid, "cli")
        add_message(db, sid, "user", "bulkword")
    db.create_session("child", "cli", parent_session_id="a")
    assert db.delete_sessions(["a", "b", "zz", "a", None]) == 2
    assert fts_hits(db, "bulkword") == 1
    assert db.get_session("child")["parent_session_id"] is None


def test_prune_only_old_ended_and_detaches_children(db):
    # A(old)->B(old)->C(new)->D(new): prunes A and B, C is detached, D keeps its parent
    db.create_session("A", "cli")
    db.create_session("B", "cli", parent_session_id="A")
    db.create_session("C", "cli", parent_session_id="B")
    db.create_session("D", "cli", parent_session_id="C")
    for sid in "ABCD":
        db.end_session(sid, "done")
        add_message(db, sid, "user", "prunetoken")
    set_fields(db, "A", started_at=OLD)
    set_fields(db, "B", started_at=OLD)
    db.create_session("live_old", "cli")
    set_fields(db, "live_old", started_at=OLD)
    assert db.prune_sessions() == 2
    assert db.get_session("C")["parent_session_id"] is None
    assert db.get_session("D")["parent_session_id"] == "C"
    assert db.get_session("live_old") is not None  # never prune a live session
    assert fts_hits(db, "prunetoken") == 2
    assert _count(db, schema.messages, session_id="A") == 0


def test_prune_without_age_takes_every_ended_session_and_keeps_delegates(db):
    db.create_session("p", "cli")
    db.create_session("deleg", "cli", parent_session_id="p", model_config={"_delegate_from": "p"})
    db.end_session("p", "done")
    assert db.prune_sessions(older_than_days=None) == 1
    kept = db.get_session("deleg")
    assert kept["parent_session_id"] is None and "_delegate_from" in kept["model_config"]


def test_prune_filters(db):
    specs = {
        "a": dict(source="cli", title="Deploy Fix", model="gpt-x", cwd="/w/app",
                  tokens=(100, 50), cost=1.0),
        "b": dict(source="telegram", title="chat", model="claude", cwd="/w/other",
                  tokens=(1, 1), cost=0.0),
    }
    for sid, spec in specs.items():
        db.create_session(sid, spec["source"], model=spec["model"], cwd=spec["cwd"])
        db.set_session_title(sid, spec["title"])
        db.update_token_counts(sid, *spec["tokens"], estimated_cost_usd=spec["cost"],
                               billing_provider="OpenAI" if sid == "a" else "anthropic")
        db.end_session(sid, "user_exit" if sid == "a" else "idle")
    pick = lambda **f: [r["id"] for r in db.list_prune_candidates(**f)]  # noqa: E731
    assert pick() == ["a", "b"]
    assert pick(source="telegram") == ["b"]
    assert pick(title_like="deploy") == ["a"]
    assert pick(end_reason="idle") == ["b"]
    assert pick(cwd_prefix="/w/app") == ["a"]
    assert pick(model_like="GPT") == ["a"]
    assert pick(provider="openai") == ["a"]
    assert pick(min_tokens=100) == ["a"] and pick(max_tokens=2) == ["b"]
    assert pick(min_cost=0.5) == ["a"] and pick(max_cost=0.0) == ["b"]
    assert pick(started_after=time.time() + 60) == []
    assert pick(older_than_days=1) == []
    with pytest.raises(TypeError):
        db.prune_sessions(no_such_filter=1)
    db.set_session_archived("b", True)
    assert pick(archived=True) == ["b"] and pick(archived=False) == ["a"]
    assert db.prune_sessions(older_than_days=None, archived=True) == 1
    assert db.get_session("b") is None and db.get_session("a") is not None


def test_archive_sessions_is_idempotent_and_lineage_wide(db):
    db.create_session("r", "cli")
    db.create_session("t", "cli", parent_session_id="r")
    db.end_session("r", "compression")
    db.end_session("t", "done")
    db.create_session("live", "cli")
    assert db.archive_sessions() == 2
    assert db.archive_sessions() == 0
    assert db.get_session("r")["archived"] == 1 and db.get_session("t")["archived"] == 1
    assert db.get_session("live")["archived"] == 0
