"""The pytest side of the agent integration suite: environments to switch, the
hermes-store CLI as a subprocess, and what the comparisons normalise.

The scripts the agent venv runs (``support/workers/agent_populate.py``,
``support/workers/agent_flows.py``) and the venv builder (``support/agent_venv.py``)
live in the suite-wide support package.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

#: the scripts the agent venv runs
WORKERS = Path(__file__).resolve().parent / "workers"

from support import agent_venv, stub_model  # noqa: E402

ROOT = agent_venv.ROOT
HOOK_FILE = "hermes_store_agent.pth"

#: no network for anything the agent runs: provider probes fail at once on a refused
#: proxy instead of waiting on DNS; the loopback stub model stays reachable
OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "NO_PROXY": "127.0.0.1,localhost"}


def store_cli(*args, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """``hermes-store …`` of this checkout, as a user runs it (its own process)."""
    full = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    run = subprocess.run([sys.executable, "-m", "hermes_store", *map(str, args)],
                         capture_output=True, text=True, env=full, timeout=300)
    if check:
        assert run.returncode == 0, run.stdout + run.stderr
    return run


def flat(text: str) -> str:
    """Console output with rich's line wrapping undone."""
    return " ".join(text.split())


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its content hash: what "as it was" compares."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() or path.is_symlink():
            out[str(path.relative_to(folder))] = (
                "link:" + os.readlink(path) if path.is_symlink()
                else hashlib.sha256(path.read_bytes()).hexdigest())
    return out


# --------------------------------------------------------------------------- small environments

@dataclass
class FakeEnv:
    """A venv (no pip) standing in for an agent's environment in the switch tests: a
    ``hermes-agent`` distribution of any version (metadata only) and an upstream-looking
    ``hermes_state.py`` in its site-packages, hermes_store importable or not. The real
    agent venv is shared by the flows running meanwhile, so the switch is flipped here."""

    root: Path
    site: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(self, code: str, env: dict | None = None) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HERMES_STORE_AGENT_HOOK")}
        # the probe itself leaves no bytecode in the environment, whatever the caller's
        # setting: the tests compare the environment's files before and after a switch
        full["PYTHONDONTWRITEBYTECODE"] = "1"
        return subprocess.run([str(self.python), "-c", code], capture_output=True, text=True,
                              env={**full, **(env or {})}, cwd="/", timeout=120)

    def imported_hermes_state(self, env: dict | None = None) -> str:
        run = self.run("import hermes_state; print(hermes_state.__file__)", env)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()


UPSTREAM_STANDIN = "# stands in for hermes-agent's own hermes_state.py\nUPSTREAM = True\n"


