"""Every raw statement agent 0.19.0 sends through ``SessionDB._conn`` and
``_execute_write`` gives upstream's answer, on SQLite and on PostgreSQL (issue 16, item 2).

The statements are read out of the agent's own source (``support.agent_compat.raw_statements``)
and run through upstream 0.19.0's ``hermes_state.SessionDB`` on a file and through ours
on each engine, over the same data written by the same public calls, times pinned. The
agent's own functions around them (the dashboard analytics, the latest-descendant walk,
the API server's session creation, insights' data gathering) are run as the agent wrote
them, on each store.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import types
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from support.agent_compat import (
    CUTOFFS,
    RAW_SQL_FILES,
    STARTS,
    agent_function,
    agent_root,
    assert_same,
    our_store,
    plain,
    raw_statements,
    upstream_store,
)

ENGINES = ("sqlite", "postgresql")
SOURCES = ("cli", "telegram", "cron", "discord")


@pytest.fixture
def upstream(tmp_path):
    db = upstream_store(tmp_path / "upstream.db")
    yield db
    db.close()


@pytest.fixture(params=ENGINES)
def ours(request, tmp_path):
    target = tmp_path / "state.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    db = our_store(target)
    yield db
    db.close()


def _rows(db, sql, params):
    return [plain(r) for r in db._conn.execute(sql, params).fetchall()]


def _ordered(sql: str) -> bool:
    return "ORDER BY" in sql.upper()


def _param_sets(sql: str):
    n = sql.count("?")
    if "started_at >" in sql:
        if n == 1:
            return [(c,) for c in CUTOFFS]
        return [(c, s) for c in CUTOFFS for s in SOURCES]
    if n == 0:
        return [()]
    return None  # statements with ids: run by their own tests below


READS = [f for f in raw_statements() if f.sql.lstrip().upper().startswith(("SELECT", "WITH"))]


def test_the_survey_reads_every_statement_of_the_six_files():
    found = raw_statements()
    assert {f.file for f in found} == set(RAW_SQL_FILES)
    assert len(found) == 29  # tests/agent/agent_0_19_0_surface.md lists each one


@pytest.mark.parametrize("found", [f for f in READS if _param_sets(f.sql)], ids=lambda f: f"{f.file}:{f.line}")
def test_read_statement_gives_upstreams_rows(found, upstream, ours):
    for params in _param_sets(found.sql):
        theirs = _rows(upstream, found.sql, params)
        mine = _rows(ours, found.sql, params)
        if not _ordered(found.sql):
            theirs, mine = sorted(theirs, key=repr), sorted(mine, key=repr)
        assert_same(mine, theirs, f"{found.file}:{found.line} {params}")
    # the same answer by index and by name, as sqlite3.Row gives it
    row = ours._conn.execute(found.sql, _param_sets(found.sql)[0]).fetchone()
    if row is not None:
        assert [row[i] for i in range(len(row))] == [row[k] for k in row.keys()]
        assert list(row) == [row[k.upper()] for k in row.keys()]


def test_message_owner_lookup_of_session_search(upstream, ours):
    (found,) = [f for f in READS if f.file == "tools/session_search_tool.py"]
    for message_id in (1, 7, 12, 999, "7"):
        theirs = upstream._conn.execute(found.sql, (message_id,)).fetchone()
        mine = ours._conn.execute(found.sql, (message_id,)).fetchone()
        assert (mine and mine[0]) == (theirs and theirs[0]), message_id


def test_latest_descendant_walk_of_the_dashboard(upstream, ours):
    walk = agent_function("hermes_cli/web_server.py", "_session_latest_descendant", {})
    for sid in ("s-root", "s-child", "s-cli", "missing"):
        assert walk(sid, ours) == walk(sid, upstream), sid
    assert walk("s-root", ours) == ("s-child", ["s-root", "s-child"])


def test_sessions_repair_counts_sessions_through_conn(upstream, ours):
    (found,) = [f for f in READS if f.file == "hermes_cli/main.py"]
    assert ours._conn.execute(found.sql).fetchone()[0] == \
        upstream._conn.execute(found.sql).fetchone()[0] == len(STARTS) - 1


def test_resume_reopens_an_ended_session(upstream, ours):
    sqls = {f.sql for f in raw_statements() if f.file == "hermes_cli/cli_agent_setup_mixin.py"}
    (sql,) = sqls  # both call sites send the same statement
    for db in (upstream, ours):
        db.end_session("s-tg", "user_exit")
    for db in (upstream, ours):
        assert db.get_session("s-tg")["ended_at"] is not None
        cursor = db._conn.execute(sql, ("s-tg",))
        db._conn.commit()
        assert cursor.rowcount == 1
        assert db._conn.execute(sql, ("missing",)).rowcount == 0
        row = db.get_session("s-tg")
        assert (row["ended_at"], row["end_reason"]) == (None, None)
    # a second store on the same database sees it at once: the statement committed
    from hermes_store.agent import hermes_state as compat

    other = compat.SessionDB(ours.target)
    try:
        assert other.get_session("s-tg")["ended_at"] is None
    finally:
        other.close()


def _api_create(db, session_id, *, model="gpt-x", system_prompt="Be brief.", title=None):
    """The API server's ``POST /api/sessions`` unit, as the agent wrote it."""
    atomic = agent_function("gateway/platforms/api_server.py", "_atomic", {
        "session_id": session_id, "model": model, "system_prompt": system_prompt,
        "title": title, "db": db,
    })
    return db._execute_write(atomic)


_VOLATILE = {"started_at"}


def _common(mine: dict, theirs: dict) -> tuple[dict, dict]:
    keys = (set(theirs) & set(mine)) - _VOLATILE
    return {k: mine[k] for k in keys}, {k: theirs[k] for k in keys}


