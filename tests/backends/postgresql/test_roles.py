"""Runtime roles on PostgreSQL (issue 17): `hermes-store db grant ROLE` gives a role
that only reads and writes sessions what it needs, now and for the tables created
later (the Telegram topic opt-in, upgrades); `maintenance doctor` names what a role
lacks; a permission error names the object it was refused, not the whole recipe.

Every role here is a real server role; the test server trusts its socket, so a role
logs in by name."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from support.cli import *  # noqa: F403

from hermes_store import SessionDB, migrate
from hermes_store.errors import DatabaseAccessError

HEAD = migrate.head()


def as_role(url: str, role: str) -> str:
    return sa.engine.make_url(url).set(username=role).render_as_string(hide_password=False)


@pytest.fixture
def roles(pg_server, pg_empty_url):
    """(owner URL, runtime role URL, runtime role name) on an empty database the owner
    owns, as an administrator sets a deployment up (docs/postgres.md, Set-up)."""
    owner, runtime = pg_server.new_name("owner"), pg_server.new_name("rt")
    pg_server.admin(f"CREATE ROLE {owner} LOGIN")
    pg_server.admin(f"CREATE ROLE {runtime} LOGIN")
    database = sa.engine.make_url(pg_empty_url).database
    # PostgreSQL 15: schema public belongs to pg_database_owner, i.e. to this owner
    pg_server.admin(f'ALTER DATABASE "{database}" OWNER TO {owner}')
    yield as_role(pg_empty_url, owner), as_role(pg_empty_url, runtime), runtime


def _works_as_runtime_role(url: str, n: int) -> None:
    with SessionDB(url, auto_upgrade=False) as db:
        sid = f"rt-{n}"
        db.create_session(sid, "telegram", system_prompt="You are Hermes.")
        db.append_message(sid, "user", f"docker build {n}")
        db.set_session_title(sid, f"Docker {n}")
        db.update_token_counts(sid, input_tokens=3, model="m", billing_provider="p",
                               api_call_count=1)
        assert db.search_messages(f"docker")[0]["session_id"].startswith("rt-")
        db.end_session(sid, "user_exit")


@pytest.mark.parametrize("when", ["before the schema exists", "after db upgrade"])
def test_a_runtime_role_granted_once_keeps_working_after_the_opt_in_and_an_upgrade(
        cli, roles, when):
    owner_url, runtime_url, runtime = roles
    if when == "after db upgrade":
        assert cli(owner_url, "db", "upgrade").exit_code == 0
    granted = cli(owner_url, "--json", "db", "grant", runtime)
    assert granted.exit_code == 0, granted.output
    report = parse_json(granted)
    assert report["role"] == runtime and report["missing"] is None
    assert cli(owner_url, "db", "upgrade").exit_code == 0  # (a no-op the second time)
    _works_as_runtime_role(runtime_url, 1)

    # the owner opts into Telegram topics: tables created now, never granted by hand
    with SessionDB(owner_url) as owner:
        owner.apply_telegram_topic_migration()
    with SessionDB(runtime_url, auto_upgrade=False) as db:
        db.enable_telegram_topic_mode(chat_id="42", user_id="7")
        db.bind_telegram_topic(chat_id="42", thread_id="1", user_id="7", session_key="k",
                               session_id="rt-1")
        assert db.is_telegram_topic_mode_enabled(chat_id="42", user_id="7")
        assert db.get_telegram_topic_binding(chat_id="42", thread_id="1")["session_id"] == "rt-1"

    # an upgrade that adds a table and a sequence (what a revision after 0030 does, as
    # the owner): the runtime role can use them without another grant
    engine = sa.create_engine(owner_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE later_table (id BIGSERIAL PRIMARY KEY, note TEXT)")
    engine.dispose()
    engine = sa.create_engine(runtime_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO later_table (note) VALUES ('ok')")
        assert conn.exec_driver_sql("SELECT note FROM later_table").scalar() == "ok"
    engine.dispose()
    _works_as_runtime_role(runtime_url, 2)

    doctor = cli(owner_url, "--json", "maintenance", "doctor")
    privileges = [f for f in parse_json(doctor)["checks"] if f["check"] == "privileges"]
    assert privileges and privileges[0]["status"] == "ok", privileges
    assert runtime in privileges[0]["detail"]


def test_doctor_names_the_role_and_what_it_lacks(cli, roles, pg_server):
    owner_url, runtime_url, runtime = roles
    assert cli(owner_url, "db", "upgrade").exit_code == 0
    # the grant of the old docs: every table now, nothing for tables created later
    engine = sa.create_engine(owner_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                             f"public TO {runtime}")
        conn.exec_driver_sql(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public "
                             f"TO {runtime}")
        conn.exec_driver_sql(f"REVOKE INSERT ON messages FROM {runtime}")
    engine.dispose()
    for url in (owner_url, runtime_url):  # the owner sees it, and so does the role itself
        result = cli(url, "--json", "maintenance", "doctor")
        assert result.exit_code == 1, result.output
        finding = next(f for f in parse_json(result)["checks"] if f["check"] == "privileges")
        assert finding["status"] == "problem"
        detail = finding["detail"]
        assert f"role {runtime} lacks INSERT on table messages" in detail
        assert "default privileges" in detail and f"db grant {runtime}" in detail
    assert cli(owner_url, "db", "grant", runtime).exit_code == 0
    fixed = cli(owner_url, "--json", "maintenance", "doctor")
    finding = next(f for f in parse_json(fixed)["checks"] if f["check"] == "privileges")
    assert finding["status"] == "ok", finding


def test_a_refused_statement_names_what_is_missing_not_the_whole_recipe(cli, roles):
    owner_url, runtime_url, runtime = roles
    assert cli(owner_url, "db", "upgrade").exit_code == 0
    assert cli(owner_url, "db", "grant", runtime).exit_code == 0
    engine = sa.create_engine(owner_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"REVOKE INSERT ON sessions FROM {runtime}")
    engine.dispose()
    with SessionDB(runtime_url, auto_upgrade=False) as db:
        with pytest.raises(DatabaseAccessError) as refused:
            db.create_session("s", "cli")
        text = str(refused.value)
        assert f"the role {runtime} lacks a privilege on table sessions" in text
        assert f"db grant {runtime}" in text
        assert "SELECT, INSERT, UPDATE, DELETE on the tables" not in text  # no recipe
        # creating tables (the opt-in) is the owner's: said so, by name
        with pytest.raises(DatabaseAccessError) as create:
            db.apply_telegram_topic_migration()
        text = str(create.value)
        assert "permission denied for schema public" in text
        assert "database's owner" in text


def test_db_grant_refuses_what_it_cannot_do(cli, roles, tmp_path):
    owner_url, runtime_url, runtime = roles
    unknown = cli(owner_url, "db", "grant", "no_such_role_here")
    assert unknown.exit_code == 2 and "there is no role 'no_such_role_here'" in flat(unknown.stderr)
    not_owner = cli(runtime_url, "db", "grant", runtime)
    assert not_owner.exit_code == 2
    assert "run `db grant` as the owner" in flat(not_owner.stderr)
    on_a_file = cli(tmp_path / "state.db", "db", "grant", runtime)
    assert on_a_file.exit_code == 2 and "PostgreSQL" in flat(on_a_file.stderr)
    assert not (tmp_path / "state.db").exists()
