"""Every path a filesystem allows is a store at exactly that path (issue 30, part 2).

A SQLAlchemy URL or a SQLite ``file:`` URI built from a path as text reads ``?`` as the
start of a query, ``#`` as a fragment and ``%XX`` as an escape: ``SessionDB("/x/c?d/
state.db")`` once wrote the whole store to ``/x/c``. Each entry point below is given a
path made of such characters, and the oracle is independent of the store: the standard
library's ``sqlite3`` opens exactly that path in a child process (never in this one: a
second connection opened and closed here would drop the store's POSIX locks) and reads
the rows written; the file's mode is 0600; and after the store closed, nothing else
appeared beside it nor in the directory above (the migration lock exists only while a
migration holds it).

A leading ``~``: only ``~`` and ``~/`` mean the home directory; ``~weird/…`` is a literal
name relative to the working directory (``hermes_store.backends.sqlite.files.uri``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_store import SessionDB, migrate, transfer
from hermes_store.cli import app

REPO = Path(__file__).resolve().parents[3]

#: one directory name per character class (the file beside it is ``<name>.db``)
CASES = {
    "question": "c?d",
    "hash": "a#b",
    "percent": "100%3F%25x",
    "amp-eq-semi": "k&v=1;x",
    "space": "two words",
    "quotes": "it's \"q\"",
    "non-ascii": "données-日本",
    "tilde": "~weird",
    "combo": "a?b#c%20d &=;'\"é",
}
#: for the slow entry points (a real alembic process, a PostgreSQL round trip, the agent
#: switch): everything at once, and the literal leading ``~``
NASTY = ["combo", "tilde"]

#: the independent oracle: the interpreter's own sqlite3 in a fresh process
_ORACLE = r"""
import json, os, sqlite3, sys
path = sys.argv[1]
if not os.path.isfile(path):
    print(json.dumps(None)); raise SystemExit
