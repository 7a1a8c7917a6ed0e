"""``hermes-store agent enable|disable|status`` on environments of the test's own (D15).

Each environment is a fresh venv standing in for an agent's (``support.agent.FakeEnv``):
a ``hermes-agent`` distribution of the version a test wants, an upstream-looking
``hermes_state.py`` beside it, this checkout importable or not. The switch on the real
hermes-agent 0.19.0 venv, with the agent's own code, is ``test_switch_agent.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from support.agent import (
    HOOK_FILE,
    UPSTREAM_STANDIN,
    flat,
    make_fake_env,
    store_cli,
    tree,
)

from hermes_store.agent import switch
from hermes_store import revisions

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    """A HERMES_HOME of the test's own for every command (status and disable read the
    agent's store)."""
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_STATE_DATABASE_URL", raising=False)
    return home


@pytest.fixture
def env(tmp_path):
    return make_fake_env(tmp_path / "venv")


def _ours(path: str) -> bool:
    return path.endswith(os.path.join("hermes_store", "agent", "hermes_state.py"))


def test_enable_twice_then_disable_leaves_the_environment_as_it_was(env):
    before = tree(env.root)
    assert env.imported_hermes_state().endswith(os.path.join("site-packages", "hermes_state.py"))

    first = store_cli("agent", "enable", "--python", env.python)
    assert first.returncode == 0, first.stderr
    assert "Enabled: hermes-agent 0.19.0" in flat(first.stdout)
    hook = env.site / HOOK_FILE
    assert hook.read_text() == switch.hook_text()
    stamp = hook.stat()
    assert set(tree(env.root)) - set(before) == {str(hook.relative_to(env.root))}, \
        "enable writes the hook and nothing else (no bytecode either)"
    assert _ours(env.imported_hermes_state())

    second = store_cli("agent", "enable", "--python", env.python)
    assert second.returncode == 0, second.stderr
    assert "Already enabled" in flat(second.stdout)
    again = hook.stat()
    assert (again.st_ino, again.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns), "not rewritten"

    off = store_cli("agent", "disable", "--python", env.python)
    assert off.returncode == 0, off.stderr
    assert f"Disabled: removed {hook}" in flat(off.stdout)
    assert tree(env.root) == before
    assert env.imported_hermes_state().endswith(os.path.join("site-packages", "hermes_state.py"))

    twice = store_cli("agent", "disable", "--python", env.python)
    assert twice.returncode == 0 and "Already disabled" in flat(twice.stdout)
    assert tree(env.root) == before


def test_the_hook_wins_over_any_sys_path_order_and_reaches_subprocesses(env, tmp_path):
    store_cli("agent", "enable", "--python", env.python, check=True)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "hermes_state.py").write_text("DECOY = True\n")
    # What hermes_cli/main.py does (site-packages first on sys.path), with a decoy on
    # PYTHONPATH too: neither is asked, the meta-path finder answers first.
    code = ("import sys, site; sys.path.insert(0, site.getsitepackages()[0]); "
            "import hermes_state, hermes_store.agent.hermes_state as real; "
            "print(hermes_state.__file__); print(hermes_state is real); "
            "print(hermes_state.__spec__.name)")
    run = env.run(code, {"PYTHONPATH": str(decoy)})
    assert run.returncode == 0, run.stderr
    path, same, spec_name = run.stdout.split()
    assert _ours(path) and same == "True", "one module under both names"
    assert spec_name == "hermes_store.agent.hermes_state", "the module keeps its own spec"

    child = env.run("import subprocess, sys; subprocess.run([sys.executable, '-c', "
                    "'import hermes_state; print(hermes_state.__file__)'], check=True)")
    assert child.returncode == 0 and _ours(child.stdout.strip()), child.stderr


def test_the_hook_imports_nothing_at_start_up(env):
    store_cli("agent", "enable", "--python", env.python, check=True)
    run = env.run("import sys; print(sorted(m for m in sys.modules if 'hermes' in m)); "
                  "print([getattr(f, '__name__', '') for f in sys.meta_path][0])")
    assert run.returncode == 0, run.stderr
    modules, first = run.stdout.splitlines()
    assert modules == "[]", "a process that never imports hermes_state loads none of hermes_store"
    assert first == "HermesStateHook", "first on sys.meta_path"


def test_one_process_can_opt_out(env):
    store_cli("agent", "enable", "--python", env.python, check=True)
    path = env.imported_hermes_state({"HERMES_STORE_AGENT_HOOK": "off"})
    assert path == str(env.site / "hermes_state.py")


