#!/usr/bin/env python3
"""Run every benchmark (or one) and print one table; JSON goes to benchmarks/results/.

    python benchmarks/run.py                          # small: 10k/100k messages
    python benchmarks/run.py --sizes full             # 10k/100k/1M (long: run it with nohup)
    python benchmarks/run.py --only search --rounds 7
    python benchmarks/run.py --markdown results.md    # also write the tables as Markdown

Each benchmark runs in its own process (a clean heap for RSS and caches) and can be
run alone: ``python benchmarks/bench_<name>.py [--sizes …] [--rounds N]``. Built stores
are cached in ``benchmarks/results/cache`` (several GB with ``--sizes full``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, Row, add_arguments, format_markdown, format_rows, machine  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
#: cheap first: building the stores is shared through the cache
ORDER = ("size", "append", "batch", "search", "read", "coldstart", "create", "export",
         "adoption", "pg_writers", "pg_search", "pg_turns", "agent_hook")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", choices=ORDER, help="run only this benchmark (repeatable)")
    p.add_argument("--markdown", type=Path, help="also write the result tables as Markdown here")
    add_arguments(p)
    args = p.parse_args(argv)
    names = [n for n in ORDER if not args.only or n in args.only]
    passthrough = ["--sizes", args.sizes, "--rounds", str(args.rounds), "--workdir", str(args.workdir)]
    if args.no_upstream:
        passthrough.append("--no-upstream")
    if args.quiet:
        passthrough.append("--quiet")

    combined = {"when": _dt.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
                "command": " ".join([sys.executable, "benchmarks/run.py"] + (argv or sys.argv[1:])),
                "benchmarks": {}}
    failed = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(BENCH_DIR / f"bench_{name}.py"), *passthrough])
        elapsed = time.perf_counter() - t0
        latest = RESULTS / f"{name}-latest.json"
        if rc != 0 or not latest.exists() or latest.stat().st_mtime < time.time() - elapsed - 1:
            failed.append(name)
            combined["benchmarks"][name] = {"error": f"exit status {rc}", "seconds": elapsed}
            continue
        data = json.loads(latest.read_text())
        data["seconds"] = elapsed
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


if __name__ == "__main__":
    sys.exit(main())
