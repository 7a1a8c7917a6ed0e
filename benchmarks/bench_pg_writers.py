#!/usr/bin/env python3
"""W writer processes appending to one store: SQLite file vs PostgreSQL server.

For W = 1, 2, 4, 8, each round starts W processes on a fresh store of each engine (an
empty head store: a copy of a SQLite file made by our migrations, or a new database
copied from a template at head); each process opens its own ``SessionDB``, creates its
own session, appends a few messages untimed, then — released together — calls
``append_message`` for ``--seconds`` (default 3) with the conversation mix of
``bench_append.py`` (user and assistant text, assistant turns with tool calls and their
tool rows), timing every call. Engines alternate within a round, and the order flips
every round, so load drift on the shared machine hits both alike.

Reported per W (median over rounds): aggregate messages/s (appends that returned, all
processes, over the common window), p50 and p99 latency per append (all processes'
calls pooled), write units re-run (busy retries) per run, errors that reached a
caller (summed over rounds), and CPU per append: the writer processes' own, and the
server's (its processes' CPU over the window; SQLite has none) — on this 2-core machine
clients and server share the cores, so that sum bounds PostgreSQL's throughput. Sides: PostgreSQL with deployment settings (fsync,
``synchronous_commit`` and ``full_page_writes`` on: ``_pg.DEPLOYMENT_SETTINGS``), SQLite
as the store runs it (WAL, ``synchronous=FULL``), and — labelled — PostgreSQL with
``synchronous_commit=off`` for that database (commits return before their WAL is on
disk; a server crash can lose the last reported ones).

Target (issue 11): from W = 4 up, PostgreSQL's aggregate throughput ≥ SQLite's, with
zero errors.

    python benchmarks/bench_pg_writers.py [--rounds 5] [--seconds 3] [--writers 1,2,4,8]
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _pg  # noqa: E402
from _common import log, percentile  # noqa: E402

NAME = "pg_writers"
WRITERS = (1, 2, 4, 8)
SECONDS = 3.0
WARMUP = 5
TARGET_FROM = 4
ENGINES = ("postgresql", "sqlite", "postgresql-relaxed")
#: the relaxed side's one difference, set on its database (see the module docstring)
RELAXED = "synchronous_commit"


# --------------------------------------------------------------------------- child

def _mix(seed: int, n: int = 600) -> list[dict]:
    from _workload import Generator

    gen = Generator(10_000, seed=seed)
    out: list[dict] = []
    while len(out) < n:
        out.extend(gen.turn())
    for m in out:
        m.pop("timestamp", None)
    return out[:n]


def child(target: str, writer_id: int) -> None:
    """One writer process (``bench_pg_writers.py child TARGET ID``)."""
    from hermes_store import SessionDB

    db = SessionDB(target)
    session = f"writer-{writer_id}"
    db.create_session(session, source="gateway")
    messages = _mix(writer_id + 1)
    for m in messages[:WARMUP]:  # compile the statements, fill the pool
        db.append_message(session, **m)
    print("ready", flush=True)
    start, deadline = map(float, sys.stdin.readline().split()[1:])
    time.sleep(max(0.0, start - time.time()))
    cpu = time.process_time()
    latencies: list[float] = []
    errors: Counter = Counter()
    i = 0
    while time.time() < deadline:
        m = messages[i % len(messages)]
        i += 1
        t0 = time.perf_counter()
        try:
            db.append_message(session, **m)
        except Exception as exc:  # noqa: BLE001 - counted: an error that reached the caller
            errors[type(exc).__name__] += 1
            continue
        latencies.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu
    print(json.dumps({"appends": len(latencies), "window": deadline - start,
                      "latencies": latencies, "retries": db._units.retries,
                      "errors": dict(errors), "cpu": cpu}), flush=True)
    db.close()


# --------------------------------------------------------------------------- parent

def _command(target: str, writer_id: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "child", target, str(writer_id)]


def run_writers(target: str, writers: int, seconds: float, data_dir: Path | None = None) -> dict:
    reports, _start, server = _pg.run_children([_command(target, w) for w in range(writers)],
                                               seconds, data_dir)
    latencies = [x for r in reports for x in r["latencies"]]
    errors: Counter = Counter()
    for r in reports:
        errors.update(r["errors"])
    return {
        "throughput": sum(r["appends"] for r in reports) / seconds,
        "p50_ms": percentile(latencies, 0.5) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "retries": sum(r["retries"] for r in reports),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "appends": len(latencies),
        # CPU per append that returned: the writer processes', the server's
        "client_cpu_ms": sum(r["cpu"] for r in reports) / max(1, len(latencies)) * 1e3,
        "server_cpu_ms": server / max(1, len(latencies)) * 1e3 if data_dir else None,
    }


class Stores:
    """A fresh empty head store per run, on each engine."""

    def __init__(self, srv, scratch: Path) -> None:
        from hermes_store import SessionDB, migrate

        self.srv = srv
        self.scratch = scratch
        self.template_file = scratch / "template.db"
        SessionDB(self.template_file).close()
        template_url = srv.create_database("writers_template")
        migrate.upgrade(template_url)
        self._runs = 0

    def fresh(self, engine: str) -> str:
        self._runs += 1
        if engine == "sqlite":
            path = self.scratch / f"run{self._runs}.db"
            shutil.copyfile(self.template_file, path)
            return str(path)
        name = f"writers_{self._runs}"
        url = self.srv.create_database(name, template="writers_template")
        if engine == "postgresql-relaxed":
            self.srv.admin(f"ALTER DATABASE {name} SET {RELAXED} = off")
        return url

    def drop(self, engine: str, target: str) -> None:
        if engine == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(target + suffix).unlink(missing_ok=True)
        else:
            self.srv.drop_database(target.rsplit("/", 1)[1])


def run(args, report) -> None:
    report.sides = ("PostgreSQL", "SQLite", "PostgreSQL, synchronous_commit=off")
    writers = tuple(int(w) for w in str(getattr(args, "writers", "") or "").split(",") if w) \
        or WRITERS
    seconds = float(getattr(args, "seconds", None) or SECONDS)
    results: dict = {(e, w): [] for e in ENGINES for w in writers}
    args.workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="writers-", dir=args.workdir))
    try:
        with _pg.server(_pg.DEPLOYMENT_SETTINGS) as srv:
            stores = Stores(srv, scratch)
            version = srv.admin("SHOW server_version")[0][0]
            for r in range(args.rounds):
                order = ENGINES if r % 2 == 0 else tuple(reversed(ENGINES))
                for w in writers:
                    for engine in order:
                        target = stores.fresh(engine)
                        try:
                            res = run_writers(target, w, seconds,
                                              None if engine == "sqlite" else srv.data)
                        finally:
                            stores.drop(engine, target)
                        results[(engine, w)].append(res)
                        log(args, f"round {r + 1}, W={w}, {engine}: {res['throughput']:.0f} msg/s, "
                                  f"p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.1f} ms, "
                                  f"{res['retries']} retries, {res['errors']} errors")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(engine, w, key):
        return statistics.median(x[key] for x in results[(engine, w)])

    def total(engine, w, key):
        return sum(x[key] for x in results[(engine, w)])

    for w in writers:
        pg, lite, relaxed = (med(e, w, "throughput") for e in ENGINES)
        errors_pg = total("postgresql", w, "errors")
        target = met = None
        if w >= TARGET_FROM:
            target = "PostgreSQL ≥ SQLite, 0 errors"
            met = pg >= lite and errors_pg == 0
        case = f"W = {w} writer process{'es' if w > 1 else ''}"
        report.add(NAME, case, "aggregate", "msg/s", pg, lite, relaxed, target=target or "",
                   met=met, runs={e: results[(e, w)] for e in ENGINES})
        for key, metric in (("p50_ms", "p50 per append"), ("p99_ms", "p99 per append")):
            report.add(NAME, case, metric, "ms", *(med(e, w, key) for e in ENGINES))
        report.add(NAME, case, "retries per run", "", *(med(e, w, "retries") for e in ENGINES))
        report.add(NAME, case, "CPU per append: writer processes", "ms",
                   *(med(e, w, "client_cpu_ms") for e in ENGINES))
        report.add(NAME, case, "CPU per append: server", "ms",
                   *(None if e == "sqlite" else med(e, w, "server_cpu_ms") for e in ENGINES))
        kinds = {e: dict(sum((Counter(x["error_kinds"]) for x in results[(e, w)]), Counter()))
                 for e in ENGINES}
        report.add(NAME, case, "errors (all rounds)", "",
                   *(float(total(e, w, "errors")) for e in ENGINES), kinds=kinds)
    report.note(f"PostgreSQL {version} on 127.0.0.1 (TCP), settings: "
                f"{_pg.settings_text(_pg.DEPLOYMENT_SETTINGS)}; the relaxed side's database "
                f"has {RELAXED}=off. SQLite: WAL, synchronous=FULL (the store's own). "
                f"{seconds:g} s per run, {args.rounds} rounds.")


def main(argv=None) -> int:
    import argparse

    from _common import Report, add_arguments, format_rows

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--seconds", type=float, default=SECONDS)
    p.add_argument("--writers", default=",".join(map(str, WRITERS)))
    args = p.parse_args(argv)
    report = Report(args)
    run(args, report)
    path = report.write_json(NAME)
    print()
    print(format_rows(report.rows, sides=report.sides))
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
