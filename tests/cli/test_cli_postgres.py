"""`hermes-store --db URL` (and ``HERMES_STATE_DATABASE_URL``) for every command.

The commands that run on both engines are tested on both by the other CLI modules
(``store``/``empty_store`` are parametrized); here: the same rows give the same JSON on
both engines, what only PostgreSQL has (a missing database, the baseline, the URL in
the environment, passwords), the clear refusals of the SQLite-only commands, and that
no command, given a URL, ever takes it for a path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.cli import *  # noqa: F403
from typer.main import get_command

from hermes_store import SessionDB, migrate, revisions
from hermes_store.cli import app
from hermes_store.location import URL_ENV

HEAD = migrate.head()
SECRET = "s3cr3t-cli-pw"
ROOT = "fx_20260101_cli_docker"


def with_password(url: str, password: str = SECRET, user: str | None = None) -> str:
    """The URL with a password (the test server trusts its socket, so a password it
    is given is never checked, only carried and masked)."""
    parsed = sa.engine.make_url(url).set(password=password)
    if user is not None:
        parsed = parsed.set(username=user)
    return parsed.render_as_string(hide_password=False)


def all_commands() -> list[tuple[str, ...]]:
    """Every command of the CLI, as its words (`db upgrade`, `status`, …)."""

    def walk(group, prefix: tuple[str, ...]):
        for name, command in group.commands.items():
            if getattr(command, "commands", None) is not None:  # a group
                yield from walk(command, prefix + (name,))
            else:
                yield prefix + (name,)

    return sorted(walk(get_command(app), ()))


# --------------------------------------------------------------------------- same output


def _without(data: dict, *keys: str) -> dict:
    return {k: v for k, v in data.items() if k not in keys}


def test_read_commands_print_the_same_json_on_both_engines(cli, head_templates, pg_store, tmp_path):
    # The same rows (the 0.19.0 fixture's export imported into a new file and into a
    # new PostgreSQL database): every read command's document must be the same, apart
    # from where the store is and what only a file has (its size, its -wal).
    sqlite_store = copy_db(head_templates["native"], tmp_path / "native.db")

    def both(*args: str) -> tuple[dict, dict]:
        a, b = cli(sqlite_store, "--json", *args), cli(pg_store, "--json", *args)
        assert (a.exit_code, b.exit_code) == (0, 0), (args, a.output, b.output)
        return parse_json(a), parse_json(b)

    for args in (
        ["sessions", "list"],
        ["sessions", "list", "--children", "--archived"],
        ["sessions", "list", "--source", "cli", "--limit", "2"],
        ["sessions", "show", ROOT],
        ["sessions", "show", "Refactor parser"],   # by title
        ["sessions", "show", "fx_20260101_tg"],    # by id prefix
        ["sessions", "lineage", "fx_20260101_cli_docker_c1"],
        ["sessions", "prune", "--older-than", "1", "--dry-run"],
    ):
        on_file, on_server = both(*args)
        assert on_file == on_server, args

    on_file, on_server = both("sessions", "stats")
    assert _without(on_file, "path", "size_bytes", "wal_bytes") == \
        _without(on_server, "path", "size_bytes", "wal_bytes")
    for args in (["status"], ["db", "current"], ["db", "check"], ["db", "history"]):
        on_file, on_server = both(*args)
        local = ("path", "backend", "size_bytes", "wal_bytes", "journal_mode", "sqlite_library",
                 "filesystem")
        assert _without(on_file, *local) == _without(on_server, *local), args

    # Search: the same hits in the same (time) order; snippets are cut by each engine's
    # own highlighter (docs/postgres.md), and mark the match where the file's do (a
    # short CJK query's bounded scan marks nothing on either).
    for query in ("docker", '"docker build"', "build*", "中文", "docker NOT build"):
        on_file, on_server = both("search", query, "--sort", "newest", "--limit", "50")
        assert on_file["count"] == on_server["count"] > 0, query
        assert [_without(h, "snippet") for h in on_file["results"]] == \
            [_without(h, "snippet") for h in on_server["results"]], query
        assert [">>>" in h["snippet"] for h in on_file["results"]] == \
            [">>>" in h["snippet"] for h in on_server["results"]], query

    # An export carries the same records (key order follows each table's columns).
    def export(db) -> list[dict]:
        result = cli(db, "sessions", "export")
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()[1:]]

    assert export(sqlite_store) == export(pg_store)


# --------------------------------------------------------------------------- schema commands


def test_db_upgrade_creates_the_baseline_on_an_empty_database(cli, pg_empty_url):
    url = with_password(pg_empty_url)
    assert migrate.current(pg_empty_url) is None
    first = cli(url, "--json", "db", "upgrade")
    assert first.exit_code == 0, first.output
    data = parse_json(first)
    assert (data["from"], data["to"], data["created"], data["adopted"]) == (None, HEAD, True, False)
    assert data["telegram_topics"] == {"from": None, "to": None}
    assert SECRET not in first.output and ":***@" in data["path"]
    assert migrate.current(pg_empty_url) == HEAD

    again = cli(url, "db", "upgrade")
    assert again.exit_code == 0 and f"already at {revisions.head()} (head); nothing to do" in flat(again.stdout)
    assert cli(url, "db", "check").exit_code == 0


def test_revisions_below_the_baseline_are_refused_on_a_server(cli, pg_empty_url, pg_url):
    refused = cli(pg_empty_url, "db", "upgrade", "0022")
    assert refused.exit_code == 5
    assert "revisions before 0030 exist for SQLite files only" in flat(refused.stderr)
    assert migrate.current(pg_empty_url) is None  # nothing was created

    # A downgrade is refused before the question is asked (no input is given here).
    down = cli(pg_url, "db", "downgrade", "0029")
    assert down.exit_code == 5, down.output
    assert "cannot downgrade below 0030" in flat(down.stderr)
    assert migrate.current(pg_url) == HEAD


def test_db_check_reports_opted_in_telegram_topic_tables_on_each_engine(cli, empty_store):
    with SessionDB(empty_store) as db:
        db.apply_telegram_topic_migration()
    data = parse_json(cli(empty_store, "--json", "db", "check"))
    topics = data["telegram_topics"]
    assert (topics["state"], topics["revision"], topics["ok"], topics["drift"]) == (
        "alembic", migrate.telegram_topics_head(), True, [])
    assert data["ok"] is True
    upgraded = parse_json(cli(empty_store, "--json", "db", "upgrade"))
    assert upgraded["telegram_topics"] == {"from": "t002", "to": "t002"}
    doctor = parse_json(cli(empty_store, "--json", "maintenance", "doctor"))
    assert {"check": "telegram_topics", "status": "ok"}.items() <= \
        next(c for c in doctor["checks"] if c["check"] == "telegram_topics").items()


# --------------------------------------------------------------------------- below head, missing


def test_read_commands_refuse_a_database_below_head_and_leave_it_alone(cli, pg_empty_url):
    url = with_password(pg_empty_url)
    for args in (["sessions", "list"], ["sessions", "show", "x"], ["sessions", "lineage", "x"],
                 ["search", "docker"], ["sessions", "stats"]):
        result = cli(url, *args)
        assert result.exit_code == 5, (args, result.output)
        text = flat(result.stderr)
        assert "has no schema yet" in text and "db upgrade" in text, args
        assert SECRET not in result.output
    for args in (["db", "check"], ["maintenance", "doctor"]):
        result = cli(url, "--json", *args)
        assert result.exit_code == 1, (args, result.output)
    status = parse_json(cli(url, "--json", "status"))
    assert (status["exists"], status["revision"], status["sessions"]) == (True, None, None)
    current = parse_json(cli(url, "--json", "db", "current"))
    assert (current["exists"], current["revision"], current["managed_by"]) == (True, None, None)
    exported = cli(url, "sessions", "export")  # an export reads any schema, even none
    assert exported.exit_code == 0 and '"end":{"sessions":0,"messages":0}' in exported.stdout
    assert migrate.current(pg_empty_url) is None  # still empty: nothing upgraded it

    # A command that writes brings the schema, as Hermes itself would (and as on a file).
    renamed = cli(url, "sessions", "rename", "x", "y")
    assert renamed.exit_code == 3  # no such session, in a store now at head
    assert migrate.current(pg_empty_url) == HEAD


def test_a_missing_database_is_not_found_and_says_how_to_create_it(cli, pg_server):
    url = with_password(pg_server.url("no_such_database"))
    status = cli(url, "--json", "status")
    assert status.exit_code == 3
    assert _without(parse_json(status), "path", "head") == {
        "backend": "postgresql", "exists": False, "size_bytes": None, "wal_bytes": None,
        "revision": None, "at_head": False, "schema_version": None, "journal_mode": None,
        "sqlite_library": None, "filesystem": None, "sessions": None, "messages": None,
        "fts_stale": None}
    human = cli(url, "status")
    assert "createdb" in flat(human.stdout)
    for args in (["sessions", "list"], ["db", "upgrade"], ["db", "check"],
                 ["sessions", "import", "x.jsonl"]):
        result = cli(url, *args)
        assert result.exit_code == 3, (args, result.output)
        assert "does not exist" in flat(result.stderr) and "createdb" in flat(result.stderr)
        assert SECRET not in result.output


def test_db_current_of_a_missing_database_is_not_found_as_status_says(cli, pg_server):
    url = pg_server.url("no_such_database")
    for args in (["db", "current"], ["--json", "db", "current"], ["status"]):
        result = cli(url, *args)
        assert result.exit_code == 3, (args, result.output)
    assert parse_json(cli(url, "--json", "db", "current"))["exists"] is False


def test_db_check_reports_a_missing_full_text_index(cli, pg_store, pg_server):
    assert cli(pg_store, "db", "check").exit_code == 0
    with pg_server.connect(sa.engine.make_url(pg_store).database) as conn:
        conn.execute("DROP INDEX messages_fts_trigram")
    result = cli(pg_store, "db", "check")
    assert result.exit_code == 1, result.output
    text = flat(result.stdout)
    assert "full-text index: messages_fts_trigram: missing" in text
    data = parse_json(cli(pg_store, "--json", "db", "check"))
    assert data["ok"] is False and data["drift"] == []
    assert [item.split(":")[0] for item in data["full_text"]] == ["messages_fts_trigram"]


# --------------------------------------------------------------------------- URL and TLS mistakes


def test_a_misspelled_url_option_is_named_not_reported_as_an_unreachable_server(cli, pg_store):
    from hermes_store.errors import DatabaseURLError

    url = f"{pg_store}&sslmod=require"
    with pytest.raises(DatabaseURLError, match="sslmod.*did you mean sslmode"):
        SessionDB(url)
    result = cli(url, "status")
    assert result.exit_code == 2, result.output
    text = flat(result.stderr)
    assert "did you mean sslmode" in text and "cannot reach" not in text


def test_tls_required_of_a_server_without_it_is_not_a_wrong_password(cli, pg_server, pg_url):
    """``sslmode=require`` against a server (here a PgBouncer on loopback TCP, in front of
    the suite's server) that does not do TLS: says so, and what to change."""
    import socket

    from support.pgbouncer import PgBouncer, find_binary

    from hermes_store.errors import UnsupportedServerError

    with socket.socket() as s:  # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bouncer = PgBouncer(find_binary(), pg_server, "session", settings={"listen_addr": "127.0.0.1"})
    bouncer.port = port
    bouncer.start()
    try:
        database = sa.engine.make_url(pg_url).database
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}?sslmode=require"
        with pytest.raises(UnsupportedServerError) as err:
            SessionDB(url)
        message = str(err.value)
        assert "does not accept TLS" in message and "sslmode" in message
        assert "password" not in message
        with SessionDB(url.replace("require", "disable")) as db:  # the same server, plain
            assert db.session_count() == 0
        result = cli(url, "status")
        assert result.exit_code == 8 and "does not accept TLS" in flat(result.stderr)
    finally:
        bouncer.stop()


