"""What every benchmark shares: arguments, timing statistics, the result table, JSON.

A benchmark module exposes ``NAME`` and ``run(args, report)``; ``report.add(...)``
records one row: the same operation measured for *ours* (``hermes_store``), the raw
``sqlite3`` *floor* (same SQL, same triggers, same durability) and *upstream*
(``hermes_state`` 0.19.0), with the ratios and the target it is judged against. A
benchmark that compares other sides (the two engines) names its three columns with
``report.sides`` (e.g. PostgreSQL, SQLite, none); the tables and the JSON use them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

try:
    from hermes_store.backends.sqlite.library import dbapi  # noqa: E402
except ImportError:  # an older hermes_store first on the path (a baseline side's writers)
    import sqlite3 as _stdlib_sqlite3

    def dbapi():
        return _stdlib_sqlite3

sqlite3 = dbapi()  # the store's SQLite library (its version goes in the machine line)

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
#: built stores are cached here, keyed by workload and schema versions
CACHE = RESULTS / "cache"

SIZES = {"small": (10_000, 100_000), "full": (10_000, 100_000, 1_000_000)}


def human(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k"


# --------------------------------------------------------------------------- arguments

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", choices=sorted(SIZES), default="small",
                   help="small = 10k/100k messages (quick); full = 10k/100k/1M")
    p.add_argument("--rounds", type=int, default=5, help="rounds per figure; the median is reported")
    p.add_argument("--workdir", type=Path, default=RESULTS / "work",
                   help="scratch folder for store copies (deleted per benchmark)")
    p.add_argument("--no-upstream", action="store_true", help="skip the upstream 0.19.0 column")
    p.add_argument("--quiet", action="store_true")


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    add_arguments(p)
    args = p.parse_args(argv)
    args.size_list = SIZES[args.sizes]
    return args


def smallest_and_biggest(args) -> list[int]:
    """The 10k store and the big one (1M with ``--sizes full``, 100k with ``small``)."""
    return [args.size_list[0], args.size_list[-1]]


def log(args, msg: str) -> None:
    if not getattr(args, "quiet", False):
        print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- statistics

def percentile(samples: Sequence[float], q: float) -> float:
    s = sorted(samples)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class Samples:
    """Per-call durations (seconds) grouped by round."""

    rounds: list[list[float]] = field(default_factory=list)

    def new_round(self) -> list[float]:
        self.rounds.append([])
        return self.rounds[-1]

    @property
    def all(self) -> list[float]:
        return [x for r in self.rounds for x in r]

    def median_of_round_medians(self) -> float:
        return statistics.median(self.round_medians())

    def round_medians(self) -> list[float]:
        return [statistics.median(r) for r in self.rounds if r]

    def median_of_round_means(self) -> float:
        return statistics.median(statistics.fmean(r) for r in self.rounds if r)

    def p95(self) -> float:
        return statistics.median(percentile(r, 0.95) for r in self.rounds if r)

    def summary(self) -> dict:
        a = self.all
        return {
            "p50": self.median_of_round_medians(),
            "p95": self.p95(),
            "mean": self.median_of_round_means(),
            "max": max(a) if a else None,
            "n": len(a),
            "rounds": len(self.rounds),
        }


def calls_in_turn(sides: dict[str, Callable[[int], object]], *, warmup: int, rounds: int,
                  per_round: int) -> tuple[dict[str, dict], dict[str, Samples]]:
    """Call ``i`` of every side in turn, who goes first rotating with each call, so that
    disk and page-cache drift during the run lands on every side alike: calls 0 to
    ``warmup`` untimed, then ``rounds`` rounds of ``per_round`` calls. Returns each
    side's wall-clock summary and its calling thread's CPU samples."""
    for i in range(warmup):
        for fn in sides.values():
            fn(i)
    names = list(sides)
    wall = {name: Samples() for name in names}
    cpu = {name: Samples() for name in names}
    wall_clock, cpu_clock = time.perf_counter, time.thread_time
    for r in range(rounds):
        sinks = {name: wall[name].new_round() for name in names}
        cpu_sinks = {name: cpu[name].new_round() for name in names}
        base = warmup + r * per_round
        for i in range(base, base + per_round):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                fn = sides[name]
                c0, t0 = cpu_clock(), wall_clock()
                fn(i)
                sinks[name].append(wall_clock() - t0)
                cpu_sinks[name].append(cpu_clock() - c0)
    return {name: s.summary() for name, s in wall.items()}, cpu


def report_per_call(report, name: str, case: str, res: dict[str, dict],
                    cpu: dict[str, Samples], **facts) -> None:
    """The rows of a per-call write benchmark (ours, floor, upstream): p50 against the
    targets ≤ 1.0× upstream and ≤ 1.3× the floor, mean, p95 and CPU p50."""
    g = lambda side, stat: (res[side][stat] * 1e6) if side in res else None  # noqa: E731
    o, f, u = g("ours", "p50"), g("floor", "p50"), g("upstream", "p50")
    met = (u is None or o <= u * 1.0) and o <= f * 1.3
    report.add(name, case, "per call p50", "µs", o, f, u,
               target="≤1.0× upstream, ≤1.3× floor", met=met, summaries=res, **facts)
    report.add(name, case, "per call mean", "µs", g("ours", "mean"), g("floor", "mean"),
               g("upstream", "mean"))
    report.add(name, case, "per call p95", "µs", g("ours", "p95"), g("floor", "p95"),
               g("upstream", "p95"))
    # CPU time of the calling thread: the fsync wait drops out, leaving what the
    # Python layers (ours: SQLAlchemy + repository; upstream: its own) cost.
    c = {k: v.summary()["p50"] * 1e6 for k, v in cpu.items()}
    report.add(name, case, "CPU per call p50", "µs", c["ours"], c["floor"], c.get("upstream"))


def timed(fn: Callable[[], object], sink: list[float]) -> object:
    t0 = time.perf_counter()
    out = fn()
    sink.append(time.perf_counter() - t0)
    return out


def interleaved(sides: dict[str, tuple[Callable[[], object], "Samples"]], rounds: int,
                iterations: int, *, pause: float = 0.0) -> dict[str, dict]:
    """Time every side ``iterations`` times per round, rotating which side goes first
    each round so no side always runs on a warm (or cold) cache; returns each side's
    summary. ``pause``: seconds idle before each timed call (untimed), so that each call
    starts as an isolated one does rather than hot from the call before."""
    order = list(sides)
    for _ in range(rounds):
        order = order[1:] + order[:1]
        for name in order:
            fn, samples = sides[name]
            sink = samples.new_round()
            for _ in range(iterations):
                if pause:
                    time.sleep(pause)
                t0 = time.perf_counter()
                fn()
                sink.append(time.perf_counter() - t0)
    return {name: samples.summary() for name, (_, samples) in sides.items()}


def paired_ratio(ours: Samples, baseline: Samples) -> float:
    """The median over rounds of each round's ratio (``ours``' p50 ÷ ``baseline``'s p50
    in the same round): rounds run side by side (``interleaved``), so a spell of a shared
    machine that slows a round slows both sides of it and cancels in that round's ratio.
    The ratio of each side's own median over the rounds pairs one side's slow rounds with
    the other's fast ones."""
    return statistics.median(round_ratios(ours, baseline))


