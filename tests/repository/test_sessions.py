"""Sessions concern: api-catalog §2 behaviours through the public API on real files."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from hermes_store import SessionNotFoundError, schema
from hermes_store.errors import InvalidArgumentError

from support.repository import backend, db, db_path, db_target, set_fields  # noqa: F401


def test_create_returns_id_and_fills_defaults(db):
    before = time.time()
    assert db.create_session("s1", "cli", model="m1", model_config={"k": 1}) == "s1"
    row = db.get_session("s1")
    assert row["source"] == "cli" and row["model"] == "m1"
    assert row["model_config"] == '{"k": 1}'  # raw JSON text, as upstream returns it
    assert before <= row["started_at"] <= time.time()
    assert (row["message_count"], row["tool_call_count"], row["archived"]) == (0, 0, 0)
    assert row["title"] is None and row["ended_at"] is None


def test_empty_model_config_is_stored_as_null(db):
    db.create_session("s1", "cli", model_config={})
    assert db.get_session("s1")["model_config"] is None


def test_create_is_an_enriching_upsert(db):
    db.create_session("s1", "telegram", user_id="u1")
    started = db.get_session("s1")["started_at"]
    db.create_session("s1", "cli", user_id="u2", model="m", cwd="/w", session_key="k")
    db.create_session("s1", "cli", model="other", cwd="/elsewhere")
    row = db.get_session("s1")
    # source, user_id and started_at never change; NULL fields fill once
    assert (row["source"], row["user_id"], row["started_at"]) == ("telegram", "u1", started)
    assert (row["model"], row["cwd"], row["session_key"]) == ("m", "/w", "k")


def test_ensure_session_defaults_source_unknown(db):
    assert db.ensure_session("s1") == "s1"
    assert db.get_session("s1")["source"] == "unknown"
    db.ensure_session("s1", "cli", model="m")
    assert db.get_session("s1")["model"] == "m"


def test_create_errors_are_clear_and_write_nothing(db):
    with pytest.raises(TypeError):
        db.create_session("s1", "cli", bogus=1)
    with pytest.raises(InvalidArgumentError, match="source is required"):
        db.create_session("s1", None)
    with pytest.raises(SessionNotFoundError, match="missing"):
        db.create_session("s1", "cli", parent_session_id="missing")
    assert db.get_session("s1") is None


def test_get_session_unknown_is_none(db):
    assert db.get_session("nope") is None


def test_resolve_session_id_exact_prefix_ambiguous(db):
    db.create_session("20260315_092437_aaaa", "cli")
    db.create_session("20260315_092437_bbbb", "cli")
    db.create_session("20260316_000000_cccc", "cli")
    db.create_session("20260315X092437_dddd", "cli")
    assert db.resolve_session_id("20260316_000000_cccc") == "20260316_000000_cccc"
    assert db.resolve_session_id("20260316") == "20260316_000000_cccc"
    assert db.resolve_session_id("20260315_092437") is None  # two match; "_" is literal
    assert db.resolve_session_id("20260315_092437_a") == "20260315_092437_aaaa"
    assert db.resolve_session_id("zzz") is None
    assert db.resolve_session_id("") is None  # "" matches every row: ambiguous here


def test_end_session_first_reason_wins_and_reopen(db):
    db.create_session("s1", "cli")
    db.end_session("s1", "compression")
    first = db.get_session("s1")
    db.end_session("s1", "user_exit")
    assert db.get_session("s1")["end_reason"] == "compression"
    assert db.get_session("s1")["ended_at"] == first["ended_at"]
    db.reopen_session("s1")
    row = db.get_session("s1")
    assert row["ended_at"] is None and row["end_reason"] is None
    db.end_session("s1", None)
    row = db.get_session("s1")
    assert row["ended_at"] is not None and row["end_reason"] is None
    db.end_session("missing", "x")  # silent no-op
    db.reopen_session("missing")


def test_promote_to_session_reset(db):
    db.create_session("live", "cli")
    db.create_session("closed", "cli")
    db.create_session("compressed", "cli")
    db.end_session("closed", "agent_close")
    db.end_session("compressed", "compression")
    assert db.promote_to_session_reset("live") is True
    assert db.promote_to_session_reset("closed", reason="idle") is True
    assert db.get_session("closed")["end_reason"] == "idle"
    assert db.promote_to_session_reset("compressed") is False
    assert db.promote_to_session_reset("missing") is False
    assert db.promote_to_session_reset("") is False


def test_updaters(db):
    db.create_session("s1", "cli", model="m1")
    db.update_session_model("s1", "m2")
    assert db.get_session("s1")["model"] == "m2"
    db.update_session_meta("s1", '{"a": 1}')
    assert db.get_session("s1")["model"] == "m2"
    db.update_session_meta("s1", '{"b": 2}', model="m3")
    assert (db.get_session("s1")["model_config"], db.get_session("s1")["model"]) == ('{"b": 2}', "m3")
    db.update_session_cwd("s1", "/repo", git_branch="main", git_repo_root="/repo")
    db.update_session_cwd("s1", "/repo/sub", git_branch="  ", git_repo_root="")
    row = db.get_session("s1")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/repo/sub", "main", "/repo")
    db.update_session_cwd("s1", "")  # falsy cwd: no-op
    assert db.get_session("s1")["cwd"] == "/repo/sub"
    for missing_call in (
        lambda: db.update_session_model("zz", "m"),
        lambda: db.update_system_prompt("zz", "p"),
        lambda: db.update_session_meta("zz", "{}"),
        lambda: db.update_session_billing_route("zz", provider="p", base_url="u"),
    ):
        assert missing_call() is None
    assert db.get_session("zz") is None


def test_billing_route_overwrites_and_drops_system_prompt(db):
    db.create_session("s1", "cli", system_prompt="Model: m1 Provider: a")
    db.update_session_billing_route("s1", provider="b", base_url="https://b", billing_mode="sub")
    db.update_session_billing_route("s1", provider="c", base_url="https://c")
    row = db.get_session("s1")
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "c", "https://c", "sub")
    assert row["system_prompt"] is None and row["system_prompt_hash"] is None
    with db._read() as conn:  # the now unreferenced prompt row is gone too
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.system_prompts)).scalar() == 0


def test_system_prompts_are_stored_once_and_read_transparently(db):
    prompt = "You are Hermes. " * 200
    db.create_session("a", "cli", system_prompt=prompt)
    db.create_session("b", "cli", system_prompt=prompt)
    with db._read() as conn:
        stored = conn.execute(sa.select(schema.system_prompts)).all()
        inline = conn.execute(sa.select(schema.sessions.c.system_prompt)).scalars().all()
    assert len(stored) == 1 and stored[0].prompt == prompt
    assert inline == [None, None]
    assert db.get_session("a")["system_prompt"] == prompt == db.get_session("b")["system_prompt"]
    db.update_system_prompt("a", "new prompt")
    assert db.get_session("a")["system_prompt"] == "new prompt"
    assert db.get_session("b")["system_prompt"] == prompt  # shared row survives


def test_inline_system_prompt_of_older_rows_still_reads(db):
    db.create_session("old", "cli")
    set_fields(db, "old", system_prompt="inline prompt from a v22 file")
    assert db.get_session("old")["system_prompt"] == "inline prompt from a v22 file"
    db.create_session("old", "cli", system_prompt="ignored: a prompt is already there")
    assert db.get_session("old")["system_prompt"] == "inline prompt from a v22 file"


def test_session_count_filters(db):
    db.create_session("root", "cli", cwd="/w/proj")
    db.create_session("tg", "telegram")
    db.create_session("child", "cli", parent_session_id="root",
                      model_config={"_delegate_from": "root"})
    db.create_session("plain_child", "cli", parent_session_id="root")
    db.create_session("arch", "cli")
    db.set_session_archived("arch", True)
    assert db.session_count() == 4  # archived excluded by default
    assert db.session_count(include_archived=True) == 5
    assert db.session_count(archived_only=True) == 1
    assert db.session_count(exclude_children=True) == 2  # root, tg
    assert db.session_count(source="telegram") == 1
    assert db.session_count(exclude_sources=["telegram"]) == 3
    assert db.session_count(cwd_prefix="/w/proj/") == 1
    assert db.session_count(cwd_prefix="/w/pro") == 0  # a prefix of a path, not a string


def test_set_session_archived_flips_whole_compression_lineage(db):
    db.create_session("r", "cli")
    db.create_session("c1", "cli", parent_session_id="r")
    db.create_session("c2", "cli", parent_session_id="c1")
    db.create_session("branch", "cli", parent_session_id="c2")
    db.end_session("r", "compression")
    db.end_session("c1", "compression")
    assert db.set_session_archived("c1", True) is True
    flags = {sid: db.get_session(sid)["archived"] for sid in ("r", "c1", "c2", "branch")}
    assert flags == {"r": 1, "c1": 1, "c2": 1, "branch": 0}
    assert db.set_session_archived("r", False) is True
    assert db.get_session("c2")["archived"] == 0
    assert db.set_session_archived("missing", True) is False


def test_lone_surrogates_in_session_fields_are_scrubbed(db):
    db.create_session("s1", "cli", cwd="/tmp/\ud800x", system_prompt="p\udfff")
    row = db.get_session("s1")
    assert row["cwd"] == "/tmp/\ufffdx" and row["system_prompt"] == "p\ufffd"