conn = sqlite3.connect(path)
try:
    conn.execute("PRAGMA query_only=1")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    out = {
        "sessions": sorted(r[0] for r in conn.execute("SELECT id FROM sessions"))
        if "sessions" in tables else None,
        "messages": [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
        if "messages" in tables else None,
        "revision": conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        if "alembic_version" in tables else None,
        "integrity": conn.execute("PRAGMA quick_check").fetchone()[0],
    }
finally:
    conn.close()
print(json.dumps(out))
"""


def oracle(path: Path) -> dict | None:
    run = subprocess.run([sys.executable, "-I", "-c", _ORACLE, str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def listing(folder: Path) -> set[str]:
    return set(os.listdir(folder)) if folder.is_dir() else set()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


class Place:
    """Where a case's store goes: ``above/<name>/<name>.db``, and the text an entry point
    is given for it (relative to ``above``, the working directory, for a leading ``~``)."""

    def __init__(self, tmp_path: Path, name: str, monkeypatch) -> None:
        self.above = tmp_path / "above"
        self.above.mkdir()
        self.name = name
        self.parent = self.above / name
        self.path = self.parent / f"{name}.db"
        self.relative = name.startswith("~")
        monkeypatch.chdir(self.above)

    def given(self, path: Path | None = None) -> str:
        path = path or self.path
        return str(path.relative_to(self.above)) if self.relative else str(path)

    def given_dir(self) -> str:
        return self.name if self.relative else str(self.parent)

    def check_store(self, path: Path, *, sessions=None, messages=None, at_head=True,
                    companions=(), read_only=False) -> dict:
        """The oracle on ``path`` and the listings of its folder and the one above.

        ``read_only``: the store only read the file. SQLite gives a WAL file's reader its
        ``-wal``/``-shm`` even on a read-only connection, and such a connection cannot
        delete them when it closes (it may not take the write lock a last close's
        checkpoint needs): an empty ``-wal`` and the ``-shm`` of the file itself may stay.
        """
        found = oracle(path)
        assert found is not None, f"no file at {path}: {sorted(listing(path.parent))}, " \
                                  f"above: {sorted(listing(self.above))}"
        assert found["integrity"] == "ok"
        if sessions is not None:
            assert found["sessions"] == sessions
        if messages is not None:
            assert found["messages"] == messages
        if at_head:
            assert found["revision"] == migrate.head()
        assert mode(path) == 0o600, oct(mode(path))
        assert listing(self.above) == {self.name}, sorted(listing(self.above))
        allowed = {path.name, *companions}
        if read_only:
            allowed |= {f"{path.name}-shm"}
            if os.path.exists(f"{path}-wal"):
                assert os.path.getsize(f"{path}-wal") == 0
                allowed.add(f"{path.name}-wal")
        assert listing(path.parent) <= allowed, sorted(listing(path.parent))
        assert path.name in listing(path.parent)
        return found


@pytest.fixture
def place(request, tmp_path, monkeypatch) -> Place:
    return Place(tmp_path, CASES[request.param], monkeypatch)


def cases(names=None):
    names = list(CASES) if names is None else names
    return pytest.mark.parametrize("place", names, indirect=True, ids=names)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict[str, Path]:
    """A head store at a plain path holding one session and message, and its export."""
    folder = tmp_path_factory.mktemp("path-template")
    path = folder / "template.db"
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello")
    db.close()
    export = folder / "template.jsonl"
    with open(export, "w", encoding="utf-8") as fh:
        transfer.write_export(path, fh, "jsonl")
    return {"db": path, "export": export}


def install(template: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template["db"], path)
    path.chmod(0o600)
    return path


def cli(*args, env: dict | None = None):
    result = CliRunner().invoke(app, [str(a) for a in args],
                                env={"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(autouse=True)
def _no_url_env(monkeypatch):
    monkeypatch.delenv("HERMES_STATE_DATABASE_URL", raising=False)


# --------------------------------------------------------------------------- Python API

@cases()
def test_the_constructor_creates_the_store_at_exactly_its_path(place):
    db = SessionDB(place.given())
    try:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello ?#%20")
    finally:
        db.close()
    place.check_store(place.path, sessions=["s1"], messages=["hello ?#%20"])


@cases()
def test_a_read_only_open_reads_exactly_that_file(place, template):
    install(template, place.path)
    db = SessionDB(place.given(), read_only=True)
    try:
        assert db.get_session("s1")["source"] == "cli"
        assert [m["content"] for m in db.get_messages("s1")] == ["hello"]
    finally:
        db.close()
    place.check_store(place.path, sessions=["s1"], messages=["hello"], read_only=True)


@cases()
def test_migrate_upgrade_creates_the_file_at_exactly_its_path(place):
    migrate.upgrade(place.given())
    place.check_store(place.path, sessions=[], messages=[])
    assert migrate.current(place.given()) == migrate.head()


@cases(NASTY)
def test_alembic_x_db_upgrades_exactly_that_file(place):
    alembic = Path(sys.executable).with_name("alembic")
    run = subprocess.run([str(alembic), "-c", str(REPO / "alembic.ini"),
                          "-x", f"db={place.given()}", "upgrade", "head"],
                         cwd=place.above, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HERMES_HOME": str(place.above / "unused-home")})
    assert run.returncode == 0, run.stderr
    place.check_store(place.path, sessions=[], messages=[])


# --------------------------------------------------------------------------- the CLI

@cases()
def test_the_cli_db_option_writes_exactly_that_file(place, template):
    cli("--db", place.given(), "db", "upgrade")
    cli("--db", place.given(), "sessions", "import", template["export"])
    shown = json.loads(cli("--db", place.given(), "--json", "status").stdout)
    assert shown["path"] == str(place.path) and shown["at_head"] is True
    assert shown["journal_mode"] == "wal", shown
    place.check_store(place.path, sessions=["s1"], messages=["hello"])


@cases()
def test_hermes_home_names_the_default_store(place, template, monkeypatch):
    home = {"HERMES_HOME": place.given_dir()}
    cli("db", "upgrade", env=home)
    cli("sessions", "import", template["export"], env=home)
    place.check_store(place.parent / "state.db", sessions=["s1"], messages=["hello"])


@cases()
def test_db_backup_reads_and_writes_exactly_those_files(place, template):
    install(template, place.path)
    dest = place.parent / f"{place.name} backup.db"
    cli("--db", place.given(), "db", "backup", place.given(dest))
    place.check_store(dest, sessions=["s1"], messages=["hello"],
                      companions=[place.path.name, f"{place.path.name}-wal",
                                  f"{place.path.name}-shm"])
    place.check_store(place.path, sessions=["s1"], messages=["hello"], companions=[dest.name],
                      read_only=True)


@cases()
def test_recover_output_is_exactly_that_file(place, template):
    install(template, place.path)
    out = place.parent / f"{place.name} recovered.db"
    cli("--db", place.given(), "recover", "--output", place.given(out))
    place.check_store(out, sessions=["s1"], messages=["hello"], companions=[place.path.name])
    place.check_store(place.path, sessions=["s1"], messages=["hello"], companions=[out.name])


@cases(NASTY)
def test_db_copy_both_directions_between_sqlite_and_postgresql(place, template, pg_empty_url):
    install(template, place.path)
    cli("db", "copy", place.given(), pg_empty_url)
    back = place.parent / f"{place.name} back.db"
    cli("db", "copy", pg_empty_url, place.given(back))
    source_sidecars = [f"{place.path.name}-wal", f"{place.path.name}-shm"]
    place.check_store(back, sessions=["s1"], messages=["hello"],
                      companions=[place.path.name, *source_sidecars])
    place.check_store(place.path, sessions=["s1"], messages=["hello"], companions=[back.name],
                      read_only=True)


# --------------------------------------------------------------------------- the agent switch

@pytest.fixture(scope="module")
def fake_agent(tmp_path_factory):
    from support.agent import make_fake_env
    return make_fake_env(tmp_path_factory.mktemp("agent-env") / "venv")


@pytest.mark.slow
@cases(NASTY)
def test_agent_status_and_disable_find_the_store_in_an_odd_hermes_home(place, template,
                                                                     fake_agent):
    store = install(template, place.parent / "state.db")
    env = {**os.environ, "HERMES_HOME": place.given_dir(), "COLUMNS": "200", "NO_COLOR": "1"}

    def store_cli(*args):
        run = subprocess.run([sys.executable, "-m", "hermes_store", *map(str, args)],
                             capture_output=True, text=True, env=env, cwd=place.above,
                             timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        return run

    info = json.loads(store_cli("--json", "agent", "status", "--python",
                                fake_agent.python).stdout)
    assert info["store"] == str(store) and info["backend"] == "sqlite", info
    assert info["exists"] is True and info["at_head"] is True, info
    store_cli("agent", "disable", "--python", fake_agent.python)
    place.check_store(store, sessions=["s1"], messages=["hello"])


def test_a_sqlite_url_is_url_text_and_a_query_in_it_is_refused(tmp_path):
    from hermes_store.errors import DatabaseURLError
    from hermes_store.location import resolve

    odd = tmp_path / "c?d #%" / "state.db"
    assert resolve(odd).path == odd
    assert resolve("sqlite:///" + str(tmp_path / "c%3Fd #%" / "state.db")).path == odd
    with pytest.raises(DatabaseURLError, match="%3F"):
        resolve("sqlite:///" + str(odd))  # would have been the file tmp_path/c
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- the home rule

def test_only_a_bare_tilde_or_tilde_slash_means_home(tmp_path, monkeypatch):
    from hermes_store.backends.sqlite.files.uri import expand_home

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert expand_home("~") == tmp_path / "home"
    assert expand_home("~/x/state.db") == tmp_path / "home" / "x" / "state.db"
    for literal in ("~weird/state.db", "~nosuchuser/x", "~root/state.db", "a/~/b", "~~"):
        assert expand_home(literal) == Path(literal)


def test_tilde_slash_reaches_the_store_in_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    db = SessionDB("~/odd ?#/state.db")
    try:
        db.create_session("s1", "cli")
    finally:
        db.close()
    assert oracle(tmp_path / "home" / "odd ?#" / "state.db")["sessions"] == ["s1"]
