"""Two commits' `run.py` results side by side, with the run-to-run noise (issue 18).

    python benchmarks/scratch/compare_runs.py DIR BEFORE AFTER

DIR holds the combined JSON of each run (`benchmarks/results/all-*.json`), each copied
under a name that starts with its label: `BEFORE-….json`, `AFTER-….json` (three runs
each, run alternately). Per row it compares ours ÷ upstream (each run's own baseline,
measured beside it; the floor where there is no upstream column): **noise** is the larger
spread (max ÷ min − 1) of that ratio between the runs of one label, **change** the
median of AFTER ÷ the median of BEFORE − 1. Prints a Markdown table.
"""
import glob
import json
import statistics
import sys
from pathlib import Path


def ratios(run: dict) -> dict:
    out = {}
    for name, bench in run["benchmarks"].items():
        for row in bench.get("rows", []):
            base = row.get("upstream") or row.get("floor")
            if row.get("ours") and base:
                out[(name, row["case"], row["metric"])] = row["ours"] / base
    return out


def main(directory: str, before: str, after: str) -> None:
    runs = {before: [], after: []}
    for path in sorted(glob.glob(str(Path(directory) / "*.json"))):
        label = Path(path).name.split("-")[0]
        if label in runs:
            runs[label].append(ratios(json.loads(Path(path).read_text())))
    b_runs, a_runs = runs[before], runs[after]
    keys = [k for k in b_runs[0] if all(k in r for r in b_runs + a_runs)]
    print(f"| benchmark | case | metric | {before} ÷ upstream ({len(b_runs)} runs) "
          f"| {after} ÷ upstream ({len(a_runs)} runs) | noise | change | |")
    print("|---|---|---|---|---|---|---|---|")
    for key in keys:
        b = [r[key] for r in b_runs]
        a = [r[key] for r in a_runs]
        noise = max(max(b) / min(b), max(a) / min(a)) - 1
        change = statistics.median(a) / statistics.median(b) - 1
        verdict = "within noise" if change <= noise else "**worse**"
        fmt = lambda v: ", ".join(f"{x:.3g}" for x in v)  # noqa: E731
        print(f"| {key[0]} | {key[1]} | {key[2]} | {fmt(b)} | {fmt(a)} | ±{noise * 100:.0f} % "
              f"| {change * 100:+.0f} % | {verdict} |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
