"""Drive hermes-agent 0.19.0's own code on whichever ``hermes_state`` this process gets.

Run by the agent venv's interpreter, with ``HERMES_HOME`` (and ``HOME``) pointing at one
copy of the populated store: with the switch on that is hermes_store's module (on the
file, or on ``HERMES_STATE_DATABASE_URL``), with ``HERMES_STORE_AGENT_HOOK=off`` it is
upstream's. Every flow is the agent's code doing what a user does: its CLI as real
subprocesses (``hermes sessions …``, ``hermes -z``, ``hermes cron tick``, …), and its
modules in this process where a flow has no command (the session_search tool, the
gateway's session store and slash commands, the API server adapter on a loopback port,
the dashboard's FastAPI app, ACP's session manager). No model: turns go to the test's
loopback stub (the base URL in ``$HERMES_HOME/config.yaml``).

    python agent_flows.py RESULTS.json GROUP [GROUP …]

writes ``{flow name: raw result}`` to RESULTS.json (not stdout: the agent's code prints
there); the tests normalise and compare. A flow that raises records its traceback
instead of stopping the others.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import traceback
from pathlib import Path

HERMES = str(Path(sys.executable).with_name("hermes"))
GROUPS: dict[str, list] = {}


def group(name):
    def register(fn):
        GROUPS.setdefault(name, []).append(fn)
        return fn
    return register


def cli(*args, stdin: str | None = None, timeout: float = 180, env_extra=None) -> dict:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200", **(env_extra or {}))
    run = subprocess.run([HERMES, *args], capture_output=True, text=True, input=stdin,
                         timeout=timeout, env=env, cwd=os.environ["HERMES_HOME"])
    return {"rc": run.returncode, "stdout": run.stdout, "stderr": run.stderr}


def db():
    from hermes_state import SessionDB

    return SessionDB()


# --------------------------------------------------------------------------- module

@group("reads")
def module(out):
    import hermes_state

    out["module"] = {"file": hermes_state.__file__,
                     "names": sorted(n for n in ("SessionDB", "AsyncSessionDB", "DEFAULT_DB_PATH",
                                                 "format_session_db_unavailable", "get_last_init_error",
                                                 "workspace_key", "apply_wal_with_fallback",
                                                 "is_malformed_db_error", "_db_opens_cleanly",
                                                 "repair_state_db_schema", "SCHEMA_VERSION")
                                     if hasattr(hermes_state, n))}


# --------------------------------------------------------------------------- CLI reads

@group("reads")
def cli_reads(out):
    out["sessions list"] = cli("sessions", "list")
    out["sessions list --source telegram"] = cli("sessions", "list", "--source", "telegram")
    out["sessions list --source tool"] = cli("sessions", "list", "--source", "tool")
    out["sessions list --limit 3"] = cli("sessions", "list", "--limit", "3")
    out["sessions list --workspace proj-beta"] = cli("sessions", "list", "--workspace", "proj-beta")
    out["sessions list --workspace proj-alpha"] = cli("sessions", "list", "--workspace", "proj-alpha")
    out["sessions stats"] = cli("sessions", "stats")
    out["sessions export -"] = cli("sessions", "export", "-")
    out["sessions export --session-id s_chain_child -"] = cli(
        "sessions", "export", "--session-id", "s_chain_child", "-")
    out["sessions repair --check-only"] = cli("sessions", "repair", "--check-only")
    out["insights --days 30"] = cli("insights", "--days", "30")
    out["insights --days 30 --source cli"] = cli("insights", "--days", "30", "--source", "cli")


@group("doctor")
def doctor(out):
    # Refused proxies: the provider checks fail at once instead of waiting on the network.
    out["doctor"] = cli("doctor", env_extra={"HTTPS_PROXY": "http://127.0.0.1:9",
                                              "HTTP_PROXY": "http://127.0.0.1:9",
                                              "NO_PROXY": "127.0.0.1,localhost"})


@group("reads")
def kanban_project(out):
    out["kanban init"] = cli("kanban", "init")
    out["kanban create"] = cli("kanban", "create", "Write the docs")
    out["kanban list"] = cli("kanban", "list")
    out["project create"] = cli("project", "create", "demo")
    out["project list"] = cli("project", "list")


# --------------------------------------------------------------------------- the session_search tool

def _message_ids(session_id):
    return [m["id"] for m in db().get_messages(session_id)]


@group("reads")
def session_search(out):
    from tools import session_search_tool as tool

    out["tool available"] = tool.check_session_search_requirements()
    store = db()
    for q in ("docker", "数据库", "refund path", "データベース", "webhook"):
        out[f"discover {q}"] = json.loads(tool.session_search(query=q, db=store))
    out["discover docker role=user"] = json.loads(tool.session_search(query="docker", role_filter="user", db=store))
    out["discover refund sort=oldest"] = json.loads(tool.session_search(query="refund", sort="oldest", db=store))
    out["read s_docker"] = json.loads(tool.session_search(session_id="s_docker", db=store))
    out["read s_cjk"] = json.loads(tool.session_search(session_id="s_cjk", db=store))
    out["browse"] = json.loads(tool.session_search(db=store, limit=5))
    child_ids = _message_ids("s_chain_child")
    out["scroll in s_chain_child"] = json.loads(tool.session_search(
        session_id="s_chain_child", around_message_id=child_ids[1], window=2, db=store))
    # The anchor lives in the child: the tool finds its owner through db._conn.
    out["scroll from s_chain_root into its child"] = json.loads(tool.session_search(
        session_id="s_chain_root", around_message_id=child_ids[2], window=2, db=store))
    out["scroll unknown anchor"] = json.loads(tool.session_search(
        session_id="s_chain_root", around_message_id=999999, db=store))
    # Default construction, as the tool does when the agent passes no db
    out["discover default db"] = json.loads(tool.session_search(query="kubernetes"))


# --------------------------------------------------------------------------- gateway

def _source(**kw):
    from gateway.config import Platform
    from gateway.session import SessionSource

    return SessionSource(platform=kw.pop("platform", Platform.TELEGRAM), **kw)


@group("gateway")
def gateway_commands(out):
    from gateway.config import GatewayConfig
    from gateway.platforms.base import MessageEvent
    from gateway.run import GatewayRunner

    runner = GatewayRunner(GatewayConfig())
    out["gateway runner has session db"] = runner._session_db is not None
    src = _source(chat_id="tg-chat-1", chat_type="dm", user_id="tg-user-1")
    script = ["/sessions", "/sessions full", "/title", "/title 迁移 Follow-up", "/title",
              "/resume", "/resume Resume Me", "/resume 1", "/sessions full", "/insights"]

    async def run():
        for text in script:
            handler = getattr(runner, f"_handle_{text.split()[0][1:]}_command")
            try:
                out[f"gateway {text}"] = await handler(MessageEvent(text=text, source=src))
            except Exception as exc:  # the flow's answer, not the driver's failure
                out[f"gateway {text}"] = f"raised {type(exc).__name__}: {exc}"

    asyncio.run(run())


@group("gateway")
def gateway_store(out):
    from gateway.config import GatewayConfig
    from gateway.session import SessionStore

    home = Path(os.environ["HERMES_HOME"])
    store = SessionStore(home / "sessions", GatewayConfig())
    src = _source(chat_id="tg-chat-77", chat_type="dm", user_id="tg-user-77", user_name="Mei")
    entry = store.get_or_create_session(src)
    sid = entry.session_id
    out["store session"] = {"key": entry.session_key, "same on second call":
                            store.get_or_create_session(src).session_id == sid}
    for role, text in [("user", "帮我总结一下昨天的会议"), ("assistant", "会议讨论了发布计划。"),
                       ("user", "And the action items?"), ("assistant", "Ship 0.19 on Friday.")]:
        store.append_to_transcript(sid, {"role": role, "content": text})
    out["store load"] = store.load_transcript(sid)
    out["store rewind 1"] = store.rewind_session(sid, 1)
    out["store load after rewind"] = store.load_transcript(sid)
    fresh = store.reset_session(entry.session_key)
    out["store reset gives a new session"] = fresh is not None and fresh.session_id != sid
    out["store load old after reset"] = store.load_transcript(sid)
    out["store load new after reset"] = store.load_transcript(fresh.session_id) if fresh else None
    out["store db row"] = {k: v for k, v in (db().get_session(sid) or {}).items()
                           if k in ("source", "user_id", "chat_id", "chat_type", "message_count",
                                    "end_reason", "title")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@group("gateway")
def api_server(out):
    import aiohttp

    from gateway.config import PlatformConfig
    from gateway.platforms.api_server import APIServerAdapter

    key = secrets.token_hex(24)
    port = _free_port()
    adapter = APIServerAdapter(PlatformConfig(enabled=True, extra={
        "host": "127.0.0.1", "port": port, "key": key}))
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {key}"}

    async def call(session, method, path, body=None):
        async with session.request(method, base + path, json=body, headers=headers) as resp:
            try:
                data = await resp.json(content_type=None)
            except Exception:
                data = await resp.text()
            return {"status": resp.status, "body": data}

    async def run():
        ok = await adapter.connect()
        out["api connect"] = ok
        try:
            async with aiohttp.ClientSession() as s:
                out["api GET /api/sessions"] = await call(s, "GET", "/api/sessions")
                out["api POST /api/sessions"] = await call(s, "POST", "/api/sessions", {
                    "id": "api_made_1", "title": "From the API", "system_prompt": "API prompt",
                    "model": "gpt-5"})
                out["api POST /api/sessions duplicate"] = await call(s, "POST", "/api/sessions", {
                    "id": "api_made_1"})
                out["api POST /api/sessions title taken"] = await call(s, "POST", "/api/sessions", {
                    "id": "api_made_2", "title": "Fix Docker Build"})
                out["api GET /api/sessions/api_made_1"] = await call(s, "GET", "/api/sessions/api_made_1")
                out["api GET messages s_docker"] = await call(s, "GET", "/api/sessions/s_docker/messages")
                out["api GET messages s_cjk"] = await call(s, "GET", "/api/sessions/s_cjk/messages")
                out["api PATCH title"] = await call(s, "PATCH", "/api/sessions/api_made_1",
                                                    {"title": "From the API, renamed"})
                out["api GET /api/sessions after"] = await call(s, "GET", "/api/sessions")
        finally:
            await adapter.disconnect()

    asyncio.run(run())


@group("gateway")
def dashboard(out):
    os.environ.setdefault("HERMES_DASHBOARD_SESSION_TOKEN", "suite-dashboard-token-0123456789")
    from fastapi.testclient import TestClient

    from hermes_cli import web_server

    client = TestClient(web_server.app, base_url="http://127.0.0.1")
    headers = {"Authorization": f"Bearer {os.environ['HERMES_DASHBOARD_SESSION_TOKEN']}"}
    for path in ("/api/analytics/usage?days=30", "/api/analytics/models?days=30",
                 "/api/sessions/s_chain_root/latest-descendant",
                 "/api/sessions/s_docker/latest-descendant"):
        resp = client.get(path, headers=headers)
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        out[f"dashboard {path}"] = {"status": resp.status_code, "body": body}


@group("gateway")
def acp_sessions(out):
    from types import SimpleNamespace

    from acp_adapter.session import SessionManager

    # The manager's own hook for an AIAgent-like object: what it persists and restores
    # is the session and its history, not the agent (a real one would cost a model
    # client and every tool's import here).
    def agent():
        return SimpleNamespace(model="stub-model", provider="custom", api_mode="chat_completions",
                               base_url="http://127.0.0.1:9/v1")

    manager = SessionManager(agent_factory=agent)
    state = manager.create_session(cwd="/work/acp-demo")
    state.history.extend([{"role": "user", "content": "ACP 会话：列出文件"},
                          {"role": "assistant", "content": "Listed 3 files."}])
    manager.save_session(state.session_id)
    again = SessionManager(agent_factory=agent)  # a new process's view: restored from the store
    restored = again.get_session(state.session_id)
    out["acp restored"] = restored is not None and restored.cwd == "/work/acp-demo"
    out["acp restored history"] = [(m.get("role"), m.get("content")) for m in restored.history] if restored else None
    out["acp listed"] = [{k: v for k, v in d.items() if k in ("cwd", "title", "model")}
                         for d in again.list_sessions()]
    out["acp db row"] = {k: v for k, v in (db().get_session(state.session_id) or {}).items()
                         if k in ("source", "model", "message_count")}


# --------------------------------------------------------------------------- writes

@group("writes")
def cli_writes(out):
    out["sessions rename"] = cli("sessions", "rename", "s_docker", "Docker", "Build", "Fixed")
    out["sessions rename taken"] = cli("sessions", "rename", "s_ended", "Docker Build Fixed")
    out["sessions delete"] = cli("sessions", "delete", "s_discord", "--yes")
    out["sessions delete missing"] = cli("sessions", "delete", "no_such_session", "--yes")
    out["sessions prune --dry-run"] = cli("sessions", "prune", "--older-than", "90", "--dry-run")
    out["sessions prune"] = cli("sessions", "prune", "--older-than", "90", "--yes")
    out["sessions list after writes"] = cli("sessions", "list")


@group("turns")
def turns(out):
    out["oneshot"] = cli("-z", "Remember the Docker fix from before?")
    out["chat --resume ended"] = cli("chat", "--resume", "s_ended", "-q", "Anything new since?", "-Q")
    row = db().get_session("s_ended") or {}
    out["resumed session row"] = {"ended_at is None": row.get("ended_at") is None,
                                  "end_reason": row.get("end_reason")}


@group("cron")
def cron(out):
    out["cron create"] = cli("cron", "create", "every 1h", "Summarise yesterday's sessions",
                             "--name", "digest", "--deliver", "local")
    out["cron list"] = cli("cron", "list")
    # An hour later: the job is due, and the tick runs it (an agent turn on the stub).
    jobs_file = Path(os.environ["HERMES_HOME"]) / "cron" / "jobs.json"
    jobs = json.loads(jobs_file.read_text())
    for job in jobs["jobs"]:
        job["next_run_at"] = "2000-01-01T00:00:00+00:00"
    jobs_file.write_text(json.dumps(jobs, indent=2))
    out["cron tick"] = cli("cron", "tick")
    out["cron runs"] = [{k: j.get(k) for k in ("name", "last_status", "last_error")}
                        for j in json.loads(jobs_file.read_text())["jobs"]]


@group("final")
def final(out):
    out["final export"] = cli("sessions", "export", "-")
    out["final stats"] = cli("sessions", "stats")


def main(argv) -> int:
    import time

    target, argv = Path(argv[0]), argv[1:]
    results: dict = {}
    timings: dict = {}
    for name in argv or list(GROUPS):
        for fn in GROUPS[name]:
            t0 = time.perf_counter()
            try:
                fn(results)
            except Exception:
                results[f"{fn.__name__} FAILED"] = traceback.format_exc()
            timings[fn.__name__] = round(time.perf_counter() - t0, 2)
    results["_seconds"] = timings
    target.write_text(json.dumps(results, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
