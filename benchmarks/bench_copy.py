#!/usr/bin/env python3
"""``hermes-store db copy`` throughput and peak memory: SQLite → PostgreSQL and back.

    python benchmarks/bench_copy.py [--messages 1000000] [--url postgresql+psycopg://…/postgres]
                                    [--batch-rows 5000] [--json]

The source is the benchmarks' cached head store of ``--messages`` messages
(``_stores.store("head", N)``: the shared workload — sessions of every source, tool rows,
CJK text — with its FTS indexes filled). A PostgreSQL server is needed: a throwaway one
(``tests/support/postgres.py``) restarted with PostgreSQL's default durability (``fsync``,
``synchronous_commit`` and ``full_page_writes`` on: the test suite's server turns them
off), unless ``--url`` names a maintenance database on a server to use (a scratch
database is created there and dropped).

Each step is its own child process, its peak RSS read from the kernel (``wait4``, through
a tiny launcher as ``_common.run_measured`` does):

* read SQLite (baseline) — the copy's own reader (``dbcopy.read_batches``, same batch
  sizes) streaming every table of the source without writing anything: the floor of
  the read side, and the memory of the interpreter, SQLAlchemy and the driver;
* copy SQLite → PostgreSQL — ``hermes-store db copy SRC URL --json`` into an empty
  database (baseline schema, load with COPY, indexes and FTS built after, verified);
* read PostgreSQL (baseline) — the same reader over the PostgreSQL copy;
* copy PostgreSQL → SQLite — ``hermes-store db copy URL NEW.db --json`` into a new file
  (migrations, load, FTS rebuild, verified).

Messages/s is end to end (load, index builds and verification included); the copy's
own report gives the split. Target: every copy's peak RSS < 200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(ROOT / "tests"))

TARGET_MB = 200


def _command() -> list[str]:
    script = shutil.which("hermes-store")
    return [script] if script else [sys.executable, "-m", "hermes_store"]


# A child forked from this process would report this process's RSS as a floor of its
# own (Linux folds the pre-exec address space into ru_maxrss): a tiny launcher (as
# _common.run_measured) forks the measured command and reports that grandchild's peak.
_LAUNCHER = """
import json, os, subprocess, sys, time
t0 = time.perf_counter()
with open(sys.argv[2], "wb") as out:
    p = subprocess.Popen(sys.argv[3:], stdout=out)
    _, status, usage = os.wait4(p.pid, 0)
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - t0,
               "maxrss_kb": usage.ru_maxrss}, fh)
"""


def child(argv: list[str]) -> tuple[float, float, str]:
    """(peak RSS in MB, seconds, stdout) of one command that must succeed."""
    with tempfile.TemporaryDirectory() as tmp:
        result, out = Path(tmp) / "result.json", Path(tmp) / "stdout"
        proc = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, str(result), str(out), *argv],
                              stderr=subprocess.PIPE)
        data = json.loads(result.read_text()) if result.exists() else {"rc": proc.returncode}
        if proc.returncode != 0 or data["rc"] != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({data['rc']}): "
                             f"{proc.stderr.decode(errors='replace')[-2000:]}")
        return data["maxrss_kb"] / 1024, data["seconds"], out.read_text()


def read_all(target: str, batch_rows: int) -> dict:
    """The baseline child: stream every table with the copy's reader, write nothing."""
    from hermes_store import dbcopy, location
    from hermes_store.dbcopy.sides import Side
    from hermes_store.dbcopy.tables import specs

    side = Side(location.resolve(target), writable=False)
    counts = {}
    try:
        with side.snapshot() as conn:
            present = side.tables(conn)
            for spec in specs(with_topics=False):
                if spec.name not in present:
                    continue
                n = 0
                for batch in dbcopy.read_batches(conn, spec, max_rows=batch_rows):
                    n += len(batch.rows)
                counts[spec.name] = n
    finally:
        side.close()
    return counts