def test_api_server_session_creation_is_one_unit(upstream, ours):
    for case in [dict(session_id="api-1", title="Ops chat"),
                 dict(session_id="api-1"),                         # exists
                 dict(session_id="api-2", title="Release plan"),   # title taken by s-root
                 dict(session_id="api-3", title="  spaced\u200b  title "),
                 dict(session_id="api-4", system_prompt=None, model=None)]:
        theirs, their_err = _api_create(upstream, **case)
        mine, my_err = _api_create(ours, **case)
        assert my_err == their_err, case
        if theirs is None:
            assert mine is None
            continue
        assert set(mine) >= set(theirs)  # SELECT *: our head schema has more columns
        assert_same(*_common(mine, theirs), str(case))
        assert ours.get_session(case["session_id"])["system_prompt"] == \
            upstream.get_session(case["session_id"])["system_prompt"]
    assert ours.get_session("api-2") is None  # inserted, then deleted in the same unit
    assert ours.get_session("api-1")["title"] == "Ops chat"


def _insights_engine():
    names = {"json": json, "sqlite3": sqlite3, "time": time, "Counter": Counter,
             "defaultdict": defaultdict, "Any": Any, "Dict": Dict, "List": List,
             "Optional": Optional}
    return agent_function("agent/insights.py", "InsightsEngine", names)


def test_insights_data_gathering_gives_upstreams_answers(upstream, ours):
    Engine = _insights_engine()
    theirs, mine = Engine(upstream), Engine(ours)
    for cutoff in CUTOFFS:
        for source in (None,) + SOURCES:
            for name in ("_get_sessions", "_get_tool_usage", "_get_skill_usage",
                         "_get_message_stats", "_get_model_usage"):
                expected = getattr(theirs, name)(cutoff, source)
                got = getattr(mine, name)(cutoff, source)
                if name == "_get_model_usage":
                    key = lambda r: (r["session_id"], r["model"])  # noqa: E731 (no ORDER BY)
                    expected, got = sorted(expected, key=key), sorted(got, key=key)
                assert_same(got, expected, f"{name}({cutoff}, {source})")
    assert mine._get_tool_usage(0.0)[0] == {"tool_name": "terminal", "count": 2}


@pytest.fixture
def analytics(monkeypatch):
    """The dashboard's ``/api/analytics/usage`` and ``/models`` functions, as the agent
    wrote them; InsightsEngine.generate (pricing tables) is stubbed out."""
    stub = types.ModuleType("agent.insights")

    class InsightsEngine:
        def __init__(self, db):
            self.db = db

        def generate(self, days=30):
            return {}

    stub.InsightsEngine = InsightsEngine
    monkeypatch.setitem(sys.modules, "agent.insights", stub)
    monkeypatch.setitem(sys.modules, "agent.models_dev", None)  # capabilities: none offline
    opened = {}

    class Shared:
        def __init__(self, db):
            self._db = db

        def __getattr__(self, name):
            return getattr(self._db, name)

        def close(self):  # the fixture closes the store
            pass

    names = {"time": time, "Optional": Optional, "Dict": Dict, "List": List, "Any": Any,
             "_open_session_db_for_profile": lambda profile: Shared(opened["db"])}
    for helper in ("_aux_usage_rows", "_merge_aux_into_by_model", "_aux_task_summary"):
        agent_function("hermes_cli/web_server.py", helper, names)
    usage = agent_function("hermes_cli/web_server.py", "_get_usage_analytics", names)
    models = agent_function("hermes_cli/web_server.py", "_get_models_analytics", names)

    def run(db, fn, days):
        opened["db"] = db
        return fn(days=days)

    return lambda db, which, days: run(db, usage if which == "usage" else models, days)


@pytest.mark.parametrize("which", ["usage", "models"])
def test_dashboard_analytics_give_upstreams_answers(analytics, upstream, ours, which):
    for days in (10_000, 30):  # everything, and nothing (the data is pinned in 2025)
        expected = analytics(upstream, which, days)
        got = analytics(ours, which, days)
        assert_same(got, expected, f"{which} days={days}")
    assert analytics(ours, "usage", 10_000)["daily"][0]["day"] == "2025-11-24"


def test_raw_reads_see_a_units_own_writes_inside_execute_write(ours):
    def unit(conn):
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", ("inside", "s-cron"))
        return conn.execute("SELECT title FROM sessions WHERE id = ?", ("s-cron",)).fetchone()[0]

    assert ours._execute_write(unit) == "inside"
    assert ours.get_session("s-cron")["title"] == "inside"


def test_a_unit_that_raises_leaves_nothing(ours):
    class Stop(Exception):
        pass

    def unit(conn):
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", ("never", "s-cron"))
        raise Stop

    with pytest.raises(Stop):
        ours._execute_write(unit)
    assert ours.get_session("s-cron")["title"] is None


def test_cursor_shapes(ours, upstream):
    sql = "SELECT id, source FROM sessions WHERE source = ? ORDER BY started_at"
    for db in (ours, upstream):
        cur = db._conn.execute(sql, ("cli",))
        assert [d[0] for d in cur.description] == ["id", "source"]
        assert cur.rowcount == -1
        first = cur.fetchone()
        assert first["id"] == "s-cli" and first[1] == "cli" and first.keys() == ["id", "source"]
        assert [r["id"] for r in cur] == ["s-root", "s-child"]
        assert cur.fetchone() is None and cur.fetchall() == []
    cur = ours._conn.execute("UPDATE sessions SET title = title WHERE source = ?", ("cli",))
    assert cur.description is None and cur.rowcount == 3
