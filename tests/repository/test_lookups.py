"""Lookups against real files: id search, working directories, cron runs, and the
resume projections.

Expectations were first observed by running upstream 0.19.0's SessionDB with the same
calls; the one deliberate difference (issue 10, item 6: an exact id match always comes
first) is tested on its own.
"""

from __future__ import annotations

import pytest

from support.repository import backend, db, db_path, db_target, set_fields  # noqa: F401


def session(db, sid, *, started, source="cli", cwd=None, parent=None, end=None,
            model_config=None):
    db.create_session(sid, source, cwd=cwd, parent_session_id=parent,
                      model_config=model_config)
    set_fields(db, sid, started_at=started)
    if end:
        db.end_session(sid, end)
    return sid


def ids(rows):
    return [r["id"] for r in rows]


# --------------------------------------------------------------------------- by id


@pytest.fixture
def abc(db):
    """"abc" is the oldest; six newer ids contain it, the newest starts with it."""
    session(db, "abc", started=100.0)
    for i in range(6):
        session(db, f"x-abc-{i}", started=200.0 + i)
    session(db, "abc-pre", started=300.0)
    return db


def test_exact_then_prefix_then_substring_each_newest_first(abc):
    assert ids(abc.search_sessions_by_id("ABC ", limit=3)) == ["abc", "abc-pre", "x-abc-5"]
    assert ids(abc.search_sessions_by_id("abc")) == [
        "abc", "abc-pre", "x-abc-5", "x-abc-4", "x-abc-3", "x-abc-2", "x-abc-1", "x-abc-0"]


def test_the_exact_match_wins_however_many_newer_rows_contain_it(abc):
    # Upstream ranks only the 4 x limit most recently active matches, the same rows
    # this listing returns; "abc" is not among them, so upstream answers ["abc-pre"].
    recent = abc.list_sessions_rich(order_by_last_active=True, id_query="abc", limit=4)
    assert "abc" not in ids(recent)
    assert ids(abc.search_sessions_by_id("abc", limit=1)) == ["abc"]


def test_a_prefix_match_beats_newer_substring_matches(db):
    session(db, "deploy-1", started=100.0)
    for i in range(8):
        session(db, f"re-deploy-{i}", started=200.0 + i)
    assert "deploy-1" not in ids(db.list_sessions_rich(
        order_by_last_active=True, id_query="deploy", limit=4))
    assert ids(db.search_sessions_by_id("deploy", limit=1)) == ["deploy-1"]


@pytest.mark.parametrize("query, limit", [("", 20), ("   ", 20), (None, 20),
                                          ("abc", 0), ("abc", -1)])
def test_blank_query_or_no_room_finds_nothing(abc, query, limit):
    assert abc.search_sessions_by_id(query, limit=limit) == []


def test_limit_must_be_an_integer(abc):
    with pytest.raises(TypeError, match="limit must be an integer"):
        abc.search_sessions_by_id("abc", limit=None)


def test_archived_sessions_are_searched_unless_excluded(abc):
    abc.set_session_archived("abc", True)
    assert ids(abc.search_sessions_by_id("abc", limit=3)) == ["abc", "abc-pre", "x-abc-5"]
    assert ids(abc.search_sessions_by_id("abc", limit=3, include_archived=False)) == [
        "abc-pre", "x-abc-5", "x-abc-4"]


@pytest.fixture
def chain(db):
    """root -> mid -> tip, a compression chain, plus a newer session naming 'mid'."""
    session(db, "root", started=100.0, end="compression")
    session(db, "mid", started=110.0, parent="root", end="compression")
    session(db, "tip", started=120.0, parent="mid")
    session(db, "tip-helper", started=130.0, parent="tip",
            model_config={"_delegate_from": "tip"})
    session(db, "not-mid-at-all", started=500.0)
    return db


def test_a_chain_is_found_by_any_of_its_ids_and_shown_as_its_tip(chain):
    for query in ("root", "tip"):
        rows = chain.search_sessions_by_id(query)
        assert [(r["id"], r["_lineage_root_id"]) for r in rows] == [("tip", "root")]


