"""Upstream ``hermes_state`` (hermes-agent 0.19.0) for tests that show what it does.

Never vendored: the unpacked package is looked for in ``$HERMES_UPSTREAM_DIR``, then
``$HERMES_BENCH_UPSTREAM_DIR`` (the benchmarks' variable), then the benchmarks' cache
(``benchmarks/results/cache/hermes-agent-0.19.0``, filled by any benchmark run). When
none holds ``hermes_state.py`` it is fetched the way the benchmarks fetch it (``pip
download hermes-agent==0.19.0`` into that cache, under a file lock so parallel workers
fetch once), so these tests run on a fresh CI machine too. A machine without network
access fails them with the reason, unless ``HERMES_SKIP_UPSTREAM_TESTS=1`` says to skip
them. ``hermes_state`` reads ``$HERMES_HOME`` while importing, so it is imported with
``HERMES_HOME`` pointed at a scratch folder.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

VERSION = "0.19.0"
_ROOT = Path(__file__).resolve().parents[2]


def candidates() -> list[Path]:
    found = [os.environ.get(name) for name in ("HERMES_UPSTREAM_DIR", "HERMES_BENCH_UPSTREAM_DIR")]
    return [Path(p) for p in found if p] + [
        _ROOT / "benchmarks" / "results" / "cache" / f"hermes-agent-{VERSION}",
    ]


def upstream_dir() -> Path | None:
    return next((p for p in candidates() if (p / "hermes_state.py").is_file()), None)


def fetch_upstream() -> Path:
    """Fetch and unpack upstream with the benchmarks' fetcher (one source for how)."""
    import fcntl
    import subprocess

    cache = _ROOT / "benchmarks" / "results" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = upstream_dir()
        if found is not None:
            return found
        run = subprocess.run(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, 'benchmarks'); import _upstream; "
             "print(_upstream.upstream_dir())"],
            cwd=_ROOT, capture_output=True, text=True,
        )
    if run.returncode != 0:
        raise RuntimeError(f"fetching hermes-agent {VERSION} failed: {run.stderr[-2000:]}")
    return Path(run.stdout.strip().splitlines()[-1])


def require_upstream_dir() -> Path:
    """The unpacked upstream package (fetched when missing), or fail/skip the test."""
    where = upstream_dir()
    if where is not None:
        return where
    if os.environ.get("HERMES_SKIP_UPSTREAM_TESTS") == "1":
        pytest.skip("HERMES_SKIP_UPSTREAM_TESTS=1: upstream 0.19.0 is not fetched")
    try:
        return fetch_upstream()
    except RuntimeError as exc:
        pytest.fail(f"{exc}\n(no network? set HERMES_SKIP_UPSTREAM_TESTS=1 to skip "
                    "the side-by-side tests)")


def load_hermes_state():
    """The ``hermes_state`` module of upstream 0.19.0, or skip the calling test."""
    if "hermes_state" in sys.modules:
        return sys.modules["hermes_state"]
    where = require_upstream_dir()
    saved = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="upstream-home-")
    if str(where) not in sys.path:
        # appended (upstream must never shadow our modules) and left there: upstream
        # imports some of its own modules lazily, inside methods
        sys.path.append(str(where))
    # ``tests/agent`` (no __init__.py, with ``tests/`` on sys.path) is a namespace
    # package named ``agent``: an earlier ``import agent…`` that failed (the store's
    # optional ``agent.agent_runtime_helpers``) leaves it in sys.modules, where it would
    # shadow upstream's own ``agent`` package. Upstream's must be the one.
    stale = sys.modules.get("agent")
    if stale is not None and getattr(stale, "__file__", None) is None:
        for name in [n for n in sys.modules if n == "agent" or n.startswith("agent.")]:
            del sys.modules[name]
    try:
        import hermes_state
    finally:
        if saved is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = saved
    logging.getLogger("hermes_state").setLevel(logging.ERROR)
    return hermes_state
