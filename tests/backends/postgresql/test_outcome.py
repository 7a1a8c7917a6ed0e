"""A write unit whose connection is lost while its COMMIT is on its way (issue 17, item 2;
decisions D13, D16): the store asks the server, on a fresh connection, what became of
the transaction (``txid_status`` of the id its first statement took) instead of
reporting an unknown outcome. Committed: the call returns its result, nothing is
written twice. Rolled back: the unit is re-run. Another server history (a failover to
a promoted standby, a restore) or an answer that does not come within the outage
budget: ``CommitOutcomeUnknownError``, never a re-run.

The connection is cut at COMMIT by a proxy between the store and the suite's server
(``tests/support/cutting_proxy.py``): after the server received COMMIT (it commits, the
answer is lost) or before (the server rolls back).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB
from hermes_store.errors import CommitOutcomeUnknownError
from hermes_store.units import RetryPolicy
from support.cutting_proxy import CuttingProxy


@pytest.fixture
def proxy(pg_server, pg_url):
    socket_path = str(pg_server.base / f".s.PGSQL.{pg_server.port}")
    p = CuttingProxy(socket_path, pg_url)
    yield p
    p.close()


def _contents(pg_url: str, session_id: str) -> list[str]:
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(
                "SELECT content FROM messages WHERE session_id = :s ORDER BY id"),
                {"s": session_id}).scalars())
    finally:
        engine.dispose()


@pytest.mark.parametrize("cut, reruns", [
    ("after", 0),   # the server committed, the answer was lost: not re-run, said committed
    ("before", 1),  # the server never got COMMIT and rolled back: run again
])
def test_a_commit_cut_on_its_way_is_stored_exactly_once(proxy, pg_url, cut, reruns):
    with SessionDB(proxy.url) as db:
        db.create_session("s", "cli")
        retries = db._units.retries
        proxy.cut(cut)
        message_id = db.append_message("s", "user", "stored once")
        assert proxy.cuts == [cut]
        assert db._units.retries == retries + reruns
        assert [m["id"] for m in db.get_messages("s")] == [message_id]
        assert db.get_session("s")["message_count"] == 1
    assert _contents(pg_url, "s") == ["stored once"]


def test_the_answer_is_waited_for_while_the_server_is_unreachable(proxy, pg_url):
    with SessionDB(proxy.url) as db:
        db.create_session("s", "cli")
        proxy.cut("after")
        proxy.refuse(1.5)  # the fresh connection that asks is turned away at first
        db.append_message("s", "user", "after the outage")
        assert proxy.cuts == ["after"]
    assert _contents(pg_url, "s") == ["after the outage"]


def test_no_answer_within_the_outage_budget_is_an_unknown_outcome(proxy, pg_url):
    with SessionDB(proxy.url, retry=RetryPolicy(outage_timeout=0.5)) as db:
        db.create_session("s", "cli")
        proxy.cut("after")
        proxy.refuse(60)
        with pytest.raises(CommitOutcomeUnknownError, match="stayed away") as err:
            db.append_message("s", "user", "maybe")
        assert "not retried" in str(err.value) and "read the data back" in str(err.value)
    assert _contents(pg_url, "s") == ["maybe"]  # it had committed: never stored twice


def test_another_server_history_cannot_tell_so_the_outcome_stays_unknown(proxy, pg_url):
    """The unit ran on one history and the fresh connection reaches another (a standby
    promoted after a failover: it may never have received the COMMIT and may have given
    the id to a transaction of its own): no guess, no re-run."""
    from hermes_store.backends.postgresql.outcome import IDENTITY

    with SessionDB(proxy.url) as db:
        db.create_session("s", "cli")
        runs = 0

        def as_if_on_the_old_primary(conn):  # the unit's BEGIN: before its first statement
            system, _timeline, started = conn.connection.info[IDENTITY]
            conn.connection.info[IDENTITY] = (system, "00000000", started)

        def unit(conn):
            nonlocal runs
            runs += 1
            conn.execute(sa.text("INSERT INTO state_meta (key, value) VALUES ('k', 'v')"))

        sa.event.listen(db.engine, "begin", as_if_on_the_old_primary)
        proxy.cut("after")
        with pytest.raises(CommitOutcomeUnknownError, match="cannot tell"):
            db._write(unit)
        assert runs == 1
        assert db.get_meta("k") == "v"


def test_the_server_history_is_recorded_at_connect(pg_url, pg_server):
    """What a ticket is compared with: the cluster's system identifier and timeline, as
    the server itself reports them (pg_controldata's identifier, timeline 1 for a
    server that never failed over), and when the server last started."""
    from hermes_store.backends.postgresql.outcome import IDENTITY

    with SessionDB(pg_url) as db:
        with db.engine.connect() as conn:
            system, timeline, started = conn.connection.info[IDENTITY]
    with pg_server.connect("postgres") as conn:
        (expected, expected_start), = conn.execute(
            "SELECT system_identifier, pg_postmaster_start_time() FROM pg_control_system()"
        ).fetchall()
    assert (system, timeline, started) == (expected, "00000001", expected_start)


def test_an_id_the_restarted_server_never_reached_was_never_committed(pg_url):
    """After a crash (``pg_ctl restart -m immediate``) the server's next transaction id
    comes from its WAL: an id it handed out but never logged is "in the future" for
    ``txid_status``. On the same history that means no commit record of it exists: the
    unit is aborted (re-run), not an unknown outcome. (Seen in
    tests/backends/postgresql/test_server_restart.py, restart-immediate.)"""
    from hermes_store.backends.postgresql.outcome import IDENTITY, CommitTicket, commit_outcome
    from hermes_store.units import ABORTED, COMMITTED

    with SessionDB(pg_url) as db:
        with db.engine.connect() as conn:
            identity = conn.connection.info[IDENTITY]
            committed = conn.exec_driver_sql("SELECT txid_current()").scalar()
            conn.commit()
            upcoming = conn.exec_driver_sql("SELECT txid_current()").scalar() + 10_000
            conn.rollback()
        assert commit_outcome(db.engine, CommitTicket(committed, identity)) == COMMITTED
        assert commit_outcome(db.engine, CommitTicket(upcoming, identity)) == ABORTED
        other = (identity[0], "00000000", identity[2])  # another history: no answer
        assert commit_outcome(db.engine, CommitTicket(upcoming, other)) is None


def _hand_out_ids_up_to(pg_server, database: str, xid: int) -> None:
    """Commit transactions of their own until the server has handed out ``xid``."""
    with pg_server.connect(database) as conn:
        while conn.execute("SELECT txid_current()").fetchone()[0] < xid:
            pass


def test_an_id_a_crash_handed_out_again_is_not_taken_for_the_units_commit(pg_url, pg_server):
    """A crash restarts the id counter from the log: the id of a transaction that never
    reached it is handed out again, and ``txid_status`` then answers for the new holder
    (seen in tests/backends/postgresql/test_server_restart.py, restart-immediate: a token
    update reported committed that was never stored). The restart's own checkpoint says
    where the log ended: the unit's id is at or past it, so it never committed."""
    from hermes_store.backends.postgresql.outcome import IDENTITY, CommitTicket, commit_outcome
    from hermes_store.units import ABORTED

    database = sa.engine.make_url(pg_url).database
    with SessionDB(pg_url) as db:
        with db.engine.connect() as conn:
            identity = conn.connection.info[IDENTITY]
            # the unit's first statement: an id, nothing of the transaction logged yet
            lost = conn.exec_driver_sql("SELECT txid_current()").scalar()
            pg_server.restart("immediate")
            conn.invalidate()
        _hand_out_ids_up_to(pg_server, database, lost)
        with pg_server.connect(database) as check:
            status = check.execute(f"SELECT txid_status({lost})").fetchone()[0]
        assert status == "committed"  # the id's new holder: what the store must not believe
        assert commit_outcome(db.engine, CommitTicket(lost, identity)) == ABORTED


def test_after_a_clean_restart_the_units_own_status_stands(pg_url, pg_server):
    """A clean restart (``-m fast``) logs every id it handed out: a committed unit is
    still said committed across it. Once a checkpoint of its own has replaced the
    restart's, where the restart's log ended is not known any more: no guess."""
    from hermes_store.backends.postgresql.outcome import IDENTITY, CommitTicket, commit_outcome
    from hermes_store.units import COMMITTED

    with SessionDB(pg_url) as db:
        with db.engine.connect() as conn:
            identity = conn.connection.info[IDENTITY]
            committed = conn.exec_driver_sql("SELECT txid_current()").scalar()
            conn.commit()
        pg_server.restart("fast")
        assert commit_outcome(db.engine, CommitTicket(committed, identity)) == COMMITTED
        with pg_server.connect("postgres") as admin:
            admin.execute("CHECKPOINT")
        assert commit_outcome(db.engine, CommitTicket(committed, identity)) is None
