#!/usr/bin/env python3
"""W writer processes doing agent turns on their own sessions, over a network: does
write throughput grow with the writers (issue 17, decision D16)?

Each writer process opens its own ``SessionDB`` on one PostgreSQL database and, released
together with the others, runs conversations on sessions of its own for ``--seconds``
(default 4): ``create_session`` (a gateway's, with the system prompt every gateway
session shares), ``set_session_title`` (a title of its own), ``--turns`` agent turns of
``append_message`` (the user's message), ``append_message`` (the assistant's answer;
every third one with a tool call) and ``update_token_counts`` (the API call's usage),
then ``end_session``. Every one of these calls is one write unit; the figure is
aggregate units/s over the common window (units that returned, all writers).

Between the writers and the server sits a loopback TCP proxy of the benchmark's own
(``_delay_proxy.py``) that holds every chunk ``--delay-ms`` each way (default 0.5 ms:
~1 ms per round trip, a client and its server in one data centre); the same runs are
repeated without the proxy (the client on the server's loopback port). With a network
in between, a unit that runs alone holds its lock for several round trips, so a store
that runs such units one at a time is capped by latency, not by CPU.

Sides: ``scoped`` — this checkout's ``hermes_store`` (a unit locks the sessions and
titles it decides on, D16) — and ``store lock`` — the same calls on the store before it
(``--baseline-rev``, default ``aeac7d2``: issue 18's landing, once tagged ``d17-landed``;
every unit but appends and handoff transitions takes one exclusive lock per store), exported with ``git archive`` into the
work directory and put first on the writers' ``PYTHONPATH``; each writer reports the
package it imported. Sides alternate within a round and the order flips each round;
every run gets a fresh database copied from a template at head. The server is durable
(``_pg.DEPLOYMENT_SETTINGS``).

Target (issue 17): with ~1 ms round trips, scoped W = 16 ≥ 4 × scoped W = 1, zero errors.

    python benchmarks/bench_pg_turns.py [--rounds 3] [--seconds 4] [--writers 1,4,16]
        [--delay-ms 0.5] [--baseline-rev aeac7d2 | --baseline-src DIR]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _delay_proxy  # noqa: E402
import _pg  # noqa: E402
from _common import ROOT, log, percentile  # noqa: E402

NAME = "pg_turns"
WRITERS = (1, 4, 16)
SECONDS = 4.0
TURNS = 3
DELAY_MS = 0.5
#: a commit, not the tag it once had: a clone carries the commits, not local tags
BASELINE_REV = "aeac7d2"
TARGET_SPEEDUP = 4.0
SIDES = ("scoped", "store lock")
#: what every gateway session starts with (one text, so one ``system_prompts`` row)
SYSTEM_PROMPT = "You are Hermes, a helpful agent. " * 20


# --------------------------------------------------------------------------- child

def child(target: str, writer_id: int, turns: int) -> None:
    """One writer process (``bench_pg_turns.py child TARGET ID TURNS``)."""
    import hermes_store
    from hermes_store import SessionDB

    db = SessionDB(target)
    latencies: list[float] = []
    errors: Counter = Counter()
    units = 0

    def call(fn, *args, **kwargs) -> None:
        nonlocal units
        t0 = time.perf_counter()
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - counted: an error that reached the caller
            errors[type(exc).__name__] += 1
            return
        latencies.append(time.perf_counter() - t0)
        units += 1

    def conversation(sid: str, title: str) -> None:
        call(db.create_session, sid, "telegram", model="gpt-5", system_prompt=SYSTEM_PROMPT,
             user_id=f"user-{writer_id}", chat_id=f"chat-{writer_id}")
        call(db.set_session_title, sid, title)
        for t in range(turns):
            call(db.append_message, sid, "user", f"question {t} of {sid}: how do I fix the build?")
            tool = [{"id": f"c{t}", "type": "function",
                     "function": {"name": "terminal", "arguments": "{\"cmd\": \"make\"}"}}]
            call(db.append_message, sid, "assistant", f"answer {t}: run make again",
                 tool_calls=tool if t % 3 == 2 else None)
            call(db.update_token_counts, sid, input_tokens=1200, output_tokens=300,
                 cache_read_tokens=800, model="gpt-5", billing_provider="openai",
                 billing_base_url="https://api.openai.com/v1", billing_mode="api",
                 estimated_cost_usd=0.004, api_call_count=1)
        call(db.end_session, sid, "user_exit")

    # warm up untimed: statements compiled (and prepared by psycopg), the pool filled
    for n in range(2):
        conversation(f"warmup-{writer_id}-{n}", f"Warm-up {writer_id}.{n}")
    latencies.clear()
    errors.clear()
    units = 0
    print("ready", flush=True)
    start, deadline = map(float, sys.stdin.readline().split()[1:])
    time.sleep(max(0.0, start - time.time()))
    cpu = time.process_time()
    retries = db._units.retries
    n = 0
    while time.time() < deadline:
        conversation(f"w{writer_id}-s{n}", f"Fix the build {writer_id}.{n}")
        n += 1
    cpu = time.process_time() - cpu
    # units that finished after the deadline still count: the window is until the
    # last writer's last unit returned (reported by the parent as wall time)
    print(json.dumps({"units": units, "latencies": latencies, "errors": dict(errors),
                      "retries": db._units.retries - retries, "cpu": cpu,
                      "finished": time.time(), "sessions": n,
                      "package": str(Path(hermes_store.__file__).resolve().parent)}),
          flush=True)
    db.close()


# --------------------------------------------------------------------------- parent

def run_writers(target: str, writers: int, seconds: float, turns: int, src: Path | None,
                data_dir: Path) -> dict:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    commands = [[sys.executable, str(Path(__file__).resolve()), "child", target, str(w), str(turns)]
                for w in range(writers)]
    reports, start, server = _pg.run_children(commands, seconds, data_dir, env=env)
    window = max(r["finished"] for r in reports) - start
    latencies = [x for r in reports for x in r["latencies"]]
    errors: Counter = Counter()
    for r in reports:
        errors.update(r["errors"])
    units = sum(r["units"] for r in reports)
    return {
        "throughput": units / window,
        "window": window,
        "units": units,
        "p50_ms": percentile(latencies, 0.5) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "retries": sum(r["retries"] for r in reports),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "client_cpu_ms": sum(r["cpu"] for r in reports) / max(1, units) * 1e3,
        "server_cpu_ms": server / max(1, units) * 1e3,
        "packages": sorted({r["package"] for r in reports}),
    }


def baseline_tree(args, scratch: Path) -> tuple[Path, str]:
    """The store-lock side's source: ``--baseline-src``, or ``--baseline-rev`` exported."""
    if args.baseline_src:
        return Path(args.baseline_src).resolve(), str(args.baseline_src)
    rev = args.baseline_rev
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    out = scratch / f"baseline-{commit}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "hermes_store"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out, f"{rev} ({commit})"


