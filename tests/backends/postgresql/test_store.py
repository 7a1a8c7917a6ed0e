"""SessionDB on a PostgreSQL URL (D11, D13): selection, opening and its errors, read-only
transactions, the pool, the unit lock, and what happens when a connection is lost
before or during COMMIT. The API's behaviour on both engines is the repository suite's
(``tests/repository``, ``[postgresql]`` runs); this module holds what only PostgreSQL has."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, schema
from hermes_store.units import RetryPolicy
from hermes_store.errors import (
    DatabaseURLError,
    DriverMissingError,
    NotADatabaseError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    ServerUnreachableError,
    StoreNotFoundError,
    StoreReadOnlyError,
    UnsupportedBackendError,
)
from hermes_store.location import URL_ENV, resolve
from hermes_store import revisions

META = schema.state_meta


def _database(url: str) -> str:
    return sa.engine.make_url(url).database


def _backend_pid(conn: sa.Connection) -> int:
    return conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()


# --------------------------------------------------------------------------- selection


def test_the_environment_variable_selects_the_server_when_nothing_is_given(
        pg_url, monkeypatch, tmp_path):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(URL_ENV, pg_url)
    with SessionDB() as db:
        assert db.target.is_postgresql and db.db_path is None
        db.create_session("from-env", "cli")
    with SessionDB(pg_url) as db:
        assert db.get_session("from-env")["source"] == "cli"
    assert not (tmp_path / "home").exists()  # no SQLite file was made on the side


def test_a_url_is_never_taken_for_a_path(pg_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- opening


@pytest.mark.parametrize("url, error, says", [
    ("postgresql+psycopg2://hermes:s3cret@db/hermes", UnsupportedBackendError, "psycopg 3"),
    ("mysql://hermes:s3cret@db/hermes", UnsupportedBackendError, "not supported"),
    ("postgresql+psycopg://hermes:s3cret@db", DatabaseURLError, "names no database"),
    ("postgresql+psycopg://hermes:s3cret@db/hermes?pool_size=many", DatabaseURLError,
     "not a number"),
])
def test_a_url_that_cannot_be_used_is_refused_before_connecting(url, error, says, tmp_path,
                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=says) as err:
        SessionDB(url)
    assert "s3cret" not in str(err.value)
    assert list(tmp_path.iterdir()) == []  # and never a file named after it


def test_an_unreachable_server_is_a_clear_error_with_the_password_masked(tmp_path):
    url = f"postgresql+psycopg://hermes:s3cret@/hermes?host={tmp_path}&port=5999"
    with pytest.raises(ServerUnreachableError) as err:
        SessionDB(url)
    message = str(err.value)
    assert "cannot reach the PostgreSQL server" in message
    assert "s3cret" not in message and "hermes:***@" in message


def test_a_missing_database_says_to_create_it(pg_server):
    with pytest.raises(StoreNotFoundError, match="createdb") as err:
        SessionDB(pg_server.url("no_such_database"))
    assert isinstance(err.value, FileNotFoundError)


def test_a_missing_driver_names_the_extra_to_install(pg_url):
    # a child process where psycopg cannot be imported (as in a default install)
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from hermes_store import SessionDB\n"
        "from hermes_store.errors import DriverMissingError\n"
        "try:\n"
        f"    SessionDB({pg_url!r})\n"
        "except DriverMissingError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("DriverMissingError") and "hermes_store[postgres]" in out
    assert DriverMissingError  # the class the child caught


def test_an_empty_database_gets_the_schema_or_the_command_to_run(pg_empty_url):
    for kwargs in ({"auto_upgrade": False}, {"read_only": True}):
        with pytest.raises(SchemaOutOfDateError, match="hermes-store --db") as err:
            SessionDB(pg_empty_url, **kwargs)
        assert "has no schema yet" in str(err.value)
    engine = sa.create_engine(resolve(pg_empty_url).url, poolclass=sa.pool.NullPool)
    assert sa.inspect(engine).get_table_names() == []  # nothing was created
    with SessionDB(pg_empty_url) as db:  # the default: the baseline is created
        db.create_session("s", "cli")
        assert db.get_session("s") is not None
    assert "sessions" in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_a_newer_database_and_a_foreign_one_are_refused_untouched(pg_url, pg_server):
    with pg_server.connect(_database(pg_url)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    with pytest.raises(SchemaTooNewError, match="0099"):
        SessionDB(pg_url)
    with pg_server.connect(_database(pg_url)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0099",)]
        conn.execute("UPDATE alembic_version SET version_num = %s", (revisions.head(),))


def test_tables_of_another_application_are_not_taken_over(pg_empty_url, pg_server):
    with pg_server.connect(_database(pg_empty_url)) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(NotADatabaseError, match="not a hermes_store database"):
        SessionDB(pg_empty_url)


_OPEN_AND_READ = """
import sys
from hermes_store import SessionDB
with SessionDB(sys.argv[1]) as db:
    print(db.get_session("s")["source"])
