#!/usr/bin/env python3
"""Run every benchmark (or one) and print one table; JSON goes to benchmarks/results/.

    python benchmarks/run.py                          # small: 10k/100k messages
    python benchmarks/run.py --sizes full             # 10k/100k/1M (long: run it with nohup)
    python benchmarks/run.py --only search --rounds 7
    python benchmarks/run.py --markdown results.md    # also write the tables as Markdown
    python benchmarks/run.py --only append --only read --only search --only coldstart \
        --sqlite-libraries pysqlite3,sqlite3          # the store on each SQLite library

Each benchmark runs in its own process (a clean heap for RSS and caches) and can be
run alone: ``python benchmarks/bench_<name>.py [--sizes …] [--rounds N]``. Built stores
are cached in ``benchmarks/results/cache`` (several GB with ``--sizes full``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    RESULTS,
    Row,
    _fmt,
    add_arguments,
    format_markdown,
    format_rows,
    machine,
)

BENCH_DIR = Path(__file__).resolve().parent
#: cheap first: building the stores is shared through the cache
ORDER = ("size", "append", "session_writes", "batch", "search", "read", "coldstart", "create",
         "export", "adoption", "pg_writers", "pg_search", "pg_turns", "agent_hook")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", choices=ORDER, help="run only this benchmark (repeatable)")
    p.add_argument("--markdown", type=Path, help="also write the result tables as Markdown here")
    p.add_argument("--sqlite-libraries", metavar="A,B",
                   help="run each benchmark once per SQLite library (HERMES_STATE_SQLITE_MODULE), "
                   "alternating, and print the store's figures side by side (e.g. pysqlite3,sqlite3)")
    p.add_argument("--library-repeats", type=int, default=2,
                   help="with --sqlite-libraries: runs per library, in the order A B, B A, …; "
                   "the median of the runs is reported")
    add_arguments(p)
    args = p.parse_args(argv)
    names = [n for n in ORDER if not args.only or n in args.only]
    passthrough = ["--sizes", args.sizes, "--rounds", str(args.rounds), "--workdir", str(args.workdir)]
    if args.no_upstream:
        passthrough.append("--no-upstream")
    if args.quiet:
        passthrough.append("--quiet")
    if args.sqlite_libraries:
        libraries = [x.strip() for x in args.sqlite_libraries.split(",") if x.strip()]
        return compare_libraries(names, libraries, args, passthrough, argv)

    combined = {"when": _dt.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
                "command": " ".join([sys.executable, "benchmarks/run.py"] + (argv or sys.argv[1:])),
                "benchmarks": {}}
    failed = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        data = _run_one(name, passthrough)
        if "error" in data:
            failed.append(name)
        combined["benchmarks"][name] = data

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"all-{args.sizes}-{stamp}.json"
    out.write_text(json.dumps(combined, indent=2, ensure_ascii=False))

    print("\n=== summary ===")
    md = [f"Machine: {combined['machine']}", ""]
    for name, data in combined["benchmarks"].items():
        if "rows" not in data:
            print(f"\n{name}: FAILED ({data['error']})")
            continue
        rows = [Row(**{k: v for k, v in r.items() if k in Row.__dataclass_fields__}) for r in data["rows"]]
        print(f"\n{name} ({data['seconds']:.0f} s)")
        print(format_rows(rows, sides=data.get("sides")))
        md += [f"### {name}", "", format_markdown(rows, sides=data.get("sides")), ""]
        for note in data.get("notes", []):
            md.append(f"* {note}")
    if args.markdown:
        args.markdown.write_text("\n".join(md) + "\n")
    print(f"\nJSON: {out}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _run_one(name: str, passthrough: list[str], env: dict | None = None) -> dict:
    """One benchmark in its own process: its JSON, or ``{"error", "seconds"}`` when it
    failed (or wrote no fresh result)."""
    t0 = time.perf_counter()
    rc = subprocess.call([sys.executable, str(BENCH_DIR / f"bench_{name}.py"), *passthrough], env=env)
    elapsed = time.perf_counter() - t0
    latest = RESULTS / f"{name}-latest.json"
    if rc != 0 or not latest.exists() or latest.stat().st_mtime < time.time() - elapsed - 1:
        return {"error": f"exit status {rc}", "seconds": elapsed}
    data = json.loads(latest.read_text())
    data["seconds"] = elapsed
    return data


def per_run_ratios(runs: dict[str, list[dict]], libraries) -> dict[tuple, dict[str, list[float]]]:
    """(case, metric) → library → each run's ours ÷ upstream, for one benchmark's runs
    per library (rows where upstream ran beside the store)."""
    out: dict[tuple, dict[str, list[float]]] = {}
    for lib in libraries:
        for data in runs[lib]:
            for row in data["rows"]:
                if row.get("ours") and row.get("upstream"):
                    out.setdefault((row["case"], row["metric"]), {x: [] for x in libraries})[
                        lib].append(row["ours"] / row["upstream"])
    return out


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def _ratio(values: dict[str, list[float]] | None, a: str, b: str) -> float | None:
    """Median of ``a``'s values ÷ median of ``b``'s (None when either is missing)."""
    if not values:
        return None
    top, bottom = _median(values[a]), _median(values[b])
    return top / bottom if top and bottom else None


def compare_libraries(names, libraries, args, passthrough, argv) -> int:
    """The store's own figures (the ``ours`` column) on each SQLite library, in one run:
    every benchmark runs once per library per repeat, the libraries alternating which
    goes first, so a machine that gets busier or quieter meanwhile (a shared one does)
    weighs on both; the median over the repeats is reported, with the ratio A ÷ B — and,
    where upstream ran beside the store (on the standard library in every run), A ÷ B of
    each run's ours ÷ upstream: that cancels the moment a run happened, which a hot call
    here feels as ±30 % between processes (CPU frequency)."""
    from hermes_store.backends.sqlite.library import ENV

    runs: dict[str, dict[str, list[dict]]] = {name: {lib: [] for lib in libraries} for name in names}
    failed = []
    for name in names:
        for rep in range(args.library_repeats):
            order = libraries if rep % 2 == 0 else libraries[::-1]
            for lib in order:
                print(f"\n=== {name} on {lib} (run {rep + 1}/{args.library_repeats}) ===", flush=True)
                data = _run_one(name, passthrough, env=dict(os.environ, **{ENV: lib}))
                if "error" in data:
                    failed.append(f"{name}/{lib}")
                    continue
                runs[name][lib].append(data)
    lines, md = [], []
    a, b = libraries[0], libraries[-1]
    header = ("benchmark", "case", "metric", a, b, f"{a}÷{b}", f"{a}÷{b} vs upstream", "runs")
    table = []
    for name in names:
        keyed: dict[tuple, dict[str, list[float]]] = {}
        units = {}
        for lib in libraries:
            for data in runs[name][lib]:
                for row in data["rows"]:
                    if row.get("ours") is None:
                        continue
                    key = (row["case"], row["metric"])
                    units[key] = row["unit"]
                    keyed.setdefault(key, {x: [] for x in libraries})[lib].append(row["ours"])
        against = per_run_ratios(runs[name], libraries)
        for key, values in keyed.items():
            case, metric = key
            table.append((name, case, f"{metric} ({units[key]})",
                          *(_fmt(_median(values[lib])) for lib in (a, b)),
                          _fmt(_ratio(values, a, b)), _fmt(_ratio(against.get(key), a, b)),
                          "/".join(str(len(values[lib])) for lib in libraries)))
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
              for i, h in enumerate(header)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in table]
    md.append("| " + " | ".join(header) + " |")
    md.append("|" + "---|" * len(header))
    md += ["| " + " | ".join(row) + " |" for row in table]
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"libraries-{args.sizes}-{stamp}.json"
    out.write_text(json.dumps({
        "when": _dt.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
        "command": " ".join([sys.executable, "benchmarks/run.py"] + (argv or sys.argv[1:])),
        "libraries": libraries, "runs": runs,
    }, indent=2, ensure_ascii=False))
    print(f"\n=== the store on {' vs '.join(libraries)} (median of runs) ===")
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(md) + "\n")
    print(f"\nJSON: {out}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
