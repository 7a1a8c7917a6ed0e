#!/usr/bin/env python3
"""search_messages latency per query kind at 10k / 100k (/ 1M) messages.

Query kinds: word, phrase, prefix, boolean, hyphenated, CJK (trigram), too-short CJK
(fallback), and a word with source/role filters. Each side runs each query
``ITERATIONS`` times per round (after one warm-up call); the order of the sides rotates
every round. p50/p95 are the median over rounds of each round's percentile.

The floor replays the SQL our ``search_messages`` sent for that query (recorded in an
untimed pass) on a plain sqlite3 connection. ``work`` counts SQLite VM instructions per
query (progress handler, in thousands) — a clock-free measure of how much of the table
a query touches; for the too-short CJK fallback it shows whether the work is bounded as
the store grows.

Target: p50 ≤ upstream at 10k and 100k for every kind; the fallback bounded.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
import _upstream  # noqa: E402
from _common import Samples, human, interleaved, log, main_for  # noqa: E402
from _floor import Floor, Recorder, engine_of, statements  # noqa: E402

NAME = "search"
#: store sizes the target applies to (issue 12: every kind at 10k as well as 100k)
TARGET_SIZES = (10_000, 100_000)
ITERATIONS = 5
WORK_TICK = 1000  # VM instructions per progress-handler callback

QUERIES = (
    ("word", "docker", {}),
    ("phrase", '"docker compose"', {}),
    ("prefix", "deploy*", {}),
    ("boolean", "kubernetes OR swarm NOT docker", {}),
    ("hyphenated", "chat-send", {}),
    ("CJK trigram", "记忆断裂", {}),
    ("CJK too short", "记忆", {}),
    ("word + filters", "docker", {"source_filter": ["telegram", "discord"], "role_filter": ["user", "assistant"]}),
    ("word, newest first", "docker", {"sort": "newest"}),
)


class WorkCounter:
    """Counts SQLite VM instructions on one sqlite3 connection (in units of WORK_TICK)."""

    def __init__(self, conn):
        self.conn = conn
        self.ticks = 0

    def _tick(self):
        self.ticks += 1
        return 0

    def measure(self, fn):
        self.ticks = 0
        self.conn.set_progress_handler(self._tick, WORK_TICK)
        try:
            out = fn()
        finally:
            self.conn.set_progress_handler(None, 0)
        return out, self.ticks


def run(args, report) -> None:
    from hermes_store import SessionDB

    fallback_work: dict[int, int] = {}
    for n in args.size_list:
        work = args.workdir / f"search-{human(n)}"
        ours_path = _stores.working_copy(_stores.store("head", n, log=lambda m: log(args, m)), work, "ours.db")
        ours = SessionDB(ours_path)
        floor = Floor(ours_path)
        floor_work = WorkCounter(floor.conn)
        up = up_work = None
        if not args.no_upstream:
            hs = _upstream.load(args.workdir / "upstream-home")
            up_path = _stores.working_copy(_stores.store("upstream", n, log=lambda m: log(args, m)),
                                           work, "upstream.db")
            up = hs.SessionDB(up_path)
            up_work = WorkCounter(up._conn)

        for kind, query, kwargs in QUERIES:
            # Untimed: record our SQL for this query, and check every side answers.
            rec = Recorder(engine_of(ours))
            with rec.call():
                ours_hits = ours.search_messages(query, **kwargs)
            rec.close()
            call = rec.calls[0]
            _, floor_ticks = floor_work.measure(lambda: floor.replay(call))
            if kind == "CJK too short":
                fallback_work[n] = floor_ticks
            sides = {
                "ours": (lambda: ours.search_messages(query, **kwargs), Samples()),
                "floor": (lambda: floor.replay(call), Samples()),
            }
            up_hits = up_ticks = None
            if up is not None:
                up_hits, up_ticks = up_work.measure(lambda: up.search_messages(query, **kwargs))
                sides["upstream"] = (lambda: up.search_messages(query, **kwargs), Samples())
            res = interleaved(sides, args.rounds, ITERATIONS)
            g = lambda side, stat: (res[side][stat] * 1e3) if side in res else None  # noqa: E731
            case = f"{kind} «{query}», {human(n)}"
            o, u = g("ours", "p50"), g("upstream", "p50")
            target, met = "", None
            if n in TARGET_SIZES and u is not None:
                target, met = "p50 ≤ upstream", o <= u
            report.add(NAME, case, "p50", "ms", o, g("floor", "p50"), u, target=target, met=met,
                       hits_ours=len(ours_hits), hits_upstream=None if up_hits is None else len(up_hits),
                       work_kinstr_floor=floor_ticks, work_kinstr_upstream=up_ticks,
                       statements=statements(call),
                       summaries=res)
            report.add(NAME, case, "p95", "ms", g("ours", "p95"), g("floor", "p95"), g("upstream", "p95"))
            report.add(NAME, case, "work", "k VM instr.", float(floor_ticks), None,
                       None if up_ticks is None else float(up_ticks),
                       hits_ours=len(ours_hits), hits_upstream=None if up_hits is None else len(up_hits))
        ours.close()
        floor.close()
        if up is not None:
            up.close()
        for p in work.glob("*"):
            p.unlink()
    if len(fallback_work) >= 2:
        small, big = sorted(fallback_work)[-2:]  # the two largest stores
        growth = fallback_work[big] / max(1, fallback_work[small])
        report.add(NAME, f"CJK too short: work {human(big)} ÷ {human(small)}", "growth", "×", growth,
                   target=f"bounded (≪ {big // small}×)", met=growth <= 2.0,
                   work_kinstr=fallback_work)


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
