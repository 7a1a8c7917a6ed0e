#!/usr/bin/env python3
"""search_messages on both engines: the nine query kinds of bench_search.py, PostgreSQL
beside SQLite, over the same conversations.

Per store size (10k and 100k messages; with ``--sizes full`` also 1M), the SQLite side
is a copy of the cached head store (``_stores``), the PostgreSQL side a database on a
private server with deployment settings (``_pg``), filled with the same generated rows
(same ids). Before timing, each query is checked to find the same messages on both
engines (``limit=-1``: the whole result; ranking may differ, membership may not).
The first page's overlap (how many of SQLite's hits PostgreSQL's page also
holds; ranking differs by design) is reported beside it. Each side then runs each
query ``WARMUP`` times untimed (the steady state of a
long-lived process: psycopg prepares a statement at its 6th run, and PostgreSQL
settles on a plan for it after 5 more) and ``ITERATIONS`` times per round, sides
interleaved, order rotating; p50/p95 are the median over rounds of each round's
percentile.

``work`` is clock-free: on SQLite the VM instructions of our recorded SQL (thousands,
as in bench_search.py); on PostgreSQL the shared buffers (8 kB pages) our recorded
statements touch, from ``EXPLAIN (ANALYZE, BUFFERS)``. For the too-short CJK query it
shows whether the work is bounded as the store grows (the scan covers the newest
``short_query_scan_rows`` ids).

Target (issue 11): PostgreSQL p50 ≤ 2× SQLite for every kind at 100k; the short-CJK
work bounded on both engines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _pg  # noqa: E402
import _stores  # noqa: E402
from _common import Samples, human, interleaved, log, main_for  # noqa: E402
from _floor import Floor, Recorder, engine_of  # noqa: E402
from bench_search import QUERIES, WorkCounter  # noqa: E402

NAME = "pg_search"
ITERATIONS = 5
WARMUP = 12
TARGET_SIZE = 100_000
TARGET_RATIO = 2.0
SHORT_CJK = "CJK too short"


def pg_buffers(engine, call) -> int:
    """Shared buffers touched by the recorded SELECTs of one call (EXPLAIN ANALYZE)."""
    total = 0
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        with dbapi.cursor() as cur:
            for kind, statement, params, _ in call:
                if kind != "exec" or not statement.lstrip().upper().startswith("SELECT"):
                    continue
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
                plan = cur.fetchone()[0]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                top = plan[0]["Plan"]
                total += int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
        dbapi.rollback()
    return total


def _ids(hits) -> set:
    return {h["id"] for h in hits}


def run(args, report) -> None:
    from hermes_store import SessionDB

    report.sides = ("PostgreSQL", "SQLite", None)
    sizes = list(args.size_list)
    work_pg: dict[int, int] = {}
    work_lite: dict[int, int] = {}
    with _pg.server(_pg.DEPLOYMENT_SETTINGS) as srv:
        version = srv.admin("SHOW server_version")[0][0]
        for n in sizes:
            work = args.workdir / f"pg-search-{human(n)}"
            lite_path = _stores.working_copy(
                _stores.store("head", n, log=lambda m: log(args, m)), work, "sqlite.db")
            url = srv.create_database(f"search_{human(n).lower()}")
            log(args, f"filling PostgreSQL with {human(n)} messages")
            _pg.fill(url, n, log=lambda m: log(args, m))
            pg, lite = SessionDB(url), SessionDB(lite_path)
            floor = Floor(lite_path, read_only=True)
            lite_work = WorkCounter(floor.conn)
            for kind, query, kwargs in QUERIES:
                whole = {k: v for k, v in kwargs.items() if k != "sort"}
                same = _ids(pg.search_messages(query, limit=-1, **whole)) == \
                    _ids(lite.search_messages(query, limit=-1, **whole))
                if not same:
                    report.note(f"{kind} «{query}», {human(n)}: the engines found different messages")
                recorders, pages = {}, {}
                for name, db in (("pg", pg), ("lite", lite)):
                    rec = Recorder(engine_of(db))
                    with rec.call():
                        hits = db.search_messages(query, **kwargs)
                    rec.close()
                    recorders[name] = (rec.calls[0], len(hits))
                    pages[name] = [hit["id"] for hit in hits]
                buffers = pg_buffers(engine_of(pg), recorders["pg"][0])
                _, ticks = lite_work.measure(lambda: floor.replay(recorders["lite"][0]))
                if kind == SHORT_CJK:
                    work_pg[n], work_lite[n] = buffers, ticks
                for _ in range(WARMUP):
                    pg.search_messages(query, **kwargs)
                    lite.search_messages(query, **kwargs)
                res = interleaved({
                    "pg": (lambda: pg.search_messages(query, **kwargs), Samples()),
                    "lite": (lambda: lite.search_messages(query, **kwargs), Samples()),
                }, args.rounds, ITERATIONS)
                p50 = {side: res[side]["p50"] * 1e3 for side in res}
                target, met = "", None
                if n == TARGET_SIZE:
                    target, met = f"PostgreSQL ≤ {TARGET_RATIO:g}× SQLite", \
                        p50["pg"] <= TARGET_RATIO * p50["lite"]
                case = f"{kind} «{query}», {human(n)}"
                report.add(NAME, case, "p50", "ms", p50["pg"], p50["lite"], target=target, met=met,
                           hits_pg=recorders["pg"][1], hits_sqlite=recorders["lite"][1],
                           same_messages=same, summaries=res)
                report.add(NAME, case, "p95", "ms", res["pg"]["p95"] * 1e3, res["lite"]["p95"] * 1e3)
                report.add(NAME, case, "work: PostgreSQL buffers, SQLite k VM instr.", "",
                           float(buffers), float(ticks))
                report.add(NAME, case, "same messages found (whole result)", "", float(same),
                           target="1 (yes)", met=same)
                # ranking differs by design (ts_rank, BM25): how much of the page it moves
                report.add(NAME, case, "first page: hits also on SQLite's (of its page)", "",
                           float(len(set(pages["pg"]) & set(pages["lite"]))),
                           float(len(pages["lite"])))
            pg.close()
            lite.close()
            floor.close()
            for p in work.glob("*"):
                p.unlink()
            srv.drop_database(f"search_{human(n).lower()}")
    for label, work_of in (("PostgreSQL buffers", work_pg), ("SQLite VM instr.", work_lite)):
        if len(work_of) >= 2:
            small, big = sorted(work_of)[-2:]
            growth = work_of[big] / max(1, work_of[small])
            report.add(NAME, f"CJK too short: {label} {human(big)} ÷ {human(small)}", "growth", "×",
                       growth, target=f"bounded (≪ {big // small}×)",
                       met=growth <= (1.2 if small >= 100_000 else 2.2), work=work_of)
    report.note(f"PostgreSQL {version} on 127.0.0.1 (TCP), {_pg.settings_text(_pg.DEPLOYMENT_SETTINGS)}")


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[0], run))
