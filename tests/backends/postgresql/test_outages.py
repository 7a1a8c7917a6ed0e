"""Lost connections and outages (issue 17, item 2; decision D16): a read that loses its
connection is re-run on a fresh one, a write unit lost before COMMIT was sent too, both
within the outage budget (``RetryPolicy.outage_timeout``, 30 s by default) with growing
pauses; only a connection lost while COMMIT was on its way is an unknown outcome
(``test_store.py``). Processes riding out a real restart, directly and through
PgBouncer: ``tests/backends/postgresql/test_server_restart.py``."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from psycopg.pq import TransactionStatus

from hermes_store import SessionDB, schema
from hermes_store.units import RetryPolicy
from hermes_store.errors import ServerUnreachableError
from hermes_store.store import _guarded


def _kill_once(db, pg_server, wanted):
    """Terminate the server process of the connection about to run the first statement
    for which ``wanted(statement, in_transaction)`` holds, and wait until it is gone:
    the statement then meets a closed connection. Returns the list of kills made."""
    kills: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        dbapi = conn.connection.dbapi_connection
        in_transaction = dbapi.info.transaction_status != TransactionStatus.IDLE
        if not kills and wanted(statement, in_transaction):
            kills.append(statement)
            pg_server.admin(f"SELECT pg_terminate_backend({dbapi.info.backend_pid}, 10000)")

    sa.event.listen(db.engine, "before_cursor_execute", before)
    return kills


def test_a_single_statement_read_that_loses_its_connection_is_rerun(pg_url, pg_server):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        kills = _kill_once(db, pg_server, lambda sql, tx: "FROM sessions" in sql and not tx)
        assert db.get_session("s")["source"] == "cli"  # no error reached the caller
        assert len(kills) == 1


def test_a_read_snapshot_that_loses_its_connection_is_rerun_whole(pg_url, pg_server):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "one")
        db.append_message("s", "user", "two")
        # the snapshot's second statement (the messages, after the session row)
        kills = _kill_once(db, pg_server, lambda sql, tx: tx and "FROM messages" in sql)
        exported = db.export_session("s")
        assert len(kills) == 1
        assert [m["content"] for m in exported["messages"]] == ["one", "two"]
        assert exported["message_count"] == 2


def test_a_search_that_loses_its_connection_is_rerun(pg_url, pg_server):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "docker compose")
        kills = _kill_once(db, pg_server, lambda sql, tx: "messages" in sql and "pg_class" not in sql)
        assert [hit["snippet"] for hit in db.search_messages("docker")] == [">>>docker<<< compose"]
        assert len(kills) == 1


def test_a_read_inside_a_write_unit_that_loses_its_connection_reruns_the_unit(
        pg_url, pg_server):
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        runs = 0

        def unit(conn):
            nonlocal runs
            runs += 1
            conn.execute(sa.insert(schema.state_meta).values(key="k", value=str(runs)))
            return db.get_session("s")["source"]  # a read through the unit's connection

        _kill_once(db, pg_server, lambda sql, tx: tx and "FROM sessions" in sql)
        assert db._write(unit) == "cli"
        assert runs == 2 and db.get_meta("k") == "2"


def test_a_call_that_wrote_before_its_read_lost_the_connection_is_not_rerun(
        pg_url, pg_server):
    class Store(SessionDB):
        def note_then_read(self):
            self.set_meta("notes", str(int(self.get_meta("notes") or 0) + 1))
            with self._read() as conn:
                return conn.execute(sa.select(schema.sessions.c.id)).all()

    Store.note_then_read = _guarded(Store.note_then_read)  # the API boundary, as SessionDB's
    with Store(pg_url) as db:
        db.create_session("s", "cli")
        _kill_once(db, pg_server, lambda sql, tx: tx and "FROM sessions" in sql)
        with pytest.raises(ServerUnreachableError):
            db.note_then_read()
        assert db.get_meta("notes") == "1"  # its write stayed, and was not made twice
        assert db.note_then_read() == [("s",)]


def test_reads_and_writes_wait_out_a_server_that_is_away_for_a_while(pg_url, pg_server):
    # 3 s away: twice what the retry budget of write units used to be (15 tries of
    # 20-150 ms), while reads were not retried at all
    with SessionDB(pg_url) as db:
        db.create_session("s", "cli")
        results: dict = {}

        def calls():
            try:
                results["read"] = db.get_session("s")["source"]
                results["write"] = db.append_message("s", "user", "through the outage")
                results["snapshot"] = len(db.export_session("s")["messages"])
            except Exception as exc:  # noqa: BLE001 - reported below
                results["error"] = exc

        pg_server.halt("fast")
        try:
            caller = threading.Thread(target=calls)
            caller.start()
            time.sleep(3)
            assert caller.is_alive() and results == {}  # still waiting, not failed
        finally:
            pg_server.resume()
        caller.join(60)
        assert results.get("error") is None
        assert results["read"] == "cli" and results["snapshot"] == 1
        assert [m["content"] for m in db.get_messages("s")] == ["through the outage"]


def test_the_outage_budget_is_a_setting_and_its_error_names_it(pg_url, pg_server):
    with SessionDB(pg_url, retry=RetryPolicy(outage_timeout=0.5)) as db:
        db.create_session("s", "cli")
        pg_server.halt("fast")
        try:
            for call in (lambda: db.get_session("s"),
                         lambda: db.append_message("s", "user", "never stored"),
                         lambda: db.export_session("s"),
                         lambda: db.search_messages("anything")):
                with pytest.raises(ServerUnreachableError, match="outage_timeout"):
                    call()
        finally:
            pg_server.resume()
        assert db.get_messages("s") == []  # the write that gave up stored nothing
        db.append_message("s", "user", "after")  # and the store works again at once
    with pytest.raises(ValueError, match="outage_timeout"):
        RetryPolicy(outage_timeout=-1)