def test_an_exact_id_inside_a_chain_ranks_as_exact(chain):
    # upstream scores only the shown tip and the root id, so "mid" (the middle
    # segment) ranked as a mere substring, after the newer "not-mid-at-all"
    assert [(r["id"], r.get("_lineage_root_id")) for r in chain.search_sessions_by_id("mid")] == [
        ("tip", "root"), ("not-mid-at-all", None)]


def test_delegate_runs_are_not_searched(chain):
    assert chain.search_sessions_by_id("tip-helper") == []


def test_like_wildcards_in_the_query_are_plain_characters(db):
    session(db, "100%_x", started=100.0)
    session(db, "plain", started=200.0)
    assert ids(db.search_sessions_by_id("%")) == ["100%_x"]
    assert ids(db.search_sessions_by_id("_")) == ["100%_x"]


def test_rows_have_the_listing_shape(chain):
    [row] = chain.search_sessions_by_id("tip")
    [listed] = [r for r in chain.list_sessions_rich(order_by_last_active=True)
                if r["id"] == "tip"]
    assert row == listed
    assert {"preview", "last_active", "_lineage_root_id"} <= set(row)


# --------------------------------------------------------------------------- cwds


def test_distinct_cwds_count_sessions_and_take_the_latest_end_or_start(db):
    session(db, "a1", started=100.0, cwd="/work/a")
    session(db, "a2", started=150.0, cwd="/work/a", end="done")
    set_fields(db, "a2", ended_at=900.0)
    session(db, "a-child", started=120.0, cwd="/work/a", parent="a1")
    session(db, "b", started=300.0, cwd="/work/b")
    session(db, "blank", started=400.0, cwd="")
    session(db, "spaces", started=400.0, cwd="   ")
    session(db, "none", started=400.0)
    session(db, "archived", started=500.0, cwd="/work/c")
    db.set_session_archived("archived", True)
    assert db.distinct_session_cwds() == [
        {"cwd": "/work/a", "sessions": 3, "last_active": 900.0},
        {"cwd": "/work/b", "sessions": 1, "last_active": 300.0},
    ]
    assert [c["cwd"] for c in db.distinct_session_cwds(include_archived=True)] == [
        "/work/a", "/work/b", "/work/c"]


def test_distinct_cwds_of_an_empty_store(db):
    assert db.distinct_session_cwds() == []


# --------------------------------------------------------------------------- cron runs


@pytest.fixture
def cron(db):
    session(db, "cron_job1_20240101", started=100.0, source="cron")
    db.append_message("cron_job1_20240101", "user", "Run the nightly report\nnow")
    session(db, "cron_job1_20240102", started=200.0, source="cron")
    db.append_message("cron_job1_20240102", "user", "y" * 70)
    session(db, "cron_job1_child", started=300.0, source="cron", parent="cron_job1_20240101")
    session(db, "cron_job10_x", started=400.0, source="cron")        # another job
    session(db, "cron_JOB1_x", started=400.0, source="cron")         # case differs
    session(db, "cron_job1_cli", started=400.0, source="cli")        # not a cron run
    return db


def test_cron_runs_of_one_job_newest_first(cron):
    runs = cron.list_cron_job_runs("job1")
    assert ids(runs) == ["cron_job1_child", "cron_job1_20240102", "cron_job1_20240101"]
    assert [r["preview"] for r in runs] == ["", "y" * 60 + "...", "Run the nightly report now"]
    assert runs[0]["last_active"] == 300.0 and runs[1]["last_active"] > 200.0
    assert set(runs[0]) == set(cron.get_session("cron_job1_child")) | {"preview", "last_active"}


def test_cron_runs_page(cron):
    assert ids(cron.list_cron_job_runs("job1", limit=1, offset=1)) == ["cron_job1_20240102"]
    assert cron.list_cron_job_runs("job1", limit=0) == []
    everything = ["cron_job1_child", "cron_job1_20240102", "cron_job1_20240101"]
    assert ids(cron.list_cron_job_runs("job1", limit=-1)) == everything
    assert ids(cron.list_cron_job_runs("job1", offset=-3)) == everything