print(",".join(sorted(m for m in ("alembic", "mako") if m in sys.modules)))
"""


def test_opening_a_database_at_head_does_not_import_alembic(pg_url):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
    out = subprocess.run([sys.executable, "-c", _OPEN_AND_READ, pg_url], check=True,
                         capture_output=True, text=True).stdout
    assert out.splitlines() == ["cli", ""]


# --------------------------------------------------------------------------- read-only


def test_a_read_only_store_runs_read_only_transactions_on_the_server(pg_url):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
    with SessionDB(pg_url, read_only=True) as ro:
        assert ro.get_session("s") is not None
        with pytest.raises(StoreReadOnlyError):
            ro.set_meta("k", "v")
        # past the store's own check, the server refuses the write itself
        with pytest.raises(StoreReadOnlyError):
            ro._units.run(lambda conn: conn.execute(sa.insert(META).values(key="k", value="v")))
    with SessionDB(pg_url) as db:
        assert db.get_meta("k") is None


# --------------------------------------------------------------------------- the pool


def test_a_store_holds_no_connection_between_calls(pg_url):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "hello")
        with db._read():
            assert db.engine.pool.checkedout() == 1  # one for the snapshot
        assert db.get_messages("s") and db.search_messages("hello")
        assert db.engine.pool.checkedout() == 0


def _pooled_backend(db) -> int:
    """The server process of the connection the pool hands out next."""
    with db.engine.connect() as conn:
        return conn.connection.dbapi_connection.info.backend_pid


def test_a_connection_the_server_ended_is_replaced_at_checkout_without_a_round_trip(
        pg_url, pg_server, monkeypatch):
    from hermes_store.backends.postgresql import engine as postgres

    monkeypatch.setattr(postgres, "PING_AFTER_IDLE", 3600.0)  # no ping: the socket tells
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        before = _pooled_backend(db)
        pg_server.admin(f"SELECT pg_terminate_backend({before}, 10000)")
        assert db.get_session("s")["source"] == "cli"  # no error reached the caller
        assert db.search_messages("nothing here") == []
        assert _pooled_backend(db) != before


@pytest.mark.parametrize("idle_seconds, pinged", [(0.0, True), (3600.0, False)])
def test_only_a_connection_idle_in_the_pool_is_pinged(pg_url, pg_server, monkeypatch,
                                                      idle_seconds, pinged):
    from hermes_store.backends.postgresql import engine as postgres

    monkeypatch.setattr(postgres, "PING_AFTER_IDLE", idle_seconds)
    with SessionDB(pg_url) as db:
        assert db.get_session("s") is None  # the connection is now back in the pool
        with db.engine.connect() as conn:  # checked out again: pinged or not
            pid = conn.connection.dbapi_connection.info.backend_pid
            (last,), = pg_server.admin(f"SELECT query FROM pg_stat_activity WHERE pid = {pid}")
    assert (last == "SELECT 1") is pinged


def test_pool_sizes_come_from_the_url_or_the_arguments(pg_url):
    with SessionDB(f"{pg_url}&pool_size=2&max_overflow=1") as db:
        assert (db.engine.pool.size(), db.engine.pool._max_overflow) == (2, 1)
        db.create_session("s", "cli")  # psycopg never saw the pool keys
    with SessionDB(f"{pg_url}&pool_size=2", pool_size=3, max_overflow=0) as db:
        assert (db.engine.pool.size(), db.engine.pool._max_overflow) == (3, 0)


def test_more_threads_than_connections_wait_for_the_pool(pg_url):
    errors: list = []
    with SessionDB(pg_url, pool_size=1, max_overflow=0) as db:
        def work(n):
            try:
                for i in range(5):
                    db.create_session(f"t{n}-{i}", "cli")
                    db.append_message(f"t{n}-{i}", "user", "x")
                    assert db.get_session(f"t{n}-{i}")["message_count"] == 1
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == [] and db.session_count() == 30


# --------------------------------------------------------------------------- transaction modes


def _in_force(conn) -> tuple:
    """What the server says holds for the statement run on ``conn`` now."""
    return tuple(conn.exec_driver_sql(
        "SELECT current_setting('transaction_isolation'), "
        "current_setting('transaction_read_only'), current_setting('lock_timeout'), "
        "transaction_timestamp() = statement_timestamp()").one())


def test_each_door_runs_in_its_transaction_mode(pg_url):
    seen: list = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, conn.connection.dbapi_connection.autocommit))

    with SessionDB(pg_url, retry=RetryPolicy(busy_timeout=0.75)) as db:
        db.create_session("s", "cli")
        sa.event.listen(db.engine, "before_cursor_execute", record)
        db.get_session("s")  # one statement: autocommit, one round trip
        single = seen[-1]
        with db._read() as conn:  # a snapshot, begun at once
            begin = seen[-1]
            conn.execute(sa.select(META.c.key)).all()
            snapshot = _in_force(conn)
        del seen[:]
        # a write unit: BEGIN with its settings, the transaction's id with the lock (what
        # a lost COMMIT is asked about later), the upsert
        db.set_meta("k", "v")
        unit_begin, lock, upsert = seen[:3]
        unit = db._units.run(_in_force)
    assert single[0].startswith("SELECT") and single[1] is True
    assert begin[0] == "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    assert snapshot == ("repeatable read", "on", "0", False)
    assert unit_begin[0] == ("BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE; "
                             "SET LOCAL lock_timeout = 750; "
                             "SET LOCAL gin_pending_list_limit = 1024")
    assert lock[0].startswith("SELECT txid_current(), pg_advisory_xact_lock")
    assert upsert[0].startswith("INSERT")
    assert unit == ("read committed", "off", "750ms", False)


def test_a_search_takes_a_snapshot_only_when_it_reads_more_than_one_statement(pg_url):
    from psycopg.pq import TransactionStatus

    seen: list = []

    def record(conn, cursor, statement, parameters, context, executemany):
        dbapi = conn.connection.dbapi_connection
        what = ("catalog" if "pg_class" in statement else "begin" if statement.startswith("BEGIN")
                else "ids" if statement.split()[1:3] == ["messages.id", "FROM"] else "rows")
        idle = dbapi.info.transaction_status == TransactionStatus.IDLE
        seen.append((what, "autocommit" if idle else "snapshot"))

    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "docker compose")
        db.append_message("s", "user", "修改youer服务端配置")
        sa.event.listen(db.engine, "before_cursor_execute", record)
        assert len(db.search_messages("docker")) == 1
        assert seen == [("catalog", "autocommit"), ("rows", "autocommit")]
        seen.clear()
        assert len(db.search_messages("docker")) == 1  # the catalog's answer was kept
        assert seen == [("rows", "autocommit")]
        seen.clear()
        # a page in time order, and the short-CJK scan: the page and its rows in one
        assert len(db.search_messages("docker", sort="newest")) == 1
        assert len(db.search_messages("修改", sort="newest")) == 1
        assert seen == [("rows", "autocommit")] * 2
        seen.clear()
        # no word matches: the trigram index is tried, in one snapshot with the first try
        assert len(db.search_messages("youer")) == 1
        assert [mode for _, mode in seen] == ["autocommit"] * 2 + ["snapshot"] * 2
        assert seen[1][0] == "begin"  # BEGIN … REPEATABLE READ READ ONLY (test above)
        assert db.engine.pool.checkedout() == 0


@pytest.mark.parametrize("frequent, rare", [("alpha", "zulu"), ("记忆断裂", "服务端配置")])
def test_searches_keep_one_generic_plan_instead_of_planning_each_time(pg_url, frequent, rare):
    # The planner sees neither the query text nor an unknown page size: the plan of a
    # frequent term and of a rare one cost the same, so PostgreSQL keeps the prepared
    # statement's generic plan rather than planning every search (~0.5-1 ms each).
    sent = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "page_id" in statement:
            sent.append((statement, parameters))

    with SessionDB(pg_url, pool_size=1, max_overflow=0) as db:  # one server session
        db.create_session("s", "cli")
        db.append_messages("s", [{"role": "user", "content": f"alpha 记忆断裂 words {i}"}
                                 for i in range(300)])
        db.append_message("s", "user", "zulu 服务端配置 once")
        with db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE messages")
            conn.commit()
        sa.event.listen(db.engine, "before_cursor_execute", record)
        for _ in range(6):
            for query in (frequent, rare):
                assert db.search_messages(query, limit=5)
        sa.event.remove(db.engine, "before_cursor_execute", record)
        with db.engine.connect() as conn:
            (generic, custom), = conn.exec_driver_sql(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE strpos(statement, 'page_id') > 0").all()
            costs = {conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params)
                     .scalar()[0]["Plan"]["Total Cost"] for statement, params in sent[:2]}
    assert len({statement for statement, _ in sent}) == 1  # one statement for both
    # a LIMIT the planner cannot see is planned as a tenth of the matches, which made
    # the generic plan look dearer than the custom ones
    assert "LIMIT 5)" in sent[0][0] and "page_limit" not in sent[0][1]
    assert len(costs) == 1  # the same estimate whatever the query
    # psycopg prepares it at the 6th run; PostgreSQL plans 5 times, then keeps one plan
    assert (custom, generic) == (5, 12 - 5 - 5)


def test_the_kept_index_answer_is_checked_again_once_the_fts_layer_is_gone(pg_url):
    from hermes_store.backends.postgresql.fts import ddl as fts_postgres

    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        wanted = db.append_message("s", "user", "docker compose")
        assert ">>>docker<<<" in db.search_messages("docker")[0]["snippet"]  # answer kept
        with SessionDB(pg_url) as other:  # another process takes the layer away
            other._write(fts_postgres.drop_fts)
        found = db.search_messages("docker")  # the bounded LIKE scan answers
        assert [h["id"] for h in found] == [wanted] and ">>>" not in found[0]["snippet"]
        with SessionDB(pg_url) as other:
            other._write(fts_postgres.create_fts)
        # "missing" was never kept: the word index answers again at once
        assert ">>>docker<<<" in db.search_messages("docker")[0]["snippet"]


# --------------------------------------------------------------------------- the unit lock


def test_scoped_units_run_side_by_side_and_a_store_unit_waits_for_them(pg_url):
    from hermes_store import unit_locks

    quick = RetryPolicy(attempts=200, busy_timeout=0.05, jitter_min=0.001, jitter_max=0.005)
    with SessionDB(pg_url, retry=quick) as db:
        for sid in ("held", "other"):
            db.create_session(sid, "cli")
        inside, release = threading.Event(), threading.Event()

        def long_append(conn):  # a unit of session "held" that stays open
            conn.execute(sa.update(schema.sessions).where(schema.sessions.c.id == "held")
                         .values(message_count=schema.sessions.c.message_count + 1))
            inside.set()
            release.wait(30)

        holder = threading.Thread(target=db._write, args=(long_append,),
                                  kwargs={"locks": unit_locks.sessions("held")})
        holder.start()
        assert inside.wait(30)
        before = db._units.retries
        db.append_message("other", "user", "beside it")  # another session: no wait at all
        db.set_meta("k", "beside it too")  # one upsert (ROWS): no wait either
        assert db._units.retries == before

        def alone(conn):  # a unit that names nothing runs alone (STORE)
            conn.execute(sa.update(META).where(META.c.key == "k").values(value="after"))

        waiter = threading.Thread(target=db._write, args=(alone,))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and db.get_meta("k") == "beside it too"
        release.set()
        holder.join(30)
        waiter.join(30)
        assert db.get_meta("k") == "after" and db._units.retries > before


# --------------------------------------------------------------------------- lost connections


def test_a_connection_lost_before_commit_reruns_the_whole_unit(pg_url, pg_server):
    with SessionDB(pg_url) as db:
        runs = 0

        def unit(conn):
            nonlocal runs
            runs += 1
            conn.execute(sa.insert(META).values(key="k", value=str(runs)))
            if runs == 1:  # the server drops this connection mid-unit
                pg_server.admin(f"SELECT pg_terminate_backend({_backend_pid(conn)})")
                conn.execute(sa.select(META.c.key))

        db._write(unit)
        assert runs == 2 and db.get_meta("k") == "2"  # nothing of the first attempt stayed


def test_a_session_the_server_ended_before_commit_reruns_the_unit(pg_url, pg_server):
    # The server ends the session while the unit is idle between statements (what a
    # restart does to every session): its goodbye is already in the socket when the
    # unit would commit, so COMMIT was never sent and the unit is re-run, not reported
    # as an unknown outcome.
    with SessionDB(pg_url) as db:
        runs = 0

        def unit(conn):
            nonlocal runs
            runs += 1
            conn.execute(sa.insert(META).values(key="k", value=str(runs)))
            if runs == 1:  # returns once the backend is gone
                pg_server.admin(f"SELECT pg_terminate_backend({_backend_pid(conn)}, 10000)")

        db._write(unit)
        assert runs == 2 and db.get_meta("k") == "2"
        assert db._units.retries == 1


def test_a_connection_lost_at_commit_is_asked_about_and_rerun_when_rolled_back(
        pg_url, pg_server):
    # The server process is ended just as COMMIT is about to be sent: the store cannot
    # know whether it committed, asks the server on a fresh connection (the
    # transaction's id, taken by the unit's first statement), hears "aborted" and runs
    # the unit again. Where the answer is "committed" or none can be had:
    # test_outcome.py.
    with SessionDB(pg_url) as db:
        runs = 0

        def drop_before_commit(conn):
            pid = conn.connection.dbapi_connection.info.backend_pid
            pg_server.admin(f"SELECT pg_terminate_backend({pid}, 10000)")

        def unit(conn):
            nonlocal runs
            runs += 1
            if runs == 1:
                sa.event.listen(conn, "commit", drop_before_commit, once=True)
            conn.execute(sa.insert(META).values(key="k", value=str(runs)))

        db._write(unit)
        assert runs == 2 and db.get_meta("k") == "2"
        db.set_meta("later", "fine")  # the next unit gets a fresh connection
        assert db.get_meta("later") == "fine"


# --------------------------------------------------------------------------- upkeep


def test_vacuum_runs_vacuum_analyze_and_checkpoints_are_no_ops(pg_url, pg_server):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        assert db._units.checkpoint() is None  # the server checkpoints on its own
        db.vacuum()
    with pg_server.connect(_database(pg_url)) as conn:
        vacuumed = dict(conn.execute(
            "SELECT relname, last_vacuum IS NOT NULL AND last_analyze IS NOT NULL "
            "FROM pg_stat_user_tables").fetchall())
    assert vacuumed["messages"] and vacuumed["sessions"]
