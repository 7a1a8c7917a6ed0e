"""A venv of the suite's own with hermes-agent 0.19.0 and this package (D15).

hermes-agent is a test dependency of the integration suite only: it is installed here,
never into the project's environment. The venv lives in the cache every upstream copy
uses (``benchmarks/results/cache``, git-ignored), keyed by what goes into it (the agent's
version, the extras, ``pyproject.toml``), and is built once under a file lock, so
parallel xdist workers wait for one build instead of racing. This checkout is installed
editable, so the venv always runs the code under test without a rebuild.

``python tests/support/agent_venv.py`` builds it (or prints where it is).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

AGENT_VERSION = "0.19.0"
#: what the suite's flows need beyond the agent's own requirements: the API server
#: adapter runs on aiohttp (the agent's "messaging" extra, pinned as 0.19.0 pins it)
EXTRA_REQUIREMENTS = ("aiohttp==3.14.1",)

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "benchmarks" / "results" / "cache"
WHEELS = CACHE / "wheels"  # where benchmarks/_upstream.py keeps the agent's wheel
_DONE = ".hermes-store-suite-complete"


def _key() -> str:
    """What decides the venv's contents: the agent, the extras, this package's
    requirements (not the rest of pyproject.toml: the install is editable, so new
    modules and subpackages need no rebuild) and the interpreter."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    h = hashlib.sha256()
    h.update(repr((AGENT_VERSION, EXTRA_REQUIREMENTS, project["dependencies"],
                   project["optional-dependencies"].get("postgres"), sys.version)).encode())
    return h.hexdigest()[:12]


def venv_dir() -> Path:
    return CACHE / f"agent-venv-{AGENT_VERSION}-{_key()}"


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _build(target: Path) -> None:
    if target.exists():  # a build that died half-way
        shutil.rmtree(target)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(target)], check=True)
    find_links = ["--find-links", str(WHEELS)] if WHEELS.is_dir() else []
    run = subprocess.run(
        [str(python(target)), "-m", "pip", "install", "--quiet", *find_links,
         f"hermes-agent=={AGENT_VERSION}", *EXTRA_REQUIREMENTS,
         "-e", f"{ROOT}[postgres]"],
        capture_output=True, text=True,
    )
    if run.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise RuntimeError(
            f"installing hermes-agent {AGENT_VERSION} into {target} failed:\n"
            f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    (target / _DONE).write_text(AGENT_VERSION + "\n")


def ensure_venv() -> Path:
    """The suite's agent venv, built when missing (once, whoever asks first)."""
    target = venv_dir()
    if (target / _DONE).is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "agent-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / _DONE).is_file():
            _build(target)
        for old in CACHE.glob(f"agent-venv-{AGENT_VERSION}-*"):  # superseded keys
            if old != target and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    return target


if __name__ == "__main__":
    print(ensure_venv())
