"""The handoff state machine, against real files and real processes.

Expectations were first observed by running upstream 0.19.0's SessionDB with the same
calls: the same transitions are refused (with the same return values), and the ones
upstream leaves unguarded (complete/fail from any state) stay unguarded.
"""

from __future__ import annotations

import multiprocessing

import pytest

from hermes_store import SessionDB

from support.workers import handoff
from support.repository import backend, db, db_path, db_target, set_fields  # noqa: F401

SPAWN = multiprocessing.get_context("spawn")


def state(db, session_id):
    return db.get_handoff_state(session_id)


@pytest.fixture
def s1(db):
    db.create_session("s1", "cli")
    return "s1"


def in_state(db, session_id, target):
    """Drive the session into ``target`` through the public transitions."""
    if target is None:
        return
    assert db.request_handoff(session_id, "telegram")
    if target == "running":
        assert db.claim_handoff(session_id)
    elif target == "completed":
        db.complete_handoff(session_id)
    elif target == "failed":
        db.fail_handoff(session_id, "boom")


def test_a_never_handed_off_session_has_an_empty_state(db, s1):
    assert state(db, s1) == {"state": None, "platform": None, "error": None}
    assert state(db, "missing") is None


def test_the_whole_cycle(db, s1):
    assert db.request_handoff(s1, "telegram") is True
    assert state(db, s1) == {"state": "pending", "platform": "telegram", "error": None}
    assert [r["id"] for r in db.list_pending_handoffs()] == [s1]
    assert db.claim_handoff(s1) is True
    assert state(db, s1) == {"state": "running", "platform": "telegram", "error": None}
    assert db.list_pending_handoffs() == []
    assert db.complete_handoff(s1) is None
    assert state(db, s1) == {"state": "completed", "platform": "telegram", "error": None}


@pytest.mark.parametrize("current, allowed", [
    (None, True), ("pending", False), ("running", False),
    ("completed", True), ("failed", True),
])
def test_request_is_refused_while_a_handoff_is_in_flight(db, s1, current, allowed):
    in_state(db, s1, current)
    before = state(db, s1)
    assert db.request_handoff(s1, "discord") is allowed
    if allowed:
        assert state(db, s1) == {"state": "pending", "platform": "discord", "error": None}
    else:
        assert state(db, s1) == before


def test_request_for_an_unknown_session_is_refused_and_creates_nothing(db):
    assert db.request_handoff("missing", "telegram") is False
    assert db.get_session("missing") is None


def test_request_takes_no_platform_as_upstream_does(db, s1):
    assert db.request_handoff(s1, None) is True
    assert state(db, s1) == {"state": "pending", "platform": None, "error": None}


@pytest.mark.parametrize("current, allowed", [
    (None, False), ("pending", True), ("running", False),
    ("completed", False), ("failed", False),
])
def test_only_a_pending_handoff_can_be_claimed(db, s1, current, allowed):
    in_state(db, s1, current)
    before = state(db, s1)
    assert db.claim_handoff(s1) is allowed
    expected = {**before, "state": "running"} if allowed else before
    assert state(db, s1) == expected


def test_claim_of_an_unknown_session_is_refused(db):
    assert db.claim_handoff("missing") is False


@pytest.mark.parametrize("current", [None, "pending", "running", "completed", "failed"])
def test_complete_and_fail_record_the_outcome_from_any_state(db, s1, current):
    in_state(db, s1, current)
    platform = state(db, s1)["platform"]
    db.fail_handoff(s1, "gateway down")
    assert state(db, s1) == {"state": "failed", "platform": platform, "error": "gateway down"}
    db.complete_handoff(s1)
    assert state(db, s1) == {"state": "completed", "platform": platform, "error": None}


def test_fail_keeps_the_first_500_characters_of_the_reason(db, s1):
    in_state(db, s1, "running")
    db.fail_handoff(s1, "x" * 499 + "yz" + "!" * 100)
    assert state(db, s1)["error"] == "x" * 499 + "y"
    db.fail_handoff(s1, "")
    assert state(db, s1) == {"state": "failed", "platform": "telegram", "error": ""}


@pytest.mark.parametrize("error", [None, 42, ["boom"]])
def test_fail_without_a_text_reason_raises_type_error_and_changes_nothing(db, s1, error):
    in_state(db, s1, "running")
    with pytest.raises(TypeError, match="error must be the failure reason as text"):
        db.fail_handoff(s1, error)
    assert state(db, s1)["state"] == "running"


def test_complete_and_fail_of_an_unknown_session_change_nothing(db):
    db.complete_handoff("missing")
    db.fail_handoff("missing", "boom")
    assert db.get_session("missing") is None and state(db, "missing") is None


def test_pending_handoffs_are_listed_oldest_session_first_as_whole_rows(db):
    for sid, started in [("newer", 200.0), ("older", 100.0), ("idle", 50.0),
                         ("claimed", 10.0)]:
        db.create_session(sid, "cli", system_prompt=f"prompt of {sid}")
        set_fields(db, sid, started_at=started)
    for sid in ("newer", "older", "claimed"):
        db.request_handoff(sid, "telegram")
    db.claim_handoff("claimed")
    rows = db.list_pending_handoffs()
    assert [r["id"] for r in rows] == ["older", "newer"]
    assert rows[0] == db.get_session("older")
    assert rows[0]["system_prompt"] == "prompt of older"


def test_exactly_one_of_two_processes_wins_each_claim(db_target):
    rounds = [f"h{i}" for i in range(40)]
    with SessionDB(db_target) as db:
        for sid in rounds:
            db.create_session(sid, "cli")
            assert db.request_handoff(sid, "telegram")
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    claimers = [SPAWN.Process(target=handoff.claim_each,
                              args=(str(db_target), rounds, barrier, results))
                for _ in range(2)]
    for proc in claimers:
        proc.start()
    reports = [results.get(timeout=120) for _ in claimers]
    for proc in claimers:
        proc.join(30)
        assert proc.exitcode == 0
    wins_per_round = [a + b for a, b in zip(*reports)]
    assert wins_per_round == [1] * len(rounds)
    with SessionDB(db_target, read_only=True) as db:
        assert {db.get_handoff_state(sid)["state"] for sid in rounds} == {"running"}
        assert db.list_pending_handoffs() == []
