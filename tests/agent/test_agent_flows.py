"""Hermes Agent 0.19.0's own code on hermes_store, flow by flow, against upstream (D15).

One store is populated by upstream's own ``hermes_state`` (``support/workers/agent_populate.py``:
sessions with tool calls and token counts, titles, a compression chain, Chinese/
Japanese/Korean text, an old and an ended session), the file a user has when they switch.
Three copies of it are driven side by side by the same script (``support/workers/agent_flows.py``) in
the suite's hermes-agent venv with ``hermes-store agent enable`` on:

* **ours** — the switch in effect: the agent imports ``hermes_store.agent.hermes_state``
  and adopts the file on first open;
* **upstream** — the same venv with ``HERMES_STORE_AGENT_HOOK=off``: the agent's own
  ``hermes_state``, as with the switch off;
* **postgresql** — ours with ``HERMES_STATE_DATABASE_URL`` naming a database of the suite's
  server that holds a copy of the same data (``hermes-store db copy``); its
  ``HERMES_HOME`` has no ``state.db``, and must still have none at the end.

Every flow's result is compared with upstream's after masking what differs run to run
(times, new ids, sizes: ``support.agent.normalise``). Rows are compared on upstream's
columns: a store at head has more columns than upstream's schema 22, never different
values in upstream's. Agent turns (``hermes -z``, ``chat --resume``, ``cron tick``) go
to a loopback stub model, which records what each side offered it.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.agent import (
    WORKERS,
    agent_env,
    normalise,
    require_agent_venv,
    run_agent_python,
    store_cli,
    stub_model,
    write_model_config,
)

# The PostgreSQL side needs the suite's server (requested inside the shared fixture).
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(1800)]

SIDES = ("ours", "upstream", "postgresql")
GROUPS = ("reads", "doctor", "gateway", "writes", "turns", "cron", "final")


def _side_results(venv, side: str, home: Path, stub, url: str | None) -> dict:
    write_model_config(home, stub.base_url(side))
    env = agent_env(home, upstream=side == "upstream", url=url)
    out = home.parent / "flows.json"
    run = run_agent_python(venv, WORKERS / "agent_flows.py", out, *GROUPS, env=env, timeout=1500)
    assert run.returncode == 0 and out.is_file(), f"{side}: {run.stderr[-4000:]}"
    data = json.loads(out.read_text())
    data["_stderr"] = run.stderr[-4000:]
    return data


def _shared_dir(tmp_path_factory) -> Path:
    """One folder for the whole run: under xdist every worker that gets a test of this
    module would otherwise run all the flows again (the recipe of pytest-xdist's docs:
    the base temp folder's parent is shared by the workers)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "agent-flows"
    folder.mkdir(exist_ok=True)
    return folder


def _populate(venv, folder: Path) -> Path:
    base = folder / "base" / "hermes"
    base.mkdir(parents=True)
    run = run_agent_python(venv, WORKERS / "agent_populate.py", env=agent_env(base, upstream=True))
    assert run.returncode == 0, run.stderr
    return base


def _pg_copy(pg_server, base: Path, folder: Path) -> tuple[str, str]:
    """A database of the suite's server holding a copy of the populated file."""
    staged = folder / "pg-copy.db"
    shutil.copyfile(base / "state.db", staged)
    store_cli("--db", staged, "db", "upgrade", check=True)
    name = pg_server.new_name("agent")
    url = pg_server.create_database(name)
    store_cli("db", "copy", staged, url, check=True)
    return name, url


def _run_all_sides(request, venv, folder: Path) -> dict:
    base = _populate(venv, folder)
    pg_server = request.getfixturevalue("pg_server")
    name, url = _pg_copy(pg_server, base, folder)
    homes = {}
    for side in SIDES:
        home = folder / side / "hermes"
        shutil.copytree(base, home)
        if side == "postgresql":
            (home / "state.db").unlink()
        homes[side] = str(home)
    try:
        with stub_model.StubModel() as stub, ThreadPoolExecutor(len(SIDES)) as pool:
            futures = {side: pool.submit(_side_results, venv, side, Path(homes[side]), stub,
                                         url if side == "postgresql" else None)
                       for side in SIDES}
            results = {side: f.result() for side, f in futures.items()}
            requests = {side: stub.lane(side) for side in SIDES}
        homes[PG_BACK] = str(_copy_back(url, Path(homes["postgresql"]), folder))
    finally:
        pg_server.drop_database(name)
    return {"results": results, "requests": requests, "homes": homes}


#: the home of the switch back from PostgreSQL: the server's database, after every flow,
#: copied into a file (``_copy_back``)
PG_BACK = "postgresql copied back"


def _copy_back(url: str, pg_home: Path, folder: Path) -> Path:
    """What a user who ran the agent on PostgreSQL takes back to 0.19.0: the PostgreSQL
    side's home, its ``state.db`` (the agent's own async-delegation table, which
    ``db copy`` does not write into) set aside, and ``hermes-store db copy URL
    state.db`` from the server."""
    home = folder / "postgresql-back" / "hermes"
    shutil.copytree(pg_home, home, ignore=shutil.ignore_patterns("state.db*", "*.lock"))
    store_cli("db", "copy", url, home / "state.db", check=True)
    return home


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """Every side's results, computed once per test run (whichever worker comes first,
    the others wait on the lock and read them), kept as ``agent-flows/runs.json``."""
    import fcntl

    venv = require_agent_venv()
    folder = _shared_dir(tmp_path_factory)
    done = folder / "runs.json"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            done.write_text(json.dumps(_run_all_sides(request, venv, folder),
                                       ensure_ascii=False, indent=1))
    data = json.loads(done.read_text())
    data["homes"] = {side: Path(home) for side, home in data["homes"].items()}
    data["venv"] = venv
    return data


def _failures(data: dict) -> list[str]:
    return [k for k in data if k.endswith(" FAILED")]


# --------------------------------------------------------------------------- comparison

def on_upstream_keys(ours, up):
    """``ours`` cut down to the shape of ``up``: dicts to upstream's keys (a store at head
    has columns upstream's schema does not), lists element by element."""
    if isinstance(up, dict) and isinstance(ours, dict):
        return {k: on_upstream_keys(ours.get(k, "<missing>"), v) for k, v in up.items()}
    if isinstance(up, list) and isinstance(ours, list) and len(up) == len(ours):
        return [on_upstream_keys(o, u) for o, u in zip(ours, up)]
    return ours


def assert_same_flow(runs, key: str, sides=("ours", "postgresql")):
    results = runs["results"]
    for side in ("upstream",) + tuple(sides):
        assert not _failures(results[side]), f"{side}: {results[side][_failures(results[side])[0]]}"
        assert key in results[side], f"{side} did not run {key!r}"
    up = norm(runs, "upstream", results["upstream"][key])
    for side in sides:
        got = on_upstream_keys(norm(runs, side, results[side][key]), up)
        assert got == up, f"{key}: {side} differs from upstream"


def norm(runs, side: str, value):
    return normalise(value, runs["homes"][side].parent)


# The flows whose output is the same on every engine (after masking): the agent's CLI,
# tools, gateway and servers over the same rows.
SAME_EVERYWHERE = [
    "sessions list",
    "sessions list --source telegram",
    "sessions list --source tool",
    "sessions list --limit 3",
    "sessions list --workspace proj-beta",
    "sessions list --workspace proj-alpha",
    "sessions export -",
    "sessions export --session-id s_chain_child -",
    "insights --days 30",
    "insights --days 30 --source cli",
    "kanban init", "kanban create", "kanban list", "project create", "project list",
    "tool available",
    "discover docker", "discover 数据库", "discover refund path", "discover データベース",
    "discover webhook", "discover docker role=user", "discover refund sort=oldest",
    "discover default db",
    "read s_docker", "read s_cjk", "browse",
    "scroll in s_chain_child", "scroll from s_chain_root into its child", "scroll unknown anchor",
    "gateway runner has session db",
    "gateway /sessions", "gateway /sessions full", "gateway /title", "gateway /title 迁移 Follow-up",
    "gateway /resume", "gateway /resume Resume Me", "gateway /resume 1", "gateway /insights",
    "store session", "store load", "store rewind 1", "store load after rewind",
    "store reset gives a new session", "store load old after reset", "store load new after reset",
    "store db row",
    "api connect", "api GET /api/sessions", "api POST /api/sessions",
    "api POST /api/sessions duplicate", "api POST /api/sessions title taken",
    "api GET /api/sessions/api_made_1", "api GET messages s_docker", "api GET messages s_cjk",
    "api PATCH title", "api GET /api/sessions after",
    "dashboard /api/analytics/usage?days=30", "dashboard /api/analytics/models?days=30",
    "dashboard /api/sessions/s_chain_root/latest-descendant",
    "dashboard /api/sessions/s_docker/latest-descendant",
    "acp restored", "acp restored history", "acp listed", "acp db row",
    "sessions rename", "sessions rename taken", "sessions delete", "sessions delete missing",
    "sessions prune --dry-run", "sessions prune", "sessions list after writes",
    "oneshot", "chat --resume ended", "resumed session row",
    "cron create", "cron list", "cron tick", "cron runs",
    "final export",
]


@pytest.mark.parametrize("key", SAME_EVERYWHERE)
def test_flow_gives_upstreams_result(runs, key):
    assert_same_flow(runs, key)


def test_each_side_ran_the_module_it_should(runs):
    results = runs["results"]
    ours = results["ours"]["module"]["file"]
    assert ours.endswith(os.path.join("hermes_store", "agent", "hermes_state.py"))
    assert results["postgresql"]["module"]["file"] == ours
    assert results["upstream"]["module"]["file"].endswith(os.path.join("site-packages", "hermes_state.py"))
    assert results["ours"]["module"]["names"] == results["upstream"]["module"]["names"]


def test_session_recall_is_offered_to_the_model_on_every_side(runs):
    """The session_search tool's availability check imports DEFAULT_DB_PATH: with it
    missing the tool silently vanished from the model's tool list and the system
    prompt lost its guidance. Every request the stub got (``hermes -z``, ``chat
    --resume``, the cron job's turn) offers it, on every side, with upstream's tools."""
    requests = runs["requests"]
    for side in SIDES:
        assert len(requests[side]) >= 3, f"{side}: {len(requests[side])} model requests"
    up_tools = [stub_model.tool_names(r) for r in requests["upstream"]]
    assert all("session_search" in tools for tools in up_tools)
    up_prompts = [norm(runs, "upstream", stub_model.system_prompt(r)) for r in requests["upstream"]]
    assert all("session_search" in p for p in up_prompts[:1]), "the tool's guidance is in the prompt"
    for side in ("ours", "postgresql"):
        tools = [stub_model.tool_names(r) for r in requests[side]]
        assert tools == up_tools, side
        prompts = [norm(runs, side, stub_model.system_prompt(r)) for r in requests[side]]
        assert prompts == up_prompts, f"{side}: the system prompts differ from upstream's"


def test_chat_resume_reopens_the_ended_session(runs):
    for side in SIDES:
        row = runs["results"][side]["resumed session row"]
        assert row == {"ended_at is None": True, "end_reason": None}, side


def test_the_postgresql_side_kept_no_session_in_a_file(runs):
    """Every store the agent opens through hermes_state is the server's. The one file
    left is the agent's own: ``tools/async_delegation.py`` keeps its table of this host's
    background delegations in ``$HERMES_HOME/state.db`` with sqlite3 directly, past
    hermes_state (upstream does the same)."""
    path = runs["homes"]["postgresql"] / "state.db"
    if path.exists():
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
        assert tables == {"async_delegations"}, tables


def test_sessions_stats_and_repair_check(runs):
    """The same counts on PostgreSQL; ``sessions stats`` prints a file's size only where
    there is a file (the agent asks ``db_path.exists()``, False for a server database)."""
    results = runs["results"]
    for key in ("sessions stats", "final stats"):
        assert_same_flow(runs, key, sides=("ours",))
        pg = results["postgresql"][key]
        assert pg["rc"] == 0 and not pg["stderr"], pg
        up_lines = norm(runs, "upstream", results["upstream"][key])["stdout"].splitlines()
        assert up_lines[-1] == "Database size: <size>"
        assert norm(runs, "postgresql", pg)["stdout"].splitlines() == up_lines[:-1], key
    assert_same_flow(runs, "sessions repair --check-only")


def test_doctor(runs):
    """The same report; on PostgreSQL the one line about the file differs: doctor looks
    for ``$HERMES_HOME/state.db`` on disk itself."""
    assert_same_flow(runs, "doctor", sides=("ours",))
    up = norm(runs, "upstream", runs["results"]["upstream"]["doctor"])
    pg = norm(runs, "postgresql", runs["results"]["postgresql"]["doctor"])
    assert pg["rc"] == up["rc"] and "Traceback" not in pg["stdout"] + pg["stderr"]
    differing = [(a, b) for a, b in zip(up["stdout"].splitlines(), pg["stdout"].splitlines()) if a != b]
    assert differing == [("  ✓ <root>/hermes/state.db exists (9 sessions)",
                          "    → <root>/hermes/state.db not created yet (will be created on first session)")]


# --------------------------------------------------------------------------- switching back

_UPSTREAM_WRITES = r"""
import json, hermes_state
assert hermes_state.__file__.endswith("site-packages/hermes_state.py"), hermes_state.__file__
db = hermes_state.SessionDB()
db.create_session("s_back", source="cli", model="gpt-5", system_prompt="Back on upstream.")
db.append_message("s_back", role="user", content="回到上游之后还能搜索吗？")
db.append_message("s_back", role="assistant", content="Yes: upstream searches this file too.")
db.set_session_title("s_back", "Back On Upstream")
db.end_session("s_chain_tip", "user_exit")
hits = [h["session_id"] for h in db.search_messages("upstream")]
print(json.dumps({"hits": hits, "count": db.session_count(),
                  "tip": db.get_session("s_chain_tip")["end_reason"]}))
"""


@pytest.fixture(scope="module")
def switched_back(runs, tmp_path_factory):
    """The file the agent ran on hermes_store (every flow above), now used by upstream
    0.19.0 as after `hermes-store agent disable`: its export, then its own writes."""
    venv = runs["venv"]
    home = tmp_path_factory.mktemp("agent-back") / "hermes"
    shutil.copytree(runs["homes"]["ours"], home, ignore=shutil.ignore_patterns("*.lock"))
    up = agent_env(home, upstream=True)
    export = subprocess.run([str(venv.hermes), "sessions", "export", "-"], capture_output=True,
                            text=True, env=up, cwd=home, timeout=600)
    writes = run_agent_python(venv, "-c", _UPSTREAM_WRITES, env=up)
    listed = subprocess.run([str(venv.hermes), "sessions", "list"], capture_output=True,
                            text=True, env=up, cwd=home, timeout=600)
    ours = agent_env(home)
    read_back = subprocess.run([str(venv.hermes), "sessions", "export", "--session-id", "s_back", "-"],
                               capture_output=True, text=True, env=ours, cwd=home, timeout=600)
    return {"export": export, "writes": writes, "list": listed, "read back": read_back}


def test_upstream_exports_what_hermes_store_wrote_with_every_system_prompt(runs, switched_back):
    export = switched_back["export"]
    assert export.returncode == 0, export.stderr
    root = runs["homes"]["ours"].parent
    up_rows = normalise(export.stdout, root)
    ours_rows = norm(runs, "ours", runs["results"]["ours"]["final export"]["stdout"])
    assert [r["id"] for r in up_rows] == [r["id"] for r in ours_rows]
    assert on_upstream_keys(ours_rows, up_rows) == up_rows
    # Every prompt the agent wrote on hermes_store is there for upstream, as on a store
    # upstream wrote itself all along.
    prompted = [r["id"] for r in up_rows if r["system_prompt"]]
    upstream_own = norm(runs, "upstream", runs["results"]["upstream"]["final export"]["stdout"])
    assert prompted == [r["id"] for r in upstream_own if r["system_prompt"]]
    assert len(prompted) >= 10


def test_upstream_exports_a_copy_from_postgresql_as_the_sqlite_switch_back(runs, switched_back):
    """Switching back from PostgreSQL (issue 32): upstream 0.19.0's export of the file
    ``hermes-store db copy`` made from the server equals its export of the SQLite
    store the agent ran on (the same flows ran on both), system prompts included."""
    home = runs["homes"][PG_BACK]
    export = subprocess.run([str(runs["venv"].hermes), "sessions", "export", "-"],
                            capture_output=True, text=True, env=agent_env(home, upstream=True),
                            cwd=home, timeout=600)
    assert export.returncode == 0, export.stderr
    # the data, and the paths in it, are the PostgreSQL side's
    from_postgresql = normalise(export.stdout, runs["homes"]["postgresql"].parent)
    on_sqlite = normalise(switched_back["export"].stdout, runs["homes"]["ours"].parent)
    assert [r["id"] for r in from_postgresql] == [r["id"] for r in on_sqlite]
    for pg_row, sqlite_row in zip(from_postgresql, on_sqlite):
        # a prompt's hash differs where the prompt holds the side's own time or folder:
        # the prompts themselves are compared (masked)
        pg_row.pop("system_prompt_hash"), sqlite_row.pop("system_prompt_hash")
        assert pg_row == sqlite_row, f"{pg_row['id']}: upstream reads the copy differently"
    assert len([r for r in from_postgresql if r["system_prompt"]]) >= 10


def test_upstream_writes_the_file_and_hermes_store_reads_it_back(switched_back):
    writes = switched_back["writes"]
    assert writes.returncode == 0, writes.stderr
    done = json.loads(writes.stdout.strip().splitlines()[-1])
    assert "s_back" in done["hits"] and done["tip"] == "user_exit"
    listed = switched_back["list"]
    assert listed.returncode == 0 and "Back On Upstream" in listed.stdout, listed.stderr
    back = switched_back["read back"]
    assert back.returncode == 0, back.stderr
    row = json.loads(back.stdout)
    assert row["title"] == "Back On Upstream" and row["system_prompt"] == "Back on upstream."
    assert [m["content"] for m in row["messages"]] == [
        "回到上游之后还能搜索吗？", "Yes: upstream searches this file too."]
