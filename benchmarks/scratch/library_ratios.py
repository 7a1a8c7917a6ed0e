"""A `run.py --sqlite-libraries A,B` result judged run by run (issue 20).

    python benchmarks/scratch/library_ratios.py benchmarks/results/libraries-small-….json

Each library's runs happen at different moments, and a micro-benchmark here moves ±30 %
between processes (CPU frequency), so ``A ÷ B`` of the stores' absolute figures mixes the
library with the moment. Every run also measures upstream 0.19.0 beside the store, on the
standard library in both, so ``ours ÷ upstream`` of the same run cancels the moment.
``run.py`` prints the medians' ratio (its column "A÷B vs upstream"); this prints every
run's figure beside it, as a Markdown table, from a saved result.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from run import _ratio, per_run_ratios  # noqa: E402


def main(path: str) -> None:
    data = json.load(open(path))
    a, b = data["libraries"]
    print(f"| benchmark | case | metric | {a} ÷ upstream | {b} ÷ upstream | {a} ÷ {b} |")
    print("|---|---|---|---|---|---:|")
    for name, runs in data["runs"].items():
        for (case, metric), per in per_run_ratios(runs, (a, b)).items():
            if not per[a] or not per[b]:
                continue
            cells = [", ".join(f"{x:.2f}" for x in per[lib]) for lib in (a, b)]
            print(f"| {name} | {case} | {metric} | {cells[0]} | {cells[1]} | {_ratio(per, a, b):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