def durable_server():
    """A throwaway server with PostgreSQL's default durability (see module docstring)."""
    from support.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL binaries not found: install postgresql or pass --url")
    server = PostgresServer(bindir)
    server.start()
    options = " ".join([
        "-c listen_addresses=''",
        f"-c unix_socket_directories='{server.base}'",
        f"-p {server.port}",
        "-c fsync=on -c synchronous_commit=on -c full_page_writes=on",
        "-c max_connections=20",
    ])
    server._run(str(bindir / "pg_ctl"), "restart", "-D", str(server.data), "-w", "-m", "fast",
                "-t", "60", "-l", str(server.log), "-o", options)
    return server


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--url", help="a server's maintenance database (a scratch database is made there)")
    ap.add_argument("--batch-rows", type=int, default=5000)
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--read-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.read_child:
        started = time.monotonic()
        counts = read_all(args.read_child, args.batch_rows)
        print(json.dumps({"counts": counts, "seconds": time.monotonic() - started}))
        return 0

    import _stores
    import psycopg
    import sqlalchemy as sa

    def log(msg: str) -> None:
        print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    source = _stores.store("head", args.messages, log=log)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="hermes-copy-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    server = None
    if args.url:
        base = sa.engine.make_url(args.url)
    else:
        log("starting a throwaway PostgreSQL server (default durability)")
        server = durable_server()
        base = sa.engine.make_url(server.url("postgres"))
    name = f"copy_bench_{os.getpid()}"
    admin = dict(host=base.query.get("host") or base.host, port=base.port or 5432,
                 user=base.username, password=base.password, dbname=base.database, autocommit=True)
    try:
        with psycopg.connect(**{k: v for k, v in admin.items() if v is not None}) as conn:
            conn.execute(f'CREATE DATABASE "{name}" ENCODING \'UTF8\' TEMPLATE template0')
        url = base.set(database=name).render_as_string(hide_password=False)
        back = work / "back.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{back}{suffix}").unlink(missing_ok=True)
        me = [sys.executable, str(Path(__file__).resolve()), "--batch-rows", str(args.batch_rows)]
        copy = _command() + ["db", "copy", "--batch-rows", str(args.batch_rows), "--json"]

        steps = {}
        log("baseline: streaming read of the SQLite source")
        mb, s, out = child(me + ["--read-child", str(source)])
        steps["read_sqlite"] = {"peak_rss_mb": mb, "seconds": s, **json.loads(out)}
        log("db copy SQLite -> PostgreSQL")
        mb, s, out = child(copy + [str(source), url])
        steps["copy_to_postgresql"] = {"peak_rss_mb": mb, "seconds": s, "report": json.loads(out)}
        log("baseline: streaming read of the PostgreSQL copy")
        mb, s, out = child(me + ["--read-child", url])
        steps["read_postgresql"] = {"peak_rss_mb": mb, "seconds": s, **json.loads(out)}
        log("db copy PostgreSQL -> SQLite")
        mb, s, out = child(copy + [url, str(back)])
        steps["copy_to_sqlite"] = {"peak_rss_mb": mb, "seconds": s, "report": json.loads(out)}

        messages = steps["read_sqlite"]["counts"]["messages"]
        with psycopg.connect(**{**{k: v for k, v in admin.items() if v is not None},
                                "dbname": name}) as conn:
            pg_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        result = {
            "messages": messages,
            "source_bytes": source.stat().st_size,
            "postgresql_bytes": pg_bytes,
            "back_bytes": back.stat().st_size,
            "batch_rows": args.batch_rows,
            "server": "throwaway, default durability" if server else "given",
            "target_mb": TARGET_MB,
        }
        for key, step in steps.items():
            step["messages_per_second"] = round(messages / step["seconds"], 1)
            step["peak_rss_mb"] = round(step["peak_rss_mb"], 1)
            step["seconds"] = round(step["seconds"], 2)
            if "report" in step:
                report = step.pop("report")
                assert report["ok"], report
                step.update({k: report[k] for k in ("load_seconds", "finish_seconds", "verify_seconds")})
            result[key] = step
        result["ok"] = all(result[k]["peak_rss_mb"] < TARGET_MB
                           for k in ("copy_to_postgresql", "copy_to_sqlite"))
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"{messages:,} messages; SQLite {result['source_bytes'] / 2**20:.0f} MiB -> "
                  f"PostgreSQL {pg_bytes / 2**20:.0f} MiB -> SQLite {result['back_bytes'] / 2**20:.0f} MiB")
            print(f"{'step':<28}{'seconds':>9}{'msg/s':>10}{'peak RSS':>10}   load / indexes / verify s")
            for key, label in (("read_sqlite", "read SQLite (baseline)"),
                               ("copy_to_postgresql", "db copy SQLite -> PG"),
                               ("read_postgresql", "read PostgreSQL (baseline)"),
                               ("copy_to_sqlite", "db copy PG -> SQLite")):
                step = result[key]
                split = (f"   {step['load_seconds']:.0f} / {step['finish_seconds']:.0f} / "
                         f"{step['verify_seconds']:.0f}") if "load_seconds" in step else ""
                print(f"{label:<28}{step['seconds']:>9.1f}{step['messages_per_second']:>10.0f}"
                      f"{step['peak_rss_mb']:>8.1f} MB{split}")
            print(f"target: peak RSS < {TARGET_MB} MB: {'met' if result['ok'] else 'MISSED'}")
        out_file = BENCH_DIR / "results" / f"copy-{messages}.json"
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(result, indent=2))
        return 0 if result["ok"] else 1
    finally:
        if server is not None:
            server.stop()
        else:
            with psycopg.connect(**{k: v for k, v in admin.items() if v is not None}) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
