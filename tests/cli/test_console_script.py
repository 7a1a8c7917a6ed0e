"""The installed console script, as real subprocesses: one command of each group."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from support.cli import *  # noqa: F403


def _command() -> list[str]:
    script = shutil.which("hermes-store")
    return [script] if script else [sys.executable, "-m", "hermes_store"]


def _run(*args, env_extra=None, check=True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", **(env_extra or {})}
    env.pop("NO_COLOR", None)
    proc = subprocess.run(
        _command() + [str(a) for a in args], capture_output=True, text=True, env=env, timeout=120
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_the_console_script_is_installed():
    assert shutil.which("hermes-store"), "pip install -e . puts hermes-store on PATH"


@pytest.mark.sqlite_only("recover salvages a file (PostgreSQL: test_cli_postgres)")
def test_one_command_of_each_group(store, tmp_path):
    status = json.loads(_run("--db", store, "status", "--json").stdout)
    assert status["sessions"] == 6

    current = _run("--db", store, "db", "current")
    assert current.stdout.strip().endswith("(head)")

    listed = _run("--db", store, "sessions", "list", "--children")
    assert "fx_20260101_cli_docker" in listed.stdout
    assert "\x1b[" not in listed.stdout, "colour codes in piped output"
    assert_fits(listed.stdout)

    search = json.loads(_run("--db", store, "--json", "search", "docker").stdout)
    assert search["count"] >= 2

    doctor = _run("--db", store, "maintenance", "doctor", "--quick", check=False)
    assert doctor.returncode in (0, 1) and "integrity" in doctor.stdout
    assert_fits(doctor.stdout)

    recovered = tmp_path / "recovered.db"
    recover = _run("--db", store, "recover", "--output", recovered)
    assert "Complete: every row was copied." in flat(recover.stdout)
    assert recovered.exists()


def test_python_dash_m_on_the_default_store(hermes_home, head_templates):
    copy_db(head_templates["empty"], hermes_home / "state.db")
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_store", "status"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "HERMES_HOME": str(hermes_home), "COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stderr
    assert str(hermes_home / "state.db") in "".join(proc.stdout.split())
    assert "(head)" in proc.stdout


def test_errors_are_one_line_with_a_documented_exit_code(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    proc = _run("--db", junk, "sessions", "list", check=False)
    assert proc.returncode == 4
    assert "Traceback" not in flat(proc.stderr) and "recover" in flat(proc.stderr)
    assert proc.stderr.startswith("error: ")  # one message (wrapped at 80 columns)
