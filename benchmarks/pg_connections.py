"""How a PostgreSQL store should get its connections: kept per thread, or checked out of
the pool per unit and per read (with or without SQLAlchemy's pre-ping)?

    python3 benchmarks/pg_connections.py [--rounds 5] [--calls 300] [--url postgresql+psycopg://…]

On a throwaway server (``tests/support/postgres.py``) unless ``--url`` names a database
to create a scratch database beside, builds one store at head (200 sessions, one of 60
messages) and times, per variant, the hot calls of ``benchmarks/bench_read.py`` and
``append_message`` (p50 per call over ``--calls`` calls, median of ``--rounds`` rounds):

* ``pooled`` — what ships (``pg_backend.KEEP_CONNECTIONS = False``): each checkout looks
  at the socket for a session the server ended, and pings only a connection idle for
  ``engine.PING_AFTER_IDLE`` seconds (``backends/postgresql/engine.py``,
  ``_check_on_checkout``);
* ``pooled + pre-ping`` — the same plus SQLAlchemy's pre-ping, a ``SELECT 1`` round
  trip at every checkout (what shipped before);
* ``held`` — ``engine.KeptConnections`` as on SQLite (a reader, a writer and an
  autocommit connection per thread, kept).

It also counts the server connections a store has open while 4 threads that each made
a single-statement read, a snapshot read and a write are alive (held: 3 per thread; the
pool's default size is 5 + 10 overflow, so more than 5 such threads would wait on it). Decision and figures: ``docs/postgres.md`` ("Connections").
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hermes_store import SessionDB, migrate  # noqa: E402
from hermes_store.backends import postgresql as pg_backend  # noqa: E402
from hermes_store.backends.postgresql import engine as pg_engine  # noqa: E402

VARIANTS = {
    "pooled (ships)": dict(hold=False, pre_ping=False),
    "pooled + pre-ping": dict(hold=False, pre_ping=True),
    "held": dict(hold=True, pre_ping=False),
}


def configure(hold: bool, pre_ping: bool, original=pg_engine.create_engine) -> None:
    # both read at each store's opening (PostgresqlBackend.open_store)
    pg_backend.KEEP_CONNECTIONS = hold
    pg_engine.create_engine = functools.partial(original, pool_pre_ping=pre_ping)


def fill(url: str) -> None:
    with SessionDB(url) as db:
        for i in range(200):
            db.create_session(f"s{i}", "cli", model="m")
        db.append_messages("s0", [{"role": "user" if i % 2 else "assistant",
                                   "content": f"turn {i} about the rollout plan"}
                                  for i in range(60)])
        db.append_message("s1", "user", "the unique needle word")


def per_call_us(fn, calls: int) -> float:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def cases(db):
    return {
        "get_session": lambda: db.get_session("s5"),
        "message_count": lambda: db.message_count("s0"),
        "get_messages, 60 rows": lambda: db.get_messages("s0"),
        "list_sessions_rich(limit=20)": lambda: db.list_sessions_rich(limit=20),
        "search_messages, one hit": lambda: db.search_messages("needle"),
        "append_message": lambda: db.append_message("s2", "user", "x"),
    }


def connections_after_threads(url: str, threads: int = 4) -> int:
    with SessionDB(url) as db:
        barrier = threading.Barrier(threads + 1)

        def work():
            db.get_session("s3")  # a single statement,
            db.export_session("s3")  # a snapshot,
            db.append_message("s3", "user", "x")  # a write unit
            barrier.wait(60)  # every thread alive at once, each after its calls
            barrier.wait(60)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        barrier.wait(60)
        with db.engine.connect() as conn:
            count = conn.exec_driver_sql(
                "SELECT count(*) - 1 FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'hermes_store'").scalar()
        barrier.wait(60)
        for w in workers:
            w.join(30)
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--url", help="an existing server's database; a scratch database "
                                      "is created beside it")
    args = parser.parse_args(argv)

    server = None
    if args.url:
        import sqlalchemy as sa

        base = sa.engine.make_url(args.url)
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql("DROP DATABASE IF EXISTS hermes_bench_connections")
            conn.exec_driver_sql("CREATE DATABASE hermes_bench_connections")
        url = base.set(database="hermes_bench_connections").render_as_string(hide_password=False)
    else:
        from support.postgres import PostgresServer, find_bindir

        server = PostgresServer(find_bindir())
        server.start()
        url = server.create_database("bench")
    try:
        migrate.upgrade(url)
        fill(url)
        # rounds outside, variants inside: a shared machine's load drifts, and every
        # variant sees the same drift
        samples: dict[str, dict[str, list[float]]] = {n: {} for n in VARIANTS}
        for _ in range(args.rounds):
            for name, variant in VARIANTS.items():
                configure(**variant)
                with SessionDB(url) as db:
                    for case, fn in cases(db).items():
                        fn()  # compile and warm the pool first
                        samples[name].setdefault(case, []).append(per_call_us(fn, args.calls))
        results = {n: {c: statistics.median(v) for c, v in by_case.items()}
                   for n, by_case in samples.items()}
        threads: dict[str, int] = {}
        for name, variant in VARIANTS.items():
            configure(**variant)
            threads[name] = connections_after_threads(url)
        names = list(VARIANTS)
        print(f"{'call (p50, µs)':32}" + "".join(f"{n:>22}" for n in names))
        for case in results[names[0]]:
            print(f"{case:32}" + "".join(f"{results[n][case]:>22,.0f}" for n in names))
        print(f"{'connections, 4 threads':32}" + "".join(f"{threads[n]:>22}" for n in names))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