def test_status_says_what_the_agent_will_use(env, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copyfile(FIXTURES / "upstream-0.19.0-v22.db", home / "state.db")
    (home / "state.db").chmod(0o600)
    off = store_cli("--json", "agent", "status", "--python", env.python,
                    env={"HERMES_HOME": str(home)})
    assert off.returncode == 0, off.stderr
    info = json.loads(off.stdout)
    assert info["enabled"] is False and info["agent_version"] == "0.19.0" and info["agent_tested"]
    assert info["hermes_state"] == str(env.site / "hermes_state.py")
    assert info["store"] == str(home / "state.db") and info["backend"] == "sqlite"
    assert info["exists"] is True and info["at_head"] is False and info["head"] == revisions.head()

    store_cli("agent", "enable", "--python", env.python, check=True)
    store_cli("--db", home / "state.db", "db", "upgrade", check=True)
    on = store_cli("agent", "status", "--python", env.python, env={"HERMES_HOME": str(home)})
    assert on.returncode == 0, on.stderr
    text = flat(on.stdout)
    assert f"switch on ({env.site / HOOK_FILE})" in text
    assert "hermes_state hermes_store:" in text
    assert f"store {home / 'state.db'} (sqlite;" in text and f"revision {revisions.head()} (head)" in text


def test_status_names_the_url_from_the_environment_or_hermes_home_env(env, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    url = "postgresql+psycopg://hermes:s3cret@db.invalid:5432/hermes"
    run = store_cli("--json", "agent", "status", "--python", env.python,
                    env={"HERMES_HOME": str(home), "HERMES_STATE_DATABASE_URL": url})
    info = json.loads(run.stdout)
    assert info["backend"] == "postgresql" and "s3cret" not in run.stdout
    assert info["source"] == "HERMES_STATE_DATABASE_URL (environment)"
    assert info["exists"] is None and info["error"], "an unreachable server is reported, not raised"

    # The agent loads $HERMES_HOME/.env over the shell's variables at start-up.
    (home / ".env").write_text(f"OTHER=1\nexport HERMES_STATE_DATABASE_URL='{url.replace('db.invalid', 'pg.invalid')}'\n")
    run = store_cli("--json", "agent", "status", "--python", env.python,
                    env={"HERMES_HOME": str(home), "HERMES_STATE_DATABASE_URL": url})
    info = json.loads(run.stdout)
    assert "pg.invalid" in info["store"] and info["source"] == f"HERMES_STATE_DATABASE_URL in {home / '.env'}"


@pytest.mark.postgres
def test_status_on_a_postgresql_store_at_head(env, tmp_path, pg_url):
    home = tmp_path / "home"
    home.mkdir()
    store_cli("--db", pg_url, "db", "upgrade", check=True)
    run = store_cli("--json", "agent", "status", "--python", env.python,
                    env={"HERMES_HOME": str(home), "HERMES_STATE_DATABASE_URL": pg_url})
    info = json.loads(run.stdout)
    assert info["backend"] == "postgresql" and info["at_head"] is True, run.stdout + run.stderr
    assert not (home / "state.db").exists()


def test_status_follows_the_agents_active_profile(env, tmp_path):
    root = tmp_path / "hermes-root"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "active_profile").write_text("coder\n")
    run = store_cli("--json", "agent", "status", "--python", env.python, env={"HERMES_HOME": str(root)})
    info = json.loads(run.stdout)
    assert info["store"] == str(root / "profiles" / "coder" / "state.db")
    assert info["hermes_home_source"] == "active profile 'coder'"


def test_without_hermes_agent_status_and_enable_refuse(tmp_path):
    env = make_fake_env(tmp_path / "venv", agent_version=None)
    before = tree(env.root)
    status = store_cli("agent", "status", "--python", env.python)
    assert status.returncode == switch.EXIT_NO_AGENT == 3
    assert "hermes-agent not installed" in flat(status.stdout)
    assert "hermes-agent is not installed in" in flat(status.stderr)
    enable = store_cli("agent", "enable", "--python", env.python)
    assert enable.returncode == 3 and "Name the agent's interpreter with --python" in flat(enable.stderr)
    assert tree(env.root) == before, "nothing written"


def test_enable_refuses_a_hermes_agent_version_it_was_not_tested_with(tmp_path):
    env = make_fake_env(tmp_path / "venv", agent_version="0.20.0")
    before = tree(env.root)
    enable = store_cli("agent", "enable", "--python", env.python)
    assert enable.returncode == switch.EXIT_AGENT_VERSION == 9
    message = flat(enable.stderr)
    assert "hermes-agent 0.20.0 is installed" in message and "tested with hermes-agent 0.19.0 only" in message
    assert "pip install hermes-agent==0.19.0" in message
    assert tree(env.root) == before
    status = store_cli("--json", "agent", "status", "--python", env.python)
    assert status.returncode == 9 and json.loads(status.stdout)["agent_tested"] is False


def test_enable_refuses_where_hermes_store_cannot_be_imported(tmp_path):
    env = make_fake_env(tmp_path / "venv", store=False)
    before = tree(env.root)
    enable = store_cli("agent", "enable", "--python", env.python)
    assert enable.returncode == switch.EXIT_NO_STORE == 10
    assert f"Install it there first: {env.python} -m pip install hermes_store" in flat(enable.stderr)
    assert tree(env.root) == before


def test_not_an_interpreter(tmp_path):
    script = tmp_path / "not-python"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    for target in (script, tmp_path / "missing"):
        run = store_cli("agent", "status", "--python", target)
        assert run.returncode == switch.EXIT_USAGE == 2, run.stderr
        assert f"--python {target}" in flat(run.stderr)


def test_disable_leaves_a_file_it_did_not_write(env):
    foreign = env.site / HOOK_FILE
    foreign.write_text("import os\n")
    run = store_cli("agent", "disable", "--python", env.python)
    assert run.returncode == switch.EXIT_ERROR and "was not written by hermes-store" in flat(run.stderr)
    assert foreign.read_text() == "import os\n"


def test_an_upgraded_hook_is_rewritten(env):
    store_cli("agent", "enable", "--python", env.python, check=True)
    hook = env.site / HOOK_FILE
    hook.write_text(switch.MARKER + " an older release\n" + switch.hook_text().splitlines()[-1] + "\n")
    status = json.loads(store_cli("--json", "agent", "status", "--python", env.python).stdout)
    assert status["enabled"] and status["hook_current"] is False
    run = store_cli("agent", "enable", "--python", env.python)
    assert run.returncode == 0 and "Updated" in run.stdout
    assert hook.read_text() == switch.hook_text()


def test_the_upstream_file_is_untouched_by_the_switch(env):
    store_cli("agent", "enable", "--python", env.python, check=True)
    store_cli("agent", "disable", "--python", env.python, check=True)
    assert (env.site / "hermes_state.py").read_text() == UPSTREAM_STANDIN
    assert not list(env.site.glob("*.tmp")) and not list(env.site.glob(".*.tmp"))


def test_an_agent_updated_to_an_untested_version_gets_its_own_module_back(env):
    store_cli("agent", "enable", "--python", env.python, check=True)
    metadata = env.site / "hermes_agent-0.19.0.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace("0.19.0", "0.21.0"))  # `hermes update`
    run = env.run("import hermes_state; print(hermes_state.__file__)")
    assert run.returncode == 0 and run.stdout.strip() == str(env.site / "hermes_state.py")
    assert "hermes-agent 0.21.0 is installed, but the switch was tested with 0.19.0" in flat(run.stderr)
    status = store_cli("--json", "agent", "status", "--python", env.python)
    info = json.loads(status.stdout)
    assert status.returncode == 9 and info["enabled"] is False and info["hook_files"]


def test_disable_leaves_the_agents_file_readable_by_its_own_module(env, _home):
    """A file at head that hermes_store wrote without the agent's module (here: the
    package's own SessionDB, as after `db copy` back from PostgreSQL) keeps its prompts
    only in system_prompts; hermes-agent 0.19.0 reads sessions.system_prompt alone."""
    from hermes_store import SessionDB

    with SessionDB(_home / "state.db") as db:
        db.create_session("s1", source="cli", system_prompt="You are Hermes. 你好。")
    inline = "SELECT system_prompt FROM sessions WHERE id = 's1'"
    conn = sqlite3.connect(_home / "state.db")
    assert conn.execute(inline).fetchone() == (None,)
    conn.close()
    store_cli("agent", "enable", "--python", env.python, check=True)
    off = store_cli("agent", "disable", "--python", env.python)
    assert off.returncode == 0, off.stderr
    assert "every system prompt is on its session row" in flat(off.stdout)
    assert "(1 row(s) refilled)" in flat(off.stdout)
    conn = sqlite3.connect(_home / "state.db")
    assert conn.execute(inline).fetchone() == ("You are Hermes. 你好。",)
    conn.close()


def test_disable_leaves_an_upstream_file_alone(env, _home):
    shutil.copyfile(FIXTURES / "upstream-0.19.0-v22.db", _home / "state.db")
    before = (_home / "state.db").read_bytes()
    off = store_cli("--json", "agent", "disable", "--python", env.python)
    assert off.returncode == 0 and json.loads(off.stdout)["prompts"] is None
    assert (_home / "state.db").read_bytes() == before


def test_a_relative_interpreter_path(env, monkeypatch):
    monkeypatch.chdir(env.root)
    run = store_cli("agent", "enable", "--python", "bin/python")
    assert run.returncode == 0, run.stderr
    assert (env.site / HOOK_FILE).is_file()
