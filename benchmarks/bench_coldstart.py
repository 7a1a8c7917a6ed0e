#!/usr/bin/env python3
"""Cold start: a new process that imports the store, opens a file at head, reads one
session and closes it (what every ``hermes`` CLI run, cron job and subprocess pays).

* ours      — ``from hermes_store import SessionDB``; ``SessionDB(path)``;
              ``get_session(id)``; ``close()`` on a copy of the head store;
* upstream  — the same with ``hermes_state.SessionDB`` 0.19.0 on its own store (its
              open runs its schema check, as every upstream process does);
* floor     — ``import sqlite3`` (or ``pysqlite3``, as the store's library choice
              would pick), one ``SELECT * FROM sessions WHERE id = ?``: the
              interpreter's own start plus SQLite.

Also ours through the CLI: ``hermes-store --db PATH sessions show ID --json``
(``python -m hermes_store``), which adds Typer and Rich; and, for reference, a process
that only runs ``import sqlalchemy``: what any SQLAlchemy-based store pays before its
own first line (the floor of this package's design, compared with upstream's whole run).

Each figure is the wall time of the whole child process, measured by the parent; the
sides run in turn (who goes first rotates) with the same interpreter and environment,
bytecode caches written by a warm-up run (``PYTHONDONTWRITEBYTECODE`` is cleared for the
children, as in an ordinary installation). Targets: ours ≤ 2× upstream (stretch ≤ 1.5×,
issue 12); ours ≤ 1.2× and the CLI ≤ 1.35× the import-sqlalchemy process (issue 19,
per-run ratios paired with the reference run beside them).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
import _upstream  # noqa: E402
from _common import ROOT, Samples, human, log, main_for  # noqa: E402

NAME = "coldstart"
STORE_SIZE = 10_000
SESSION = "bench_0000001"
RUNS_PER_ROUND = 10
TARGET, STRETCH = 2.0, 1.5
#: issue 19: ours, and the CLI, against a process that only imports SQLAlchemy
REF_TARGET, CLI_REF_TARGET = 1.2, 1.35

OURS = """
import sys
from hermes_store import SessionDB
db = SessionDB(sys.argv[1])
row = db.get_session(sys.argv[2])
db.close()
assert row is not None and "alembic" not in sys.modules, sorted(sys.modules)
"""

UPSTREAM = """
import sys
from pathlib import Path
sys.path.append(sys.argv[3])
import hermes_state
db = hermes_state.SessionDB(Path(sys.argv[1]))
row = db.get_session(sys.argv[2])
db.close()
assert row is not None
"""

SQLALCHEMY_ONLY = """
import sqlalchemy
"""

FLOOR = """
import os, sys
try:  # the library hermes_store would choose here (HERMES_STATE_SQLITE_MODULE, else pysqlite3)
    if os.environ.get("HERMES_STATE_SQLITE_MODULE") == "sqlite3":
        raise ImportError
    from pysqlite3 import dbapi2 as sqlite3
except ImportError:
    import sqlite3
conn = sqlite3.connect(sys.argv[1])
row = conn.execute("SELECT * FROM sessions WHERE id = ?", (sys.argv[2],)).fetchone()
conn.close()
assert row is not None
"""


def _child_env(home: Path) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["HERMES_HOME"] = str(home)
    return env


def _timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}… failed:\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def run(args, report) -> None:
    work = args.workdir / "coldstart"
    home = args.workdir / "coldstart-home"
    home.mkdir(parents=True, exist_ok=True)
    ours_path = _stores.working_copy(_stores.store("head", STORE_SIZE, log=lambda m: log(args, m)),
                                     work, "ours.db")
    floor_path = _stores.working_copy(ours_path, work, "floor.db")
    env = _child_env(home)
    py = sys.executable
    sides = {
        "ours": [py, "-c", OURS, str(ours_path), SESSION],
        "floor": [py, "-c", FLOOR, str(floor_path), SESSION],
        "sqlalchemy": [py, "-c", SQLALCHEMY_ONLY],
        "cli": [py, "-m", "hermes_store", "--db", str(ours_path), "sessions", "show", SESSION,
                "--json"],
    }
    if not args.no_upstream:
        up_path = _stores.working_copy(_stores.store("upstream", STORE_SIZE, log=lambda m: log(args, m)),
                                       work, "upstream.db")
        sides["upstream"] = [py, "-c", UPSTREAM, str(up_path), SESSION,
                             str(_upstream.upstream_dir())]
    for cmd in sides.values():  # writes bytecode caches, warms the page cache
        _timed(cmd, env)
    samples = {name: Samples() for name in sides}
    order = list(sides)
    for _ in range(args.rounds):
        sinks = {name: samples[name].new_round() for name in order}
        for i in range(RUNS_PER_ROUND):
            k = i % len(order)
            for name in order[k:] + order[:k]:
                sinks[name].append(_timed(sides[name], env))
    res = {name: s.summary() for name, s in samples.items()}
    g = lambda side: (res[side]["p50"] * 1e3) if side in res else None  # noqa: E731
    o, u = g("ours"), g("upstream")
    report.add(NAME, f"import, open at head, get_session, close ({human(STORE_SIZE)} store)",
               "process wall p50", "ms", o, g("floor"), u,
               target=f"≤{TARGET:g}× upstream (stretch ≤{STRETCH:g}×)",
               met=None if u is None else o <= TARGET * u, summaries=res)
    report.add(NAME, "the same through the CLI (sessions show --json)", "process wall p50", "ms",
               g("cli"), g("floor"), u)
    report.add(NAME, "reference: a process that only imports sqlalchemy", "process wall p50",
               "ms", g("sqlalchemy"), g("floor"), u)
    # Issue 19's targets: what the store adds above SQLAlchemy's own floor, each run's
    # ratio paired with the reference run beside it (the median of those)
    for side, case, limit in (("ours", "import, open at head, get_session, close", REF_TARGET),
                              ("cli", "the same through the CLI", CLI_REF_TARGET)):
        paired = statistics.median(a / b for a, b in zip(samples[side].all, samples["sqlalchemy"].all))
        report.add(NAME, f"{case} ÷ the import-sqlalchemy process", "paired ratio", "×", paired,
                   target=f"≤{limit:g}× (issue 19)", met=paired <= limit)
    for p in work.glob("*"):
        p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
