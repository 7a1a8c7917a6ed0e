"""Usage concern: api-catalog §9."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_store import schema
from support.repository import backend, db, db_path, db_target  # noqa: F401


def usage_rows(db, session_id):
    U = schema.session_model_usage
    with db._read() as conn:
        rows = conn.execute(sa.select(U).where(U.c.session_id == session_id)
                            .order_by(U.c.task, U.c.model)).all()
    return [dict(r._mapping) for r in rows]


def test_increments_and_creates_missing_session(db):
    db.update_token_counts("new", input_tokens=10, output_tokens=5, model="m1",
                           cache_read_tokens=2, reasoning_tokens=1, api_call_count=1,
                           estimated_cost_usd=0.5)
    db.update_token_counts("new", input_tokens=1, output_tokens=1, api_call_count=1,
                           estimated_cost_usd=None)
    row = db.get_session("new")
    assert row["source"] == "unknown"
    assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"],
            row["reasoning_tokens"], row["api_call_count"]) == (11, 6, 2, 1, 2)
    assert row["estimated_cost_usd"] == pytest.approx(0.5)
    assert row["actual_cost_usd"] is None  # only added when given
    db.update_token_counts("new", actual_cost_usd=0.2, input_tokens=-5)
    row = db.get_session("new")
    assert row["actual_cost_usd"] == pytest.approx(0.2) and row["input_tokens"] == 6


def test_model_fills_null_only(db):
    db.create_session("s", "cli")
    db.update_token_counts("s", model="m1")  # zero usage still fills a NULL model
    assert db.get_session("s")["model"] == "m1"
    db.update_token_counts("s", input_tokens=1, api_call_count=1, model="m1")
    db.update_token_counts("s", input_tokens=1, api_call_count=1, model="m2")
    assert db.get_session("s")["model"] == "m1"


def test_first_accounted_route_overwrites_requested_primary(db):
    db.create_session("s", "cli", model="primary-model")
    db.update_token_counts("s", input_tokens=3, api_call_count=1, model="fallback-model",
                           billing_provider="fallback", billing_base_url="https://fb")
    row = db.get_session("s")
    assert (row["model"], row["billing_provider"], row["billing_base_url"]) == (
        "fallback-model", "fallback", "https://fb")
    db.update_token_counts("s", input_tokens=3, api_call_count=1, model="third",
                           billing_provider="other")
    assert db.get_session("s")["billing_provider"] == "fallback"


def test_absolute_sets_totals_and_skips_breakdown(db):
    db.update_token_counts("s", input_tokens=10, output_tokens=10, api_call_count=3,
                           model="m")
    db.update_token_counts("s", input_tokens=100, output_tokens=7, api_call_count=4,
                           estimated_cost_usd=None, cost_status="estimated", absolute=True)
    row = db.get_session("s")
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (100, 7, 4)
    assert row["estimated_cost_usd"] == 0 and row["cost_status"] == "estimated"
    (usage,) = usage_rows(db, "s")  # only the incremental call was attributed
    assert usage["input_tokens"] == 10 and usage["api_call_count"] == 3


def test_per_model_attribution_across_a_switch(db):
    db.update_token_counts("s", input_tokens=5, api_call_count=1)  # model not known yet
    db.update_token_counts("s", input_tokens=10, api_call_count=1, model="m1",
                           billing_provider="p1", estimated_cost_usd=0.1)
    db.update_session_model("s", "m2")
    db.update_token_counts("s", input_tokens=20, api_call_count=1, model="m2",
                           billing_provider="p1", estimated_cost_usd=0.2)
    db.update_token_counts("s", input_tokens=1, api_call_count=1, model="m2",
                           billing_provider="p1", estimated_cost_usd=0.3)
    rows = {(r["model"], r["billing_provider"]): r for r in usage_rows(db, "s")}
    assert set(rows) == {("unknown", ""), ("m1", "p1"), ("m2", "p1")}
    assert rows[("m2", "p1")]["input_tokens"] == 21
    assert rows[("m2", "p1")]["api_call_count"] == 2
    assert rows[("m2", "p1")]["estimated_cost_usd"] == pytest.approx(0.5)
    summary = db.get_session("s")
    assert summary["input_tokens"] == sum(r["input_tokens"] for r in rows.values())


def test_breakdown_falls_back_to_the_session_route(db):
    db.create_session("s", "cli", model="sess-model")
    db.update_token_counts("s", input_tokens=1, api_call_count=1)
    (row,) = usage_rows(db, "s")
    assert row["model"] == "sess-model" and row["task"] == ""


def test_record_auxiliary_usage(db):
    db.record_auxiliary_usage("", "vision", input_tokens=5)
    db.record_auxiliary_usage("s", "", input_tokens=5)
    assert db.get_session("s") is None  # both no-ops
    db.create_session("s", "cli", model="main-model")
    db.update_token_counts("s", input_tokens=7, api_call_count=1)
    db.record_auxiliary_usage("s", "vision", input_tokens=5, output_tokens=2,
                              estimated_cost_usd=0.01)
    db.record_auxiliary_usage("s", "vision", model="gemini", billing_provider="google",
                              input_tokens=1)
    session = db.get_session("s")
    assert session["input_tokens"] == 7 and session["api_call_count"] == 1  # untouched
    aux = [r for r in usage_rows(db, "s") if r["task"] == "vision"]
    by_model = {r["model"]: r for r in aux}
    assert set(by_model) == {"unknown", "gemini"}  # never borrows the session's model
    assert by_model["unknown"]["api_call_count"] == 1
    assert by_model["gemini"]["billing_provider"] == "google"
    db.record_auxiliary_usage("fresh", "compression", input_tokens=3)
    assert db.get_session("fresh")["source"] == "unknown"
    breakdown = db.model_usage_breakdown("s")
    assert {(r["model"], r["task"]) for r in breakdown} == {
        ("main-model", ""), ("unknown", "vision"), ("gemini", "vision")}