def test_cron_job_ids_are_matched_literally(cron):
    session(cron, "cron__1", started=500.0, source="cron")
    session(cron, "cron_9_x", started=500.0, source="cron")
    assert cron.list_cron_job_runs("job%") == []
    assert cron.list_cron_job_runs("job_") == []
    assert ids(cron.list_cron_job_runs("")) == ["cron__1"]
    assert ids(cron.list_cron_job_runs(9)) == ["cron_9_x"]
    assert cron.list_cron_job_runs(None) == []       # prefix "cron_None_", as upstream


@pytest.mark.parametrize("bad", [{"limit": "2"}, {"limit": 1.5}, {"offset": "1"},
                                 {"limit": True}])
def test_cron_runs_refuse_a_non_integer_page(cron, bad):
    # upstream: sqlite3 "datatype mismatch" (a numeric string happened to work)
    with pytest.raises(TypeError, match="must be an integer"):
        cron.list_cron_job_runs("job1", **bad)


def test_cron_runs_take_none_as_no_bound(cron):
    # upstream: sqlite3 "datatype mismatch"; here None means what it means elsewhere
    assert len(cron.list_cron_job_runs("job1", limit=None, offset=None)) == 3


# --------------------------------------------------------------------------- resume


def merge_consecutive_users(messages):
    """What the agent's repair does to a user;user pair (observed upstream)."""
    out = []
    for msg in messages:
        if out and msg["role"] == out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + msg["content"]}
        else:
            out.append(msg)
    messages[:] = out


@pytest.fixture
def resumed(db):
    db.alternation_repair = merge_consecutive_users
    db.create_session("root", "cli")
    for role, text in [("user", "build it"), ("assistant", "done part 1"), ("user", "continue")]:
        db.append_message("root", role, text)
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    for role, text in [("user", "continue"), ("user", "more"), ("assistant", "done part 2")]:
        db.append_message("tip", role, text)
    return db


def contents(messages):
    return [m["content"] for m in messages]


def test_resume_conversations_are_the_repaired_tip_and_the_whole_lineage(resumed):
    model, display = resumed.get_resume_conversations("tip")
    assert contents(model) == ["continue\n\nmore", "done part 2"]
    # the tip's re-sent "continue" is shown once
    assert contents(display) == ["build it", "done part 1", "continue", "more", "done part 2"]
    assert sorted(model[1]) == ["content", "role", "timestamp"]


def test_resume_conversations_equal_the_two_separate_reads(resumed):
    assert resumed.get_resume_conversations("tip") == (
        resumed.get_messages_as_conversation("tip", repair_alternation=True),
        resumed.get_messages_as_conversation("tip", include_ancestors=True),
    )


def test_resume_conversations_of_a_root(resumed):
    model, display = resumed.get_resume_conversations("root")
    assert contents(model) == contents(display) == ["build it", "done part 1", "continue"]


def test_resume_conversations_leave_out_rewound_rows(resumed):
    rewound = resumed.append_message("tip", "user", "take this back")
    resumed.rewind_to_message("tip", rewound)
    model, display = resumed.get_resume_conversations("tip")
    assert "take this back" not in contents(model) + contents(display)


@pytest.mark.parametrize("session_id", ["missing", "", None])
def test_resume_of_nothing_is_empty(resumed, session_id):
    assert resumed.get_resume_conversations(session_id) == ([], [])
    assert resumed.get_ancestor_display_prefix(session_id) == []


def test_ancestor_prefix_is_the_ancestors_display_only(resumed):
    assert contents(resumed.get_ancestor_display_prefix("tip")) == [
        "build it", "done part 1", "continue"]
    assert resumed.get_ancestor_display_prefix("root") == []
    resumed.create_session("kid", "cli", parent_session_id="tip")
    assert resumed.get_ancestor_display_prefix("kid") == resumed.get_messages_as_conversation(
        "tip", include_ancestors=True)
    assert resumed.get_resume_conversations("kid")[0] == []


def test_ancestor_prefix_is_empty_when_the_ancestors_hold_no_messages(db):
    db.create_session("empty-root", "cli")
    db.end_session("empty-root", "compression")
    db.create_session("child", "cli", parent_session_id="empty-root")
    db.append_message("child", "user", "hi")
    assert db.get_ancestor_display_prefix("child") == []
