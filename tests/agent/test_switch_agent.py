"""The switch on the suite's real hermes-agent 0.19.0 venv (D15).

``require_agent_venv`` builds the venv once and runs ``hermes-store agent enable`` on it;
the flows (``test_agent_flows.py``) run on it meanwhile, so these tests only read it.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.agent import HOOK_FILE, agent_env, require_agent_venv, store_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv():
    return require_agent_venv()


def test_status_on_the_agents_venv(venv, tmp_path):
    run = store_cli("--json", "agent", "status", "--python", venv.python,
                    env={"HERMES_HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    assert info["enabled"] and info["agent_version"] == "0.19.0" and info["agent_tested"]
    assert info["hook_files"] == [str(venv.site / HOOK_FILE)] and info["hook_current"]
    assert info["hermes_state_is_ours"]
    assert info["store"] == str(tmp_path / "state.db") and info["exists"] is False


def test_the_agents_own_entry_point_imports_hermes_store(venv, tmp_path):
    """``hermes_cli/main.py`` puts site-packages (where the agent's own hermes_state.py
    is) first on sys.path when it is imported; the meta-path finder still answers."""
    home = tmp_path / "home"
    home.mkdir()
    code = ("import sys, hermes_cli.main as m; import hermes_state; "
            "print(sys.path[0] == str(m.PROJECT_ROOT)); print(hermes_state.__file__)")
    run = subprocess.run([str(venv.python), "-c", code], capture_output=True, text=True,
                         env=agent_env(home), cwd=home, timeout=300)
    assert run.returncode == 0, run.stderr
    first, module = run.stdout.split()[-2:]
    assert first == "True"
    assert module.endswith(os.path.join("hermes_store", "agent", "hermes_state.py"))
    assert (venv.site / "hermes_state.py").is_file(), "the agent's own module stays installed"