def make_fake_env(folder: Path, agent_version: str | None = "0.19.0", *, store: bool = True) -> FakeEnv:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3*/site-packages"))
    if agent_version is not None:
        dist = site / f"hermes_agent-{agent_version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: hermes-agent\nVersion: {agent_version}\n")
        (site / "hermes_state.py").write_text(UPSTREAM_STANDIN)
    if store:  # this checkout and its requirements (this venv's) importable there
        import sysconfig

        (site / "hermes_store_checkout.pth").write_text(
            f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    return FakeEnv(folder, site)


# --------------------------------------------------------------------------- the real agent venv

@dataclass
class AgentVenv:
    root: Path

    @property
    def python(self) -> Path:
        return agent_venv.python(self.root)

    @property
    def hermes(self) -> Path:
        return self.root / "bin" / "hermes"

    @property
    def site(self) -> Path:
        return agent_venv.site_packages(self.root)


def require_agent_venv() -> AgentVenv:
    """The suite's hermes-agent 0.19.0 venv with the switch on (built once, cached)."""
    if os.environ.get("HERMES_SKIP_UPSTREAM_TESTS") == "1":
        pytest.skip("HERMES_SKIP_UPSTREAM_TESTS=1: hermes-agent 0.19.0 is not installed")
    try:
        root = agent_venv.ensure_venv()
    except RuntimeError as exc:
        pytest.fail(f"{exc}\n(no package index? set HERMES_SKIP_UPSTREAM_TESTS=1 to skip)")
    venv = AgentVenv(root)
    store_cli("agent", "enable", "--python", venv.python, check=True)  # idempotent
    return venv


def agent_env(home: Path, *, upstream: bool = False, url: str | None = None, **extra) -> dict:
    """The environment an agent process of one side runs with."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HERMES_STATE_DATABASE_URL", "HERMES_STORE_AGENT_HOOK",
                        "VIRTUAL_ENV", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER")}
    env.update(OFFLINE, HERMES_HOME=str(home), HOME=str(home.parent / "user-home"),
               NO_COLOR="1", COLUMNS="200", TZ="UTC", **extra)
    (home.parent / "user-home").mkdir(exist_ok=True)
    if upstream:
        env["HERMES_STORE_AGENT_HOOK"] = "off"
    if url:
        env["HERMES_STATE_DATABASE_URL"] = url
    return env


def write_model_config(home: Path, base_url: str) -> None:
    (home / "config.yaml").write_text(
        f"model:\n  provider: custom\n  base_url: {base_url}\n  default: {stub_model.MODEL}\n")


def run_agent_python(venv: AgentVenv, script: Path, *args, env: dict, timeout: float = 600):
    return subprocess.run([str(venv.python), str(script), *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=env["HERMES_HOME"])


# --------------------------------------------------------------------------- normalising

_VOLATILE_TEXT = [
    (re.compile(r"\bcron_[0-9a-f]{12}_\d{8}_\d{6}\b"), "cron_<job>_<stamp>"),  # cron runs' sessions
    (re.compile(r"\b\d{8}_\d{6}_[0-9a-f]{6,8}\b"), "<sid>"),  # new session ids
    (re.compile(r"\bapi_\d+_[0-9a-f]{8}\b"), "<api-sid>"),
    (re.compile(r"\b\d{8}_\d{6}\b"), "<stamp>"),  # in cron sessions' ids
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b(t|p)_[0-9a-f]{8}\b"), r"\1_<id>"),  # kanban tasks, projects
    (re.compile(r"\b[0-9a-f]{12}\b"), "<job>"),  # cron jobs
    (re.compile(r"/(ours|upstream|postgresql)/v1\b"), "/<lane>/v1"),  # the stub's lanes
    # the agent probes the interpreters on PATH for its prompt, with a timeout that a
    # loaded machine misses now and then (a wrong "python3=missing", or no line at all)
    (re.compile(r"\n\nPython toolchain: [^\n]*"), ""),
    (re.compile(r"\b\d+(\.\d+)? (MB|KB|kB|GB|B)\b"), "<size>"),
    (re.compile(r"\b(\d+[smhd] ago|just now|yesterday)\b"), "<ago>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?\b"), "<date>"),
    (re.compile(r"\b\d{9,10}\.\d+\b"), "<ts>"),
    (re.compile(r"\b\d{1,2}:\d{2}( ?[AP]M)?\b"), "<time>"),
    (re.compile(r"~?\d+h \d+m|~?\d+m\b|~?\d+s\b"), "<duration>"),
]
#: fields whose values are stamps of when a flow ran, or sizes
VOLATILE_KEYS = {"started_at", "ended_at", "timestamp", "last_active", "created_at", "updated_at",
                 "last_used_at", "when", "id_when", "size_bytes", "db_size", "duration",
                 "active_time", "api_call_count", "last_seen"}


def norm_text(text: str, literal: tuple = ()) -> str:
    for found, repl in literal:
        text = text.replace(found, repl)
    for pattern, repl in _VOLATILE_TEXT:
        text = pattern.sub(repl, text)
    # a masked value's width varied ("just now", "12m ago"): so did the padding after it
    text = _PADDED.sub(r"\1 ", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


_PADDED = re.compile(r"(<ago>|<size>|<date>|<time>|<duration>|<ts>) {2,}")


def normalise(value, root: str | Path | None = None, keys=VOLATILE_KEYS):
    """A flow's result with what differs run to run (times, new ids, sizes, the side's
    own folder ``root``) masked."""
    literal = ((str(root), "<root>"),) if root else ()
    return _normalise(value, literal, keys)


def _normalise(value, literal, keys):
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in keys and v is not None else _normalise(v, literal, keys))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, literal, keys) for v in value]
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in "{[" and stripped[-1:] in "}]":
            try:
                return _normalise(json.loads(stripped), literal, keys)
            except ValueError:
                pass
        if "\n" in stripped and all(line[:1] == "{" for line in stripped.splitlines()):
            try:  # JSONL (sessions export)
                return [_normalise(json.loads(line), literal, keys) for line in stripped.splitlines()]
            except ValueError:
                pass
        return norm_text(value, literal)
    return value
