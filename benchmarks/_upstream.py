"""Upstream ``hermes_state`` (hermes-agent 0.19.0), fetched at run time, never vendored.

The wheel is fetched with ``pip download --no-deps hermes-agent==0.19.0`` into the
(git-ignored) results cache and unpacked there; ``HERMES_BENCH_UPSTREAM_DIR`` points at an
already unpacked copy instead. ``hermes_state`` reads ``HERMES_HOME`` while importing, so
the caller's scratch home is set first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from _common import CACHE

VERSION = "0.19.0"
ENV_DIR = "HERMES_BENCH_UPSTREAM_DIR"


def upstream_dir() -> Path:
    given = os.environ.get(ENV_DIR)
    if given:
        path = Path(given)
        if not (path / "hermes_state.py").is_file():
            raise SystemExit(f"{ENV_DIR}={given} holds no hermes_state.py")
        return path
    target = CACHE / f"hermes-agent-{VERSION}"
    if (target / "hermes_state.py").is_file():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"hermes_agent-{VERSION}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             f"hermes-agent=={VERSION}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(f"hermes_agent-{VERSION}-*.whl"))
    if not found:
        raise SystemExit(f"pip download produced no hermes-agent {VERSION} wheel in {wheels}")
    tmp = target.with_suffix(".partial")
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(tmp)
    tmp.rename(target)
    return target


def load(hermes_home: Path):
    """Import ``hermes_state`` from the unpacked wheel with ``HERMES_HOME`` pointed at a
    scratch folder (so nothing touches ``~/.hermes``)."""
    hermes_home.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(hermes_home)
    if "hermes_state" in sys.modules:
        return sys.modules["hermes_state"]
    where = str(upstream_dir())
    if where not in sys.path:
        sys.path.append(where)  # appended: upstream must never shadow our own modules
    import logging

    import hermes_state

    # Upstream warns on every SessionDB(); keep benchmark output readable.
    logging.getLogger("hermes_state").setLevel(logging.ERROR)
    return hermes_state


def child_prelude(hermes_home: Path) -> str:
    """Python source that a child process runs first to import upstream."""
    return (
        "import os, sys\n"
        f"os.environ['HERMES_HOME'] = {str(hermes_home)!r}\n"
        f"sys.path.append({str(upstream_dir())!r})\n"
        "import hermes_state\n"
    )
