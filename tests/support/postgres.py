"""A throwaway PostgreSQL server for the test session, and one fresh database per test.

Fixtures (imported into ``tests/conftest.py``, so every test module can ask for them):

``pg_server``     (session) the running server: ``url(db)``, ``admin(sql)``,
                  ``create_database(name, template=…)``, ``drop_database(name)``.
``pg_url``        a fresh database holding the head schema, as a SQLAlchemy URL string;
                  dropped after the test.
``pg_empty_url``  a fresh *empty* database (for migration tests); dropped after the test.

How it works. Each pytest process (each xdist worker) runs ``initdb`` into a private
temporary directory and starts the server with ``pg_ctl`` on a Unix socket in that same
directory (``listen_addresses=''``: no TCP port, so parallel workers and other servers on
the machine can never collide). Durability is switched off (``fsync=off``…): the data is
thrown away. The head schema is built once per server into the template database
``hermes_template`` by the real ``hermes_store.migrate.upgrade(url)``; each test's database
is ``CREATE DATABASE … TEMPLATE hermes_template``, a file copy that takes milliseconds.

The server is stopped at the end of the session, and also when the process exits
abnormally: an ``atexit`` hook, and a small watchdog process that waits for this
process's end on a pipe (it sees EOF even after SIGKILL) and then stops the server and
removes the directory. Nothing is left running.

Running as root (CI runs ``.ci/run`` as root): PostgreSQL refuses to run as root, so
``initdb`` and ``pg_ctl`` run as the user ``postgres`` through ``runuser -u postgres --``
(the directory is handed to that user); as any other user they run as that user.

Why not pytest-postgresql (evaluated, 10.0.0): its process fixture runs ``pg_ctl``
directly as the current user, and as root ``pg_ctl`` stops at once with "cannot be run as
root"; the plugin has no way to run the server as another user (tried here: every test
errors at set-up). Its template-database janitor is the same idea as ``pg_url`` below,
so the little that is needed is written here instead.

Binaries: ``$HERMES_TEST_PG_BINDIR``, else ``initdb`` on ``PATH``, else the newest
``/usr/lib/postgresql/*/bin`` (Debian/Ubuntu) or another usual place. When none is found
the PostgreSQL tests FAIL with a message that says how to install the server
(``scripts/test.sh`` installs it when it can). A developer without PostgreSQL can opt out
explicitly with ``HERMES_TEST_SKIP_POSTGRES=1``: the PostgreSQL tests are then skipped,
and the skip reason says so. CI never sets it.
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

#: set to 1 to skip (not fail) the PostgreSQL tests on a machine without the server
OPT_OUT_ENV = "HERMES_TEST_SKIP_POSTGRES"
#: a directory holding initdb and pg_ctl, to pick one installation explicitly
BINDIR_ENV = "HERMES_TEST_PG_BINDIR"
#: the database every test database is copied from (holds the head schema)
TEMPLATE_DB = "hermes_template"
SUPERUSER = "postgres"
INSTALL_HINT = (
    "install the PostgreSQL server binaries (Debian/Ubuntu: `apt-get install -y postgresql "
    "postgresql-contrib`; `bash scripts/test.sh` does it when run as root), or point "
    f"{BINDIR_ENV} at the directory holding initdb and pg_ctl. To skip the PostgreSQL tests "
    f"on purpose on a machine without it, set {OPT_OUT_ENV}=1 (CI never does)."
)

_SEARCH_GLOBS = (
    "/usr/lib/postgresql/*/bin",        # Debian, Ubuntu
    "/usr/pgsql-*/bin",                 # RHEL, Fedora (PGDG)
    "/usr/local/pgsql/bin",             # built from source
    "/opt/homebrew/opt/postgresql@*/bin",
    "/usr/local/opt/postgresql@*/bin",
)


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    given = os.environ.get(BINDIR_ENV, "").strip()
    if given:
        return Path(given) if (Path(given) / "initdb").exists() else None
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    candidates = [Path(p) for pattern in _SEARCH_GLOBS for p in glob.glob(pattern)]
    candidates = [p for p in candidates if (p / "initdb").exists() and (p / "pg_ctl").exists()]

    def version(p: Path) -> tuple:
        digits = "".join(ch if ch.isdigit() else " " for ch in str(p)).split()
        return tuple(int(d) for d in digits)

    return max(candidates, key=version) if candidates else None


# The watchdog: blocks reading its stdin (a pipe whose other end only this process
# holds); EOF means this process ended, however it ended. Then it stops the server (if
# still running) and removes the directory.
_WATCHDOG = textwrap.dedent("""
    import os, shutil, subprocess, sys
    run_as, pg_ctl, data, base = sys.argv[1:5]
    sys.stdin.buffer.read()
    if os.path.exists(os.path.join(data, "postmaster.pid")):
        cmd = [pg_ctl, "stop", "-D", data, "-m", "immediate", "-w"]
        if run_as:
            cmd = ["runuser", "-u", run_as, "--"] + cmd
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(base, ignore_errors=True)
""")


#: the test server's settings: durability off, the data is thrown away
THROWAWAY_SETTINGS = {
    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
    "max_connections": "200", "shared_buffers": "32MB",
}


class PostgresServer:
    """One private PostgreSQL server in a temporary directory (see module docstring).

    ``settings`` replaces ``THROWAWAY_SETTINGS`` (the benchmarks run a durable server);
    ``tcp_port`` makes it listen on 127.0.0.1 at that port as well, and ``url()`` name
    it there (a server reached over TCP, as a deployment's is)."""

    def __init__(self, bindir: Path, *, settings: dict[str, str] | None = None,
                 tcp_port: int | None = None) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="hermes-pg-"))  # short: socket paths are limited
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        # the socket file's name (the directory is ours alone), or the TCP port
        self.port = tcp_port or 5432
        self.tcp = tcp_port is not None
        self.settings = dict(THROWAWAY_SETTINGS if settings is None else settings)
        self.run_as = SUPERUSER if os.geteuid() == 0 else None
        self._watchdog: subprocess.Popen | None = None
        self._names = itertools.count(1)
        self.running = False

    # ------------------------------------------------------------------ processes

    def _command(self, *args: str) -> list[str]:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        return prefix + list(args)

    def _run(self, *args: str) -> None:
        result = subprocess.run(self._command(*args), capture_output=True, text=True)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:2])} failed (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}{log}"
            )

    def start(self) -> None:
        if self.run_as:
            shutil.chown(self.base, user=self.run_as)
        os.chmod(self.base, 0o700)
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, self.run_as or "",
             str(self.bindir / "pg_ctl"), str(self.data), str(self.base)],
            stdin=subprocess.PIPE, start_new_session=True,
        )
        atexit.register(self.stop)
        initdb = [str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
                  "-A", "trust", "-E", "UTF8", "--no-sync"]
        try:
            # C.UTF-8: code-point order (as SQLite's BINARY) with Unicode-aware case folding
            self._run(*initdb, "--locale=C.UTF-8")
        except RuntimeError:
            shutil.rmtree(self.data, ignore_errors=True)
            self._run(*initdb, "--locale=C")
        self._pg_ctl("start")
        self.running = True

    def _options(self) -> str:
        listen = "127.0.0.1" if self.tcp else ""
        return " ".join([
            f"-c listen_addresses='{listen}'",
            f"-c unix_socket_directories='{self.base}'",
            f"-p {self.port}",
            *(f"-c {name}={value}" for name, value in self.settings.items()),
        ])

    def _pg_ctl(self, action: str, mode: str | None = None) -> None:
        args = [str(self.bindir / "pg_ctl"), action, "-D", str(self.data), "-w", "-t", "60"]
        if mode is not None:
            args += ["-m", mode]
        if action != "stop":
            args += ["-l", str(self.log), "-o", self._options()]
        self._run(*args)

    # ------------------------------------------------------------------ faults

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart``: ``fast`` ends every session (SQLSTATE 57P01) and shuts
        down cleanly, ``immediate`` kills the server's processes (crash recovery at
        start). Returns once the server accepts connections again."""
        self._pg_ctl("restart", mode)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server (its directory stays) until :meth:`resume`."""
        self._pg_ctl("stop", mode)

    def resume(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stop the server and remove its directory (idempotent)."""
        if self.running:
            self.running = False
            try:
                if (self.data / "postmaster.pid").exists():  # not left halted by a test
                    self._pg_ctl("stop", "immediate")
            except RuntimeError as exc:  # the watchdog still tries
                print(f"warning: stopping the test PostgreSQL failed: {exc}", file=sys.stderr)
        if self._watchdog is not None:
            self._watchdog.stdin.close()
            self._watchdog.wait(timeout=60)
            self._watchdog = None
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ databases

    def url(self, database: str = "postgres", *, driver: str = "psycopg") -> str:
        if self.tcp:
            return f"postgresql+{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"
        return (f"postgresql+{driver}://{SUPERUSER}@/{database}"
                f"?host={self.base}&port={self.port}")

    def admin(self, sql: str) -> list[tuple]:
        """Run one statement on the maintenance database, in autocommit."""
        import psycopg

        with psycopg.connect(host=str(self.base), port=self.port, user=SUPERUSER,
                             dbname="postgres", autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def new_name(self, prefix: str = "t") -> str:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        return f"{prefix}_{worker}_{next(self._names)}"

    def create_database(self, name: str, *, template: str = "template0") -> str:
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def connect(self, database: str):
        """A psycopg connection (autocommit) to one database."""
        import psycopg

        return psycopg.connect(host=str(self.base), port=self.port, user=SUPERUSER,
                               dbname=database, autocommit=True)


# A database per test: CREATE DATABASE … TEMPLATE copies the whole catalog (~8 MB) and
# costs 0.3-0.5 s here. So a test's database is recycled for the next test when the test
# left its *schema* exactly as the template's (the fingerprint below: tables, columns,
# indexes, constraints, defaults, triggers, functions, extensions, schemas, settings, and
# the two version tables' rows): its rows are deleted and its sequences restarted,
# which is what a fresh copy holds. Any other database is dropped.
_FINGERPRINT = """
SELECT md5(string_agg(item, E'\n' ORDER BY item)) FROM (
    SELECT 'ns ' || nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg_%'
    UNION ALL SELECT 'ext ' || extname || ' ' || extversion FROM pg_extension
    UNION ALL SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.reloptions::text, '')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
    UNION ALL SELECT 'col ' || a.attrelid::regclass || '.' || a.attname || ' ' || a.attnum || ' ' || format_type(a.atttypid, a.atttypmod)
               || ' ' || a.attnotnull || ' ' || a.attgenerated::text || ' '
               || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL SELECT 'idx ' || pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
    UNION ALL SELECT 'con ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace
    UNION ALL SELECT 'trg ' || pg_get_triggerdef(oid) || ' ' || tgenabled::text FROM pg_trigger
        WHERE NOT tgisinternal
    UNION ALL SELECT 'fn ' || p.oid::regprocedure || ' ' || md5(p.prosrc) FROM pg_proc p
        WHERE p.pronamespace = 'public'::regnamespace
    UNION ALL SELECT 'set ' || array_to_string(setconfig, ',') FROM pg_db_role_setting
        WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL SELECT 'version ' || version FROM schema_version
    UNION ALL SELECT 'alembic ' || version_num FROM alembic_version
) AS items(item)
"""
_KEEP_ROWS = ("schema_version", "alembic_version")


def _fingerprint(conn) -> str | None:
    try:
        return conn.execute(_FINGERPRINT).fetchone()[0]
    except Exception:  # e.g. a version table was dropped: not reusable
        return None


def _recycle(server: PostgresServer, name: str, template_fingerprint: str) -> bool:
    """Reset ``name`` to the template's state if its schema is untouched; else False.

    Every other session on it is ended first (a test's pool, a connection it left open:
    their locks go with them). The rows go by DELETE, not TRUNCATE: a test leaves a
    handful of rows, and TRUNCATE gives every table and index a new file (three times
    the cost here, ~30 of ~75 ms per test); with ``session_replication_role = replica``
    no trigger or foreign-key check runs, so the order does not matter. Sequences start
    again at 1, as in a fresh copy.
    """
    with server.connect(name) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        fingerprint = _fingerprint(conn)
        if fingerprint is None or fingerprint != template_fingerprint:
            return False
        tables = [t for (t,) in conn.execute(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'"
        ) if t not in _KEEP_ROWS]
        conn.execute("SET session_replication_role = replica")
        for table in tables:
            conn.execute(f"DELETE FROM {table}")
        conn.execute(
            "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, 1, false) "
            "FROM pg_sequences WHERE schemaname = 'public'"
        )
        conn.execute("SELECT pg_advisory_unlock_all()")
    return True


# --------------------------------------------------------------------------- fixtures

_server: PostgresServer | None = None
_server_error: str | None = None


def _opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower() not in ("", "0", "false", "no")


def running_server() -> PostgresServer:
    """The session's server, started on first use (fails or skips clearly without one)."""
    global _server, _server_error
    if _opted_out():
        pytest.skip(f"PostgreSQL tests skipped on request ({OPT_OUT_ENV} is set)")
    if _server_error is not None:
        pytest.fail(_server_error, pytrace=False)
    if _server is None:
        bindir = find_bindir()
        if bindir is None:
            _server_error = f"PostgreSQL server binaries (initdb, pg_ctl) not found: {INSTALL_HINT}"
            pytest.fail(_server_error, pytrace=False)
        try:
            import psycopg  # noqa: F401
        except ImportError:
            _server_error = ("psycopg is not installed: install the test extras "
                             "(pip install -e '.[test]'), which include hermes_store[postgres]")
            pytest.fail(_server_error, pytrace=False)
        server = PostgresServer(bindir)
        try:
            server.start()
        except Exception as exc:
            server.stop()
            _server_error = f"could not start the test PostgreSQL server ({bindir}): {exc}"
            pytest.fail(_server_error, pytrace=False)
        _server = server
    return _server


