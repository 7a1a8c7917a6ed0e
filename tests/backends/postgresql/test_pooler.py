"""The store behind a connection pooler (issue 17, item 1; decision D16): a real PgBouncer
(``tests/support/pgbouncer.py``) in transaction mode — what managed services hand out as
their pooled URL — and in session mode, in front of the suite's server.

What a pooler changes, and where it is shown:

* nothing may travel as a startup parameter or a session setting: ``lock_timeout`` and a
  read-only store's access mode are set per transaction, observed here on the server
  through the pooler, and a pooler that refuses a parameter the URL asks for is a clear
  error naming the pooler's setting;
* server-side prepared statements are off behind a pooler (detected per connection, or
  set by ``?prepare_threshold=`` in the URL), on for a direct connection;
* the migration lock is the migration transaction's own: four ``db upgrade`` at once on
  an empty database all succeed and make one schema, and no lock stays behind;
* the repository's API and several processes at once: the repository and reliability
  suites' ``[pgbouncer-transaction]``/``[pgbouncer-session]`` runs
  (``support/pgbouncer.POOLER_SUBSET``; ``pytest --poolers`` runs all of them).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, schema
from hermes_store.units import RetryPolicy
from hermes_store.errors import (
    DatabaseURLError,
    StoreBusyError,
    StoreReadOnlyError,
    UnsupportedServerError,
)
from hermes_store import revisions

MODES = pytest.mark.parametrize("pooler_mode", ["transaction", "session"], indirect=True)
HERMES_STORE = Path(sys.executable).with_name("hermes-store")


def _database(url: str) -> str:
    return sa.engine.make_url(url).database


def _settings(conn) -> dict:
    """What the server says holds for the transaction ``conn`` is in."""
    names = ("lock_timeout", "transaction_read_only", "transaction_isolation")
    return {n: conn.exec_driver_sql(f"SHOW {n}").scalar() for n in names}


@MODES
def test_the_suites_pgbouncer_pools_the_suites_server_in_its_mode(pgbouncer, pg_url):
    import psycopg

    database = _database(pg_url)
    with psycopg.connect(host=str(pgbouncer.base), port=pgbouncer.port, user="postgres",
                         dbname=database, autocommit=True, prepare_threshold=None) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (database,)
        # the pooler hands out a cancel key of its own, not the server process's pid
        (pid,), = conn.execute("SELECT pg_backend_pid()").fetchall()
        assert pid != conn.pgconn.backend_pid
    pools = {(row[0], row[-1]) for row in pgbouncer.admin("SHOW POOLS")}
    assert (database, pgbouncer.mode) in pools
    assert pgbouncer.pid() is not None and pgbouncer.base.exists()


# --------------------------------------------------------------------------- per-transaction settings


@MODES
def test_lock_timeout_and_read_only_hold_in_every_transaction_through_the_pooler(pooler_url):
    with SessionDB(pooler_url, retry=RetryPolicy(busy_timeout=0.25)) as db:
        db.create_session("s", "cli")
        for _ in range(3):  # whichever server connection the pooler lends
            assert db._units.run(_settings) == {
                "lock_timeout": "250ms", "transaction_read_only": "off",
                "transaction_isolation": "read committed"}
        with db._read() as conn:
            assert _settings(conn)["transaction_read_only"] == "on"
    with SessionDB(pooler_url, read_only=True) as ro:
        assert ro.get_session("s")["source"] == "cli"
        # past the store's own check, the server refuses the write itself
        assert ro._units.run(_settings)["transaction_read_only"] == "on"
        with pytest.raises(StoreReadOnlyError):
            ro._units.run(lambda conn: conn.execute(
                sa.insert(schema.state_meta).values(key="k", value="v")))
    with SessionDB(pooler_url) as db:
        assert db.get_meta("k") is None


@MODES
def test_a_lock_wait_through_the_pooler_ends_at_lock_timeout(pooler_url, pg_server):
    with SessionDB(pooler_url, retry=RetryPolicy(attempts=2, busy_timeout=0.2,
                                                 jitter_min=0.0, jitter_max=0.01)) as db:
        db.create_session("s", "cli")
        with pg_server.connect(_database(pooler_url)) as holder:
            holder.execute("BEGIN")
            holder.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
            with pytest.raises(StoreBusyError):
                db.update_token_counts("s", input_tokens=5)  # waits for the row, 2 tries
            holder.execute("ROLLBACK")
        assert db._units.retries >= 1
        db.update_token_counts("s", input_tokens=5)
        assert db.get_session("s")["input_tokens"] == 5


def test_lock_timeout_is_the_transactions_not_the_sessions(pg_url):
    # A setting of the session would stay with the server connection a pooler lends to
    # the next client, or be lost; the store's hold for its own transactions only.
    with SessionDB(pg_url, retry=RetryPolicy(busy_timeout=0.5)) as db:
        assert db._units.run(_settings)["lock_timeout"] == "500ms"
        with db.engine.connect() as conn:  # the same pooled connections, outside a unit
            assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "0"
            conn.rollback()


# --------------------------------------------------------------------------- prepared statements


def _thresholds(db) -> set:
    """psycopg's prepare_threshold of the connections the store's pool holds."""
    with db.engine.connect() as conn:
        return {conn.connection.dbapi_connection.prepare_threshold}


@MODES
def test_prepared_statements_are_off_behind_a_pooler_and_on_for_a_direct_connection(
        pooler_url, pg_url):
    from hermes_store.backends.postgresql import engine as postgres

    with SessionDB(pooler_url) as db:
        assert _thresholds(db) == {None}
        with db.engine.connect() as conn:
            assert postgres.behind_pooler(conn.connection.dbapi_connection)
    with SessionDB(pg_url) as db:
        assert _thresholds(db) == {5}  # psycopg's default: prepared on the 5th run
        with db.engine.connect() as conn:
            assert not postgres.behind_pooler(conn.connection.dbapi_connection)


def test_prepare_threshold_in_the_url_is_a_setting_not_a_type_error(pg_url, pooler_url):
    with SessionDB(f"{pg_url}&prepare_threshold=0") as db:
        assert _thresholds(db) == {0}
        db.create_session("s", "cli")
        assert db.get_session("s")["source"] == "cli"
    for off in ("none", "None", "off"):
        with SessionDB(f"{pg_url}&prepare_threshold={off}") as db:
            assert _thresholds(db) == {None}
    with SessionDB(f"{pooler_url}&prepare_threshold=none") as db:  # said, not detected
        assert _thresholds(db) == {None}
    for bad in ("often", "-1"):
        with pytest.raises(DatabaseURLError, match="prepare_threshold"):
            SessionDB(f"{pg_url}&prepare_threshold={bad}")


def test_many_clients_through_a_transaction_pooler_never_mix_statements(
        pgbouncer_transaction, pg_url):
    """Psycopg prepares a statement on its fifth run; behind a transaction pooler the
    next run may land on a server connection where another client prepared another
    statement under the same name. Threads with stores of their own, every call
    repeated far past the threshold: no error, every answer the right one."""
    url = pgbouncer_transaction.through(pg_url)
    errors: list = []

    def client(n: int) -> None:
        try:
            with SessionDB(url, pool_size=2, max_overflow=0) as db:
                sid = f"c{n}"
                db.create_session(sid, "cli", model=f"m{n}")
                for i in range(25):
                    db.append_message(sid, "user", f"word{n} {i}")
                    assert db.get_session(sid)["model"] == f"m{n}"
                    assert db.message_count(sid) == i + 1
                    assert len(db.search_messages(f"word{n}", limit=50)) == i + 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []


# --------------------------------------------------------------------------- the migration lock


def _upgrade_at_once(url: str, n: int = 4) -> list[subprocess.CompletedProcess]:
    env = dict(os.environ)
    procs = [subprocess.Popen([str(HERMES_STORE), "--db", url, "db", "upgrade"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(n)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


@pytest.mark.parametrize("through", ["direct", "transaction", "session"])
def test_four_upgrades_at_once_on_an_empty_database_make_one_schema(
        request, through, pg_server, pg_empty_url, pg_template):
    from support.postgres import _fingerprint

    url = pg_empty_url if through == "direct" else \
        request.getfixturevalue(f"pgbouncer_{through}").through(pg_empty_url)
    results = _upgrade_at_once(url)
    for result in results:
        assert result.returncode == 0, result.stderr
    name = _database(pg_empty_url)
    with pg_server.connect(name) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(revisions.head(),)]
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(30,)]
        assert _fingerprint(conn) == pg_template.fingerprint  # exactly the head, once
    # the lock was the migration transaction's: nothing holds it now
    assert pg_server.admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]


# --------------------------------------------------------------------------- pooler mistakes


@MODES
def test_a_startup_parameter_the_pooler_refuses_names_the_pooler_setting(pooler_url):
    url = f"{pooler_url}&options=-c%20statement_timeout%3D60000"
    with pytest.raises(UnsupportedServerError) as err:
        SessionDB(url)
    message = str(err.value)
    assert "options" in message and "ignore_startup_parameters" in message
    assert "cannot reach" not in message