# --------------------------------------------------------------------------- the environment


def test_the_url_in_the_environment_is_used_when_no_db_is_given(cli, pg_store, hermes_home, tmp_path):
    env = {URL_ENV: with_password(pg_store)}
    status = cli(None, "--json", "status", env=env)
    assert status.exit_code == 0, status.output
    data = parse_json(status)
    assert (data["backend"], data["sessions"], data["messages"]) == ("postgresql", 6, 41)
    assert SECRET not in status.output and ":***@" in data["path"]
    listed = parse_json(cli(None, "--json", "sessions", "list", "--children", env=env))
    assert listed["count"] == 6
    assert not (hermes_home / "state.db").exists()

    # --db wins over the variable
    file_store = tmp_path / "file.db"
    assert cli(file_store, "db", "upgrade", env=env).exit_code == 0
    assert parse_json(cli(file_store, "--json", "status", env=env))["sessions"] == 0

    # a variable that is not a URL is a usage error, never a file name
    bad = cli(None, "status", env={URL_ENV: str(tmp_path / "state.db")})
    assert bad.exit_code == 2 and "is not a URL" in flat(bad.stderr)
    assert not (tmp_path / "state.db").exists()


# --------------------------------------------------------------------------- passwords


@pytest.fixture(scope="module")
def password_role(pg_server):
    """A role that logs in with a password (every other role is trusted)."""
    role = "hermes_cli_pw"
    pg_server.admin(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{SECRET}'")
    hba = Path(pg_server.data, "pg_hba.conf")
    hba.write_text(f"local all {role} scram-sha-256\n" + hba.read_text())
    pg_server.admin("SELECT pg_reload_conf()")
    return role


def test_passwords_are_masked_and_pgpassword_works(cli, pg_store, password_role):
    # In the URL: works, and never shown.
    url = with_password(pg_store, user=password_role)
    for args in (["--json", "status"], ["status"], ["--json", "sessions", "stats"],
                 ["--json", "maintenance", "doctor"], ["db", "upgrade"], ["--json", "db", "check"]):
        result = cli(url, *args)
        assert result.exit_code == 0, (args, result.output)
        assert SECRET not in result.output and "***" in result.output, args

    # Kept off the command line: libpq's PGPASSWORD.
    bare = sa.engine.make_url(pg_store).set(username=password_role).render_as_string()
    ok = cli(bare, "--json", "sessions", "list", env={"PGPASSWORD": SECRET})
    assert ok.exit_code == 0 and parse_json(ok)["count"] >= 1

    # A wrong password: refused login, named, masked.
    wrong = cli(with_password(pg_store, "not-the-password", user=password_role), "sessions", "list")
    assert wrong.exit_code == 8
    assert "refused the login" in flat(wrong.stderr)
    assert "not-the-password" not in wrong.output


def test_the_first_upgrade_needs_the_owner_and_says_so(cli, pg_server, pg_empty_url):
    # PostgreSQL 15 lets only the database's owner create tables in schema public, so
    # a role that merely may connect cannot create the schema: a clear error (exit 8),
    # naming what to grant; with those grants the same command works.
    role = pg_server.new_name("norole")
    pg_server.admin(f"CREATE ROLE {role} LOGIN")
    url = sa.engine.make_url(pg_empty_url).set(username=role).render_as_string(hide_password=False)
    refused = cli(url, "db", "upgrade")
    assert refused.exit_code == 8, refused.output
    text = flat(refused.stderr)
    assert f"the role {role} lacks a privilege this needs (permission denied for schema public" in text
    assert "database's owner" in text and "Traceback" not in refused.output
    assert migrate.current(pg_empty_url) is None
    database = sa.engine.make_url(pg_empty_url).database
    with pg_server.connect(database) as conn:
        conn.execute(f"GRANT CREATE ON DATABASE {database} TO {role}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    created = cli(url, "db", "upgrade")
    assert created.exit_code == 0, created.output  # pg_trgm is trusted: CREATE on the database suffices
    assert migrate.current(pg_empty_url) == HEAD


# --------------------------------------------------------------------------- SQLite only


SQLITE_ONLY = {
    ("recover",): (["--output", "out.db"], "pg_dump"),
    ("db", "backup"): (["out.db"], "db copy"),
    ("maintenance", "repair"): ([], "maintenance doctor"),
    ("maintenance", "journal-mode"): (["delete"], "its own write-ahead log"),
}


@pytest.mark.parametrize("words", sorted(SQLITE_ONLY), ids=" ".join)
def test_sqlite_only_commands_refuse_a_server_and_say_what_to_use(cli, pg_store, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, instead = SQLITE_ONLY[words]
    for json_flag in ([], ["--json"]):
        result = cli(with_password(pg_store), *json_flag, *words, *args)
        assert result.exit_code == 2, result.output
        text = flat(result.stderr)
        assert f"`hermes-store {' '.join(words)}` works on SQLite files only" in text
        assert "is a PostgreSQL database" in text and instead in text
        assert SECRET not in result.output and result.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no output file, no directory


# --------------------------------------------------------------------------- never a path


#: arguments that let each command run up to its first use of the database
COMMAND_ARGS: dict[tuple[str, ...], list[str]] = {
    ("status",): [],
    ("search",): ["docker"],
    ("recover",): ["--output", "recovered.db"],
    ("db", "upgrade"): [],
    ("db", "downgrade"): ["0029", "--yes"],
    ("db", "current"): [],
    ("db", "history"): [],
    ("db", "check"): [],
    ("db", "backup"): ["backup.db"],
    ("db", "copy"): ["{url}", "copy.db"],
    ("db", "grant"): ["hermes_rt"],
    ("sessions", "list"): [],
    ("sessions", "show"): ["x"],
    ("sessions", "lineage"): ["x"],
    ("sessions", "rename"): ["x", "title"],
    ("sessions", "delete"): ["x", "--yes"],
    ("sessions", "prune"): ["--yes"],
    ("sessions", "stats"): [],
    ("sessions", "export"): ["--output", "export.jsonl"],
    ("sessions", "import"): ["import.jsonl"],
    ("maintenance", "doctor"): [],
    ("maintenance", "repair"): [],
    ("maintenance", "journal-mode"): ["delete"],
    ("maintenance", "rebuild-fts"): [],
    ("maintenance", "optimize"): [],
    ("maintenance", "vacuum"): [],
}


#: command groups that never open a store: ``agent`` acts on an agent's Python
#: environment (``--python``), whose store is the agent's own (tests/agent/test_switch*.py)
NOT_A_STORE = {"agent"}


def _store_commands():
    return [c for c in all_commands() if c[0] not in NOT_A_STORE]


def test_every_command_is_covered_below():
    missing = [" ".join(c) for c in _store_commands() if c not in COMMAND_ARGS]
    assert not missing, f"add these commands to COMMAND_ARGS: {missing}"


@pytest.mark.parametrize("how", ["--db", URL_ENV])
def test_no_command_takes_a_url_for_a_path(cli, how, tmp_path, monkeypatch):
    # An unreachable server (no socket in that directory): every command fails clearly,
    # names the database with its password masked, and creates nothing — no
    # "postgresql+psycopg:" directory, no file — in the working directory.
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "import.jsonl").write_text('{"hermes_store_export": 1}\n')
    monkeypatch.chdir(cwd)
    url = f"postgresql+psycopg://hermes:{SECRET}@/state?host={tmp_path}/no-server&connect_timeout=2"
    for words in _store_commands():
        args = [a.format(url=url) for a in COMMAND_ARGS[words]]
        for json_flag in ([], ["--json"]):
            if how == "--db":
                result = cli(url, *json_flag, *words, *args)
            else:
                result = cli(None, *json_flag, *words, *args, env={URL_ENV: url})
            shown = " ".join(words)
            assert result.exit_code != 0, shown
            if words in SQLITE_ONLY:
                assert result.exit_code == 2, (shown, result.output)
            elif words != ("db", "copy"):  # its own errors (another module)
                assert result.exit_code == 8, (shown, result.output)
                assert "cannot reach the PostgreSQL server" in flat(result.stderr), shown
                assert "hermes:***@" in flat(result.stderr), shown
            assert SECRET not in result.output, shown
            assert "Traceback" not in result.output, shown
    assert sorted(p.name for p in cwd.rglob("*")) == ["import.jsonl"]


@pytest.mark.parametrize("words, args, what", [
    (("sessions", "export"), ["--output"], "--output"),
    (("sessions", "import"), [], "FILE"),
    (("db", "backup"), [], "DEST"),
    (("recover",), ["--output"], "--output"),
    (("recover",), ["--output", "out.db", "--work-dir"], "--work-dir"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_path_options_refuse_a_url(cli, words, args, what, tmp_path, monkeypatch):
    # Options that name a local file never turn a URL into a directory named after its
    # scheme (Path("postgresql+psycopg://…") keeps "postgresql+psycopg:/…").
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "state.db"  # refused while parsing: never opened, never created
    before = sorted(tmp_path.rglob("*"))
    for url in (f"postgresql+psycopg://u:{SECRET}@db.example/hermes",
                f"postgresql+psycopg:/u:{SECRET}@db.example/hermes"):   # what a shell or Path leaves
        result = cli(store, *words, *args, url)
        assert result.exit_code == 2, result.output
        text = flat(result.stderr.replace("│", " "))  # a usage error, in a box
        assert "is a URL" in text and f"{what} is a local file path" in text
        assert "u:***@db.example" in text and SECRET not in result.output
    assert sorted(tmp_path.rglob("*")) == before


# --------------------------------------------------------------------------- imports


def test_an_import_keeps_ids_and_later_appends_get_new_ones(cli, pg_store, head_templates):
    # Imported messages keep their exported ids; the server's id sequence must move past
    # them, or the next message Hermes appends would be given a taken id.
    with SessionDB(pg_store) as db:
        top = max(m["id"] for s in db.list_sessions_rich(limit=None, include_children=True,
                                                         include_archived=True)
                  for m in db.get_messages(s["id"]))
        new_id = db.append_message(ROOT, "user", "after the import")
        assert new_id > top
    again = parse_json(cli(pg_store, "--json", "sessions", "import", head_templates["export"]))
    assert (again["sessions_added"], again["sessions_skipped"]) == (0, 6)


def test_an_import_takes_the_unit_lock_of_a_server(cli, pg_store, tmp_path):
    # An import batch reads ids and titles across the store, then writes: it runs alone
    # (the store's lock, exclusively). While a unit of one session stays in flight for
    # longer than the lock wait, the import stops as busy (exit 6, as BEGIN IMMEDIATE
    # does on a file) and writes nothing; once that unit is done it goes through.
    from hermes_store import unit_locks
    from hermes_store.backends.postgresql import locks as pg_locks

    export = tmp_path / "one.jsonl"
    assert cli(pg_store, "sessions", "export", "fx_20260101_tg_cjk", "--output", export).exit_code == 0
    export.write_text(export.read_text().replace("fx_20260101_tg_cjk", "copied"))
    with SessionDB(pg_store) as holder, holder.engine.connect() as conn:
        conn.begin()
        # a unit of one session in flight elsewhere
        pg_locks.lock_unit(conn, unit_locks.sessions("elsewhere"), unit_locks.HeldLocks())
        busy = cli(pg_store, "sessions", "import", export)
        conn.rollback()
    assert busy.exit_code == 6, busy.output
    assert "database is busy" in flat(busy.stderr)
    with SessionDB(pg_store, read_only=True) as db:
        assert db.get_session("copied") is None
    done = parse_json(cli(pg_store, "--json", "sessions", "import", export))
    assert done["sessions_added"] == 1


# --------------------------------------------------------------------------- processes


_MODULES = """
import sys
from hermes_store.cli import main
sys.argv = ["hermes-store"] + sys.argv[1:]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(",".join(sorted(m for m in ("psycopg", "hermes_store.backends.postgresql", "hermes_store.backends.postgresql.migrate")
                     if m in sys.modules)), file=sys.stderr)
"""


def _loaded(*args: str, env: dict | None = None) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _MODULES, *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "80", **(env or {})})
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return [m for m in last.split(",") if m]


def test_help_and_sqlite_commands_never_import_the_postgresql_side(head_templates, hermes_home, tmp_path):
    store = copy_db(head_templates["rich"], tmp_path / "state.db")
    assert _loaded("--help") == []
    assert _loaded("db", "--help") == []
    for args in (["status"], ["sessions", "list"], ["search", "docker"], ["db", "check"],
                 ["maintenance", "doctor"], ["sessions", "export", "--format", "md"]):
        assert _loaded("--db", store, *args) == [], args
    assert _loaded("status", env={"HERMES_HOME": str(hermes_home)}) == []


def test_a_postgresql_command_loads_the_driver(pg_store):
    # The same probe, seeing the PostgreSQL side when it is used (so the test above
    # would notice it being imported).
    assert _loaded("--db", pg_store, "status") == ["hermes_store.backends.postgresql", "hermes_store.backends.postgresql.migrate", "psycopg"]


def _run(*args, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", **(env_extra or {})}
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "hermes_store", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_one_command_of_each_group_as_a_process(pg_store):
    url = with_password(pg_store)
    status = _run("--db", url, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["sessions"] == 6
    current = _run("--db", url, "db", "current")
    assert current.stdout.strip() == f"{revisions.head()} (head)"
    listed = _run("--db", url, "sessions", "list", "--children")
    assert ROOT in listed.stdout and "\x1b[" not in listed.stdout
    assert_fits(listed.stdout)
    search = _run("--db", url, "--json", "search", "docker")
    assert json.loads(search.stdout)["count"] >= 2
    doctor = _run("--db", url, "maintenance", "doctor")
    assert doctor.returncode == 0 and "n/a" in doctor.stdout and "No problems found." in doctor.stdout
    assert_fits(doctor.stdout)
    recover = _run("--db", url, "recover", "--output", "x.db")
    assert recover.returncode == 2 and recover.stderr.startswith("error: ")
    for proc in (status, current, listed, search, doctor, recover):
        assert SECRET not in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- backups


def _client(name: str) -> str:
    """A client program of the test server's installation (beside initdb, or where
    initdb's link points), else the one on PATH."""
    import shutil

    from support.postgres import find_bindir

    bindir = find_bindir()
    for folder in (bindir, (bindir / "initdb").resolve().parent):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    assert found, f"{name} not found beside {bindir} nor on PATH"
    return found


def test_pg_dump_and_pg_restore_give_a_working_store(cli, pg_server, pg_store, tmp_path):
    # The backup docs/postgres.md recommends, run for real: pg_dump's custom format,
    # pg_restore into a new database, and the restored store is the same store.
    libpq = lambda url: sa.engine.make_url(url).set(drivername="postgresql").render_as_string(  # noqa: E731
        hide_password=False)
    dump = tmp_path / "hermes.dump"
    done = subprocess.run([_client("pg_dump"), "--format=custom", f"--file={dump}",
                           libpq(pg_store)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    name = pg_server.new_name("restored")
    restored = pg_server.create_database(name)
    try:
        done = subprocess.run([_client("pg_restore"), "--no-owner", f"--dbname={libpq(restored)}",
                               str(dump)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr  # a SQL function looked up by name once failed here
        check = cli(restored, "--json", "db", "check")
        assert check.exit_code == 0 and parse_json(check)["drift"] == []
        doctor = cli(restored, "--json", "maintenance", "doctor")
        assert doctor.exit_code == 0, doctor.output

        def export(db) -> list[str]:
            return cli(db, "sessions", "export").stdout.splitlines()[1:]  # after the header

        assert export(restored) == export(pg_store)
        with SessionDB(restored) as db:  # the id sequence came along
            new_id = db.append_message(ROOT, "user", "appended after the restore")
            assert [h["id"] for h in db.search_messages("restore")] == [new_id]
    finally:
        pg_server.drop_database(name)
