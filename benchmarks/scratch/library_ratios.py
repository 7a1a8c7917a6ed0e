"""A `run.py --sqlite-libraries A,B` result judged run by run (issue 20).

    python benchmarks/scratch/library_ratios.py benchmarks/results/libraries-small-….json

Each library's runs happen at different moments, and a micro-benchmark here moves ±30 %
between processes (CPU frequency), so ``A ÷ B`` of the stores' absolute figures mixes the
library with the moment. Every run also measures upstream 0.19.0 beside the store, on the
standard library in both, so ``ours ÷ upstream`` of the same run cancels the moment;
this prints that ratio per run, and ``A ÷ B`` of its medians. Prints a Markdown table.
"""
import json
import statistics
import sys


def main(path: str) -> None:
    data = json.load(open(path))
    a, b = data["libraries"]
    table: dict[tuple, dict[str, list[float]]] = {}
    for name, runs in data["runs"].items():
        for lib in (a, b):
            for run in runs[lib]:
                for row in run["rows"]:
                    if row.get("ours") and row.get("upstream"):
                        key = (name, row["case"], row["metric"])
                        table.setdefault(key, {a: [], b: []})[lib].append(row["ours"] / row["upstream"])
    print(f"| benchmark | case | metric | {a} ÷ upstream | {b} ÷ upstream | {a} ÷ {b} |")
    print("|---|---|---|---|---|---:|")
    for (name, case, metric), per in table.items():
        if not per[a] or not per[b]:
            continue
        cells = [", ".join(f"{x:.2f}" for x in per[lib]) for lib in (a, b)]
        change = statistics.median(per[a]) / statistics.median(per[b])
        print(f"| {name} | {case} | {metric} | {cells[0]} | {cells[1]} | {change:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