def round_ratios(ours: Samples, baseline: Samples) -> list[float]:
    """Each round's ``ours`` p50 ÷ ``baseline`` p50 (rounds run side by side:
    ``interleaved``), in round order."""
    pairs = zip(ours.round_medians(), baseline.round_medians(), strict=True)
    return [a / b for a, b in pairs]


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


# --------------------------------------------------------------------------- subprocess RSS

# Linux folds the pre-exec address space into a child's ru_maxrss, so a child forked
# from this (large) process would report our RSS as its own. A tiny launcher forks the
# measured command instead and reports that grandchild's ru_maxrss.
_LAUNCHER = """
import json, os, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(p.pid, 0)
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - t0,
               "maxrss_kb": usage.ru_maxrss}, fh)
"""


def run_measured(cmd: Sequence[str], *, env: dict | None = None, cwd: Path | None = None) -> dict:
    """Run a command in a child process; its wall time and peak RSS (ru_maxrss)."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".json") as result:
        proc = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, result.name, *map(str, cmd)],
                              env=env, cwd=cwd, stderr=subprocess.PIPE)
        err = proc.stderr.decode(errors="replace")
        try:
            data = json.load(open(result.name))
        except ValueError:
            data = {"rc": proc.returncode}
    if proc.returncode != 0 or data.get("rc") != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({data.get('rc')}):\n{err[-3000:]}")
    return {"seconds": data["seconds"], "peak_rss_mb": data["maxrss_kb"] / 1024.0, "stderr": err[-2000:]}


# --------------------------------------------------------------------------- report

UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}


@dataclass
class Row:
    benchmark: str
    case: str
    metric: str
    unit: str
    ours: float | None
    floor: float | None = None
    upstream: float | None = None
    target: str = ""
    met: bool | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = self.__dict__.copy()
        d["ours_vs_floor"] = ratio(self.ours, self.floor)
        d["ours_vs_upstream"] = ratio(self.ours, self.upstream)
        return d


#: what the three value columns hold, unless a benchmark says otherwise
SIDES = ("ours", "raw floor", "upstream 0.19.0")


class Report:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rows: list[Row] = []
        self.notes: list[str] = []
        #: labels of the ours / floor / upstream columns (None: the column is unused)
        self.sides: tuple = SIDES

    def add(self, benchmark: str, case: str, metric: str, unit: str, ours, floor=None, upstream=None,
            *, target: str = "", met: bool | None = None, **extra) -> Row:
        row = Row(benchmark, case, metric, unit, ours, floor, upstream, target, met, extra)
        self.rows.append(row)
        if not self.args.quiet:
            log(self.args, f"{benchmark} | {case} | {metric}: ours {_fmt(ours)} {unit}, "
                           f"floor {_fmt(floor)}, upstream {_fmt(upstream)}")
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        log(self.args, "note: " + text)

    def write_json(self, name: str) -> Path:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        data = {
            "benchmark": name,
            "when": _dt.datetime.now().isoformat(timespec="seconds"),
            "machine": machine(),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()},
            "rows": [r.as_dict() for r in self.rows],
            "notes": self.notes,
            "sides": list(self.sides),
        }
        path = RESULTS / f"{name}-{stamp}.json"
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False))
        (RESULTS / f"{name}-latest.json").write_text(path.read_text())
        return path


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    return str(v)


def _ratios(r: "Row") -> list[str]:
    if r.unit in ("%", "×", ""):  # shares, speed-ups and counts have no meaningful ratio
        return ["", ""]
    return [_fmt(ratio(r.ours, r.floor)), _fmt(ratio(r.ours, r.upstream))]


COLUMNS = ("benchmark", "case", "metric", "ours", "floor", "upstream", "÷floor", "÷upstream", "target", "met")


def _columns(sides: Sequence | None) -> tuple:
    if sides is None or tuple(sides) == SIDES:
        return COLUMNS
    a, b, c = (side or "-" for side in sides)
    return ("benchmark", "case", "metric", a, b, c, f"{a}÷{b}", f"{a}÷{c}", "target", "met")


def format_rows(rows: Sequence[Row], header: bool = True, sides: Sequence | None = None) -> str:
    columns = _columns(sides)
    table = []
    for r in rows:
        table.append([
            r.benchmark, r.case, f"{r.metric} ({r.unit})" if r.unit else r.metric,
            _fmt(r.ours), _fmt(r.floor), _fmt(r.upstream),
            *_ratios(r), r.target, _fmt(r.met),
        ])
    widths = [max([len(c)] + [len(row[i]) for row in table]) for i, c in enumerate(columns)]
    lines = []
    if header:
        lines.append("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
        lines.append("  ".join("-" * w for w in widths))
    for row in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    return "\n".join(lines)


def format_markdown(rows: Sequence[Row], sides: Sequence | None = None) -> str:
    a, b, c = (side or "-" for side in (sides or SIDES))
    cols = ("case", "metric", a, b, c, f"{a} ÷ {b}", f"{a} ÷ {c}", "target", "met")
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join([
            r.case, f"{r.metric} ({r.unit})" if r.unit else r.metric,
            _fmt(r.ours), _fmt(r.floor), _fmt(r.upstream),
 *_ratios(r),
            r.target or "", _fmt(r.met) if r.met is not None else "",
        ]) + " |")
    return "\n".join(out)


class OtherLoad:
    """The CPU the machine spent on what this container cannot see (another tenant of a
    shared machine), in cores on average, between ``start()`` and ``cores()``: the
    machine's busy time (``/proc/stat``) less that of every process visible here (the
    benchmark, its servers, and the children they reaped). A side-by-side ratio is only
    as good as the quiet it was measured in; this says how quiet it was. None where
    ``/proc`` does not tell (not Linux)."""

    def __init__(self) -> None:
        self._start = self._snapshot()

    @staticmethod
    def _snapshot() -> tuple[float, int, int] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            # user nice system idle iowait irq softirq steal: busy = all but idle, iowait
            busy = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))
            visible = 0
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        stat = Path(entry.path, "stat").read_text()
                    except OSError:
                        continue
                    # utime stime cutime cstime: fields 14-17 (after the ")" of the name)
                    visible += sum(int(v) for v in stat.rsplit(")", 1)[1].split()[11:15])
        except (OSError, ValueError, IndexError):
            return None
        return time.monotonic(), busy, visible

    def cores(self) -> float | None:
        end = self._snapshot()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        hz = os.sysconf("SC_CLK_TCK")
        other = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return max(0.0, other / hz / (end[0] - self._start[0]))


def machine() -> dict:
    info = {
        "nproc": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlite_library": sqlite3.__name__,
        "platform": platform.platform(),
    }
    try:
        import alembic
        import sqlalchemy

        info["sqlalchemy"] = sqlalchemy.__version__
        info["alembic"] = alembic.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        info["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return info


def main_for(module_name: str, description: str, run: Callable, argv=None) -> int:
    """Entry point shared by every ``bench_*.py`` run alone."""
    args = parse_args(description, argv)
    report = Report(args)
    run(args, report)
    path = report.write_json(module_name)
    print()
    print(format_rows(report.rows, sides=report.sides))
    print(f"\nJSON: {path}")
    return 0