def stop_server() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None


@pytest.fixture(scope="session")
def pg_server():
    yield running_server()
    stop_server()


class Template:
    """The head template and the databases free for reuse (see ``_FINGERPRINT``)."""

    def __init__(self, server: PostgresServer) -> None:
        from hermes_store import migrate

        self.server = server
        self.name = TEMPLATE_DB
        url = server.create_database(self.name)
        migrate.upgrade(url)
        with server.connect(self.name) as conn:
            self.fingerprint = conn.execute(_FINGERPRINT).fetchone()[0]
        server.admin(f'ALTER DATABASE "{self.name}" IS_TEMPLATE true')
        self.free: list[str] = []

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = self.server.new_name()
        self.server.create_database(name, template=self.name)
        return name

    def give_back(self, name: str) -> None:
        if _recycle(self.server, name, self.fingerprint):
            self.free.append(name)
        else:
            self.server.drop_database(name)


@pytest.fixture(scope="session")
def pg_template(pg_server) -> Template:
    """The template database holding the head schema, built once per server the way
    users build theirs: ``hermes_store.migrate.upgrade(url)``."""
    return Template(pg_server)


@pytest.fixture
def pg_url(pg_server, pg_template):
    """A database at head, as fresh as a new copy of the template (a recycled one when
    the previous test left the schema alone), given back afterwards."""
    name = pg_template.take()
    yield pg_server.url(name)
    pg_template.give_back(name)


@pytest.fixture
def pg_empty_url(pg_server):
    """A fresh empty database, dropped afterwards."""
    name = pg_server.new_name("e")
    url = pg_server.create_database(name)
    yield url
    pg_server.drop_database(name)


#: fixtures that mark a test as a PostgreSQL test
PG_FIXTURES = frozenset({"pg_server", "pg_template", "pg_url", "pg_empty_url"})


def mark_postgres_items(items) -> None:
    """Give every test that uses a PostgreSQL fixture the ``postgres`` marker
    (``pytest -m postgres`` / ``-m 'not postgres'``)."""
    for item in items:
        if PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