def run(args, report) -> None:
    report.sides = (*SIDES, None)
    writers = tuple(int(w) for w in str(args.writers).split(",") if w)
    args.workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="turns-", dir=args.workdir))
    latencies = (("1 ms", args.delay_ms), ("none", None))
    results: dict = {(s, lat, w): [] for s in SIDES for lat, _ in latencies for w in writers}
    try:
        baseline, baseline_name = baseline_tree(args, scratch)
        sources = {"scoped": None, "store lock": baseline}
        with _pg.server(_pg.DEPLOYMENT_SETTINGS) as srv:
            from hermes_store import migrate

            migrate.upgrade(srv.create_database("turns_template"))
            version = srv.admin("SHOW server_version")[0][0]
            runs = 0

            def url_for(port: int) -> str:
                return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

            rtt_direct = _delay_proxy.measure_rtt(srv.port, url_for)
            with _delay_proxy.start("127.0.0.1", srv.port, args.delay_ms) as proxy_port:
                rtt_proxy = _delay_proxy.measure_rtt(proxy_port, url_for)
                log(args, f"SELECT 1 round trip: {rtt_direct * 1e3:.3f} ms direct, "
                          f"{rtt_proxy * 1e3:.3f} ms through the proxy")
                for r in range(args.rounds):
                    order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
                    for lat, delay in latencies:
                        port = proxy_port if delay is not None else srv.port
                        for w in writers:
                            for side in order:
                                runs += 1
                                name = f"turns_{runs}"
                                srv.create_database(name, template="turns_template")
                                target = (f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}")
                                try:
                                    res = run_writers(target, w, args.seconds, args.turns,
                                                      sources[side], srv.data)
                                finally:
                                    srv.drop_database(name)
                                results[(side, lat, w)].append(res)
                                log(args, f"round {r + 1}, latency {lat}, W={w}, {side}: "
                                          f"{res['throughput']:.0f} units/s, p50 "
                                          f"{res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.1f} ms, "
                                          f"{res['retries']} retries, {res['errors']} errors "
                                          f"({res['packages'][0]})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(side, lat, w, key):
        return statistics.median(x[key] for x in results[(side, lat, w)])

    def total(side, lat, w, key):
        return sum(x[key] for x in results[(side, lat, w)])

    for lat, _ in latencies:
        base = {s: med(s, lat, writers[0], "throughput") for s in SIDES}
        for w in writers:
            case = f"latency {lat}, W = {w}"
            tp = [med(s, lat, w, "throughput") for s in SIDES]
            target = met = None
            if lat == "1 ms" and w == max(writers) and writers[0] == 1:
                target = f"scoped W={w} ≥ {TARGET_SPEEDUP:g} × scoped W=1, 0 errors"
                met = (tp[0] >= TARGET_SPEEDUP * base["scoped"]
                       and total("scoped", lat, w, "errors") == 0)
            report.add(NAME, case, "aggregate", "units/s", *tp, target=target or "", met=met,
                       runs={s: results[(s, lat, w)] for s in SIDES})
            report.add(NAME, case, f"÷ W={writers[0]}", "×",
                       *(med(s, lat, w, "throughput") / base[s] for s in SIDES))
            for key, metric in (("p50_ms", "p50 per unit"), ("p99_ms", "p99 per unit")):
                report.add(NAME, case, metric, "ms", *(med(s, lat, w, key) for s in SIDES))
            report.add(NAME, case, "retries per run", "", *(med(s, lat, w, "retries") for s in SIDES))
            report.add(NAME, case, "CPU per unit: writers", "ms",
                       *(med(s, lat, w, "client_cpu_ms") for s in SIDES))
            report.add(NAME, case, "CPU per unit: server", "ms",
                       *(med(s, lat, w, "server_cpu_ms") for s in SIDES))
            report.add(NAME, case, "errors (all rounds)", "",
                       *(float(total(s, lat, w, "errors")) for s in SIDES))
    report.note(f"PostgreSQL {version} on 127.0.0.1, settings: "
                f"{_pg.settings_text(_pg.DEPLOYMENT_SETTINGS)}. Latency '1 ms': through "
                f"_delay_proxy.py, {args.delay_ms:g} ms each way (SELECT 1 took "
                f"{rtt_proxy * 1e3:.2f} ms through it, {rtt_direct * 1e3:.2f} ms direct). "
                f"'store lock' side: {baseline_name}. {args.seconds:g} s per run, "
                f"{args.turns} turns per session, {args.rounds} rounds, "
                f"{os.cpu_count()} cores shared with other jobs.")


def main(argv=None) -> int:
    import argparse

    from _common import Report, add_arguments, format_rows

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--seconds", type=float, default=SECONDS)
    p.add_argument("--writers", default=",".join(map(str, WRITERS)))
    p.add_argument("--turns", type=int, default=TURNS)
    p.add_argument("--delay-ms", type=float, default=DELAY_MS, help="added each way")
    p.add_argument("--baseline-rev", default=BASELINE_REV)
    p.add_argument("--baseline-src", help="a source tree holding the baseline hermes_store")
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
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
