"""Which database (D11): a path or a URL, resolved once; clear errors that mask the password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_store import errors, location, migrate
from hermes_store.location import resolve

SECRET = "s3cr3t-pw"


# --------------------------------------------------------------------------- resolving


def test_a_path_is_a_sqlite_file_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in ("state.db", Path("state.db"), str(tmp_path / "state.db")):
        target = resolve(given)
        assert target.is_sqlite and target.path == tmp_path / "state.db"
        assert target.url.drivername == "sqlite+pysqlite"


def test_a_sqlite_url_is_its_file(tmp_path):
    assert resolve(f"sqlite:///{tmp_path}/x.db").path == tmp_path / "x.db"
    assert resolve(sa.engine.make_url(f"sqlite:///{tmp_path}/x.db")).path == tmp_path / "x.db"


@pytest.mark.parametrize("given", [
    f"postgresql+psycopg://hermes:{SECRET}@db.example:5433/state",
    f"postgresql://hermes:{SECRET}@db.example:5433/state",
    f"postgres://hermes:{SECRET}@db.example:5433/state",
])
def test_postgresql_urls_all_mean_psycopg_and_never_show_the_password(given):
    target = resolve(given)
    assert target.is_postgresql and target.path is None
    assert target.url.drivername == "postgresql+psycopg"
    assert target.url.password == SECRET  # the real one, to connect with
    for shown in (str(target), repr(target), target.display):
        assert SECRET not in shown
        assert "hermes:***@db.example:5433/state" in shown


def test_nothing_given_means_the_env_url_then_the_default_file(hermes_home, monkeypatch):
    monkeypatch.delenv(location.URL_ENV, raising=False)
    assert resolve(None).path == hermes_home / "state.db"
    assert resolve(None).source == "default"
    monkeypatch.setenv(location.URL_ENV, "   ")
    assert resolve(None).path == hermes_home / "state.db"
    monkeypatch.setenv(location.URL_ENV, f"postgresql://u:{SECRET}@h/db")
    target = resolve(None)
    assert target.is_postgresql and target.source == location.URL_ENV
    # an explicit path still wins over the variable
    assert resolve(hermes_home / "other.db").path == hermes_home / "other.db"


def test_the_env_variable_must_hold_a_url(hermes_home, monkeypatch):
    monkeypatch.setenv(location.URL_ENV, str(hermes_home / "state.db"))
    with pytest.raises(errors.DatabaseURLError, match=f"{location.URL_ENV}=.* is not a URL"):
        resolve(None)


# --------------------------------------------------------------------------- bad URLs


def _error(given) -> errors.HermesStoreError:
    with pytest.raises(errors.HermesStoreError) as info:
        resolve(given)
    assert SECRET not in str(info.value)
    return info.value


def test_a_malformed_url_is_an_error_that_masks_the_password():
    err = _error(f"postgresql://u:{SECRET}@host:notaport/db")
    assert isinstance(err, errors.DatabaseURLError) and isinstance(err, ValueError)
    assert "u:***@host:notaport/db" in str(err) and "postgresql+psycopg://" in str(err)


def test_an_unsupported_backend_or_driver_says_what_is_supported():
    err = _error(f"mysql://u:{SECRET}@h/db")
    assert isinstance(err, errors.UnsupportedBackendError)
    assert "'mysql' is not supported" in str(err) and "postgresql+psycopg://" in str(err)
    err = _error(f"postgresql+psycopg2://u:{SECRET}@h/db")
    assert isinstance(err, errors.UnsupportedBackendError)
    assert "psycopg2" in str(err) and "postgresql+psycopg://" in str(err)


def test_a_url_without_a_database_is_refused():
    assert "names no database" in str(_error(f"postgresql://u:{SECRET}@h/"))
    assert "names no database file" in str(_error("sqlite://"))
    assert "names no database file" in str(_error("sqlite:///:memory:"))


def test_a_url_is_never_taken_for_a_path(tmp_path, monkeypatch):
    # Once, `--db postgresql+psycopg://…` created a directory "postgresql+psycopg:".
    monkeypatch.chdir(tmp_path)
    url = f"postgresql+psycopg://u:{SECRET}@/db?host={tmp_path}/no-server&connect_timeout=2"
    with pytest.raises(errors.ServerUnreachableError) as info:
        migrate.upgrade(url)
    assert SECRET not in str(info.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(errors.UnsupportedBackendError, match="not a SQLite file"):
        migrate.inspect_file(url)
    assert list(tmp_path.iterdir()) == []


def test_a_url_that_became_a_path_is_refused_not_created(tmp_path, monkeypatch):
    # What a CLI option typed as a path makes of a URL: the "//" collapses.
    monkeypatch.chdir(tmp_path)
    mangled = Path(f"postgresql+psycopg://u:{SECRET}@/db?host=/x")
    assert str(mangled).startswith("postgresql+psycopg:/u:")
    with pytest.raises(errors.DatabaseURLError, match="looks like a database URL") as info:
        migrate.upgrade(mangled)
    assert SECRET not in str(info.value)
    # The CLI: a URL is a database to reach (here none: exit 8), its mangled form is
    # refused (exit 2); neither becomes a directory (every command: tests/cli).
    for given, code, says in (
        (f"postgresql+psycopg://u:{SECRET}@/db?host={tmp_path}/no-server", 8,
         "cannot reach the PostgreSQL server"),
        (f"postgresql+psycopg:/u:{SECRET}@/db", 2, "looks like a database URL"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "hermes_store", "--db", given, "db", "upgrade"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env={**os.environ, "HERMES_HOME": str(tmp_path / "home")})
        assert result.returncode == code, result.stderr
        assert says in " ".join(result.stderr.split())
        assert SECRET not in result.stdout + result.stderr
        assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- driver


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_without_psycopg_a_postgresql_url_names_the_extra_to_install():
    code = (
        "import sys; sys.modules['psycopg'] = None  # what a default install looks like\n"
        "from hermes_store import migrate, errors\n"
        f"try:\n    migrate.current('postgresql+psycopg://u:{SECRET}@localhost/db')\n"
        "except errors.DriverMissingError as exc:\n    print('ERR', exc)\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ERR ")
    assert "pip install 'hermes_store[postgres]'" in result.stdout
    assert "u:***@localhost/db" in result.stdout and SECRET not in result.stdout


def test_a_default_install_never_imports_the_driver(tmp_path):
    code = (
        "import sys\n"
        "from hermes_store import SessionDB, migrate\n"
        f"db = SessionDB({str(tmp_path / 'state.db')!r}); db.create_session('s', 'cli'); db.close()\n"
        f"assert migrate.current({str(tmp_path / 'state.db')!r}) == migrate.head()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('psycopg',"
        " 'hermes_store.backends.postgresql'))))\n"
    )
    result = _python(code, {"HERMES_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------- server errors


def test_an_unreachable_server_is_a_clear_error(tmp_path):
    for url in (f"postgresql://u:{SECRET}@/db?host={tmp_path}",              # no socket there
                f"postgresql://u:{SECRET}@127.0.0.1:1/db?connect_timeout=5"):  # refused
        with pytest.raises(errors.ServerUnreachableError) as info:
            migrate.current(url)
        text = str(info.value)
        assert "cannot reach the PostgreSQL server" in text and "u:***@" in text
        assert SECRET not in text


def test_a_missing_database_says_how_to_create_it(pg_server):
    url = pg_server.url("no_such_database")
    with pytest.raises(errors.StoreNotFoundError, match="does not exist.*createdb"):
        migrate.current(url)


@pytest.fixture(scope="session")
def password_role(pg_server):
    """A role that must log in with a password (the server trusts every other role)."""
    pg_server.admin(f"CREATE ROLE hermes_pw LOGIN SUPERUSER PASSWORD '{SECRET}'")
    hba = Path(pg_server.data, "pg_hba.conf")
    original = hba.read_text()
    hba.write_text("local all hermes_pw scram-sha-256\n" + original)
    pg_server.admin("SELECT pg_reload_conf()")
    yield "hermes_pw"


def test_a_wrong_password_is_an_access_error_that_masks_it(pg_server, pg_empty_url, password_role):
    url = sa.engine.make_url(pg_empty_url).set(username=password_role, password="wrong-pw")
    with pytest.raises(errors.DatabaseAccessError, match="refused the login") as info:
        migrate.current(url)
    assert "wrong-pw" not in str(info.value)
    good = url.set(password=SECRET)
    assert migrate.current(good) is None  # the right password: an empty database


def test_a_database_below_head_names_the_command_to_run(pg_empty_url):
    from hermes_store.backends.postgresql.migrate import commands as migrate_pg

    url = sa.engine.make_url(pg_empty_url).set(password=SECRET)
    target = resolve(url)
    with pytest.raises(errors.SchemaOutOfDateError) as info:
        migrate_pg.ensure_schema(target, auto_upgrade=False)
    text = str(info.value)
    assert "has no schema yet, head is 0030" in text
    assert "hermes-store --db 'postgresql+psycopg://postgres:***@" in text
    assert "alembic -x db=" in text and SECRET not in text
    with pytest.raises(errors.SchemaOutOfDateError, match="read-only"):
        migrate_pg.ensure_schema(target, read_only=True)
    assert migrate.current(url) is None  # nothing was created
    migrate_pg.ensure_schema(target)  # auto_upgrade: created at head
    assert migrate.current(url) == migrate.head()
