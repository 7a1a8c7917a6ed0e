"""The store behind a connection pooler (issue 17, item 1; decision D16): a real PgBouncer
(``tests/support/pgbouncer.py``) in transaction mode — what managed services hand out as
their pooled URL — and in session mode, in front of the suite's server."""

from __future__ import annotations

import pytest

MODES = pytest.mark.parametrize("pooler_mode", ["transaction", "session"], indirect=True)


@MODES
def test_the_suites_pgbouncer_pools_the_suites_server_in_its_mode(pgbouncer, pg_url):
    import psycopg
    import sqlalchemy as sa

    database = sa.engine.make_url(pg_url).database
    with psycopg.connect(host=str(pgbouncer.base), port=pgbouncer.port, user="postgres",
                         dbname=database, autocommit=True, prepare_threshold=None) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (database,)
        # the pooler hands out a cancel key of its own, not the server process's pid
        (pid,), = conn.execute("SELECT pg_backend_pid()").fetchall()
        assert pid != conn.pgconn.backend_pid
    pools = {(row[0], row[-1]) for row in pgbouncer.admin("SHOW POOLS")}
    assert (database, pgbouncer.mode) in pools
    assert pgbouncer.pid() is not None and pgbouncer.base.exists()
