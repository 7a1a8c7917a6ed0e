"""The layout D1 draws (``migrations/`` at the top) and a wheel that still carries it.

``migrations/`` installs as the subpackage ``hermes_store.migrations`` (pyproject's
``package-dir``). The slow test below installs the package the way a user does — a
regular, non-editable ``pip install`` into a fresh venv — and migrates from another
directory, so a packaging change that drops the revisions cannot pass unnoticed.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store import migrate

ROOT = Path(__file__).resolve().parents[2]


def test_top_level_layout_is_the_design_cards():
    for name in ("pyproject.toml", "alembic.ini", "migrations", "hermes_store", "tests", "docs"):
        assert (ROOT / name).exists(), name
    revisions = sorted(p.name.split("_")[0] for p in (ROOT / "migrations" / "versions").glob("[0-9]*.py"))
    assert revisions == [f"{n:04d}" for n in range(1, 31)] + ["0030a", "0030b"]
    assert not (ROOT / "hermes_store" / "migrations").exists(), "one copy of the revisions only"


def test_the_package_runs_the_top_level_scripts_in_a_checkout():
    assert migrate.MIGRATIONS_DIR == (ROOT / "migrations").resolve()


def _alembic_revision(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_regular_pip_install_carries_and_runs_the_migrations(tmp_path):
    # Build from a copy of the sources: an in-tree build would write build/ into the
    # checkout that the other tests import from.
    src = tmp_path / "src"
    shutil.copytree(
        ROOT, src,
        ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "build", "dist",
                                      "__pycache__", ".pytest_cache", ".hypothesis",
                                      "results", "tests"),
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(src)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stderr[-4000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HERMES_HOME"] = str(tmp_path / "home")
    probe = subprocess.run(
        [str(python), "-c",
         "import hermes_store, hermes_store.migrate as m; m.upgrade('x.db'); "
         "m.upgrade_telegram_topics('x.db'); "
         "print(hermes_store.__file__); print(m.MIGRATIONS_DIR)"],
        cwd=elsewhere, env=env, capture_output=True, text=True,
    )
    assert probe.returncode == 0, probe.stderr
    package_file, migrations_dir = probe.stdout.split()
    assert Path(package_file).resolve().is_relative_to(venv.resolve())
    assert Path(migrations_dir).resolve().is_relative_to(venv.resolve())
    assert _alembic_revision(elsewhere / "x.db") == migrate.head()
    # the opt-in Telegram topic branch ships too (its own scripts and version table)
    conn = sqlite3.connect(f"file:{elsewhere / 'x.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT version_num FROM alembic_version_telegram_topics").fetchone() == ("t002",)
    finally:
        conn.close()

    cli = subprocess.run(
        [str(venv / "bin" / "hermes-store"), "--db", "y.db", "db", "upgrade"],
        cwd=elsewhere, env=env, capture_output=True, text=True,
    )
    assert cli.returncode == 0, cli.stderr
    assert _alembic_revision(elsewhere / "y.db") == migrate.head()
