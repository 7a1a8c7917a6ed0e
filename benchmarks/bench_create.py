#!/usr/bin/env python3
"""A new store: ``SessionDB(new_path)`` on a path where no file exists yet (every new
profile, every test of a program that uses the store, every ``db copy`` into a new file).

* ours      — ``hermes_store.SessionDB(path)``: the file is created and brought to head;
* upstream  — ``hermes_state.SessionDB(path)`` 0.19.0: its own schema script and checks.

In one process that has imported both (their first calls made untimed), the sides take
turns, each on a fresh path in its own folder, who goes first rotating; only the
constructor is timed, ``close()`` is not. For reference: reopening the file just created
(at head, both sides), ours ``migrate.upgrade`` of a missing file, and a new process that
imports the store, creates one file and exits (wall time of the child, sides in turn).

Target (issue 19): ours p50 ≤ 1.5× upstream (stretch ≤ 1.0×).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _upstream  # noqa: E402
from _common import ROOT, Samples, log, main_for  # noqa: E402

NAME = "create"
CALLS_PER_ROUND = 8
CHILD_RUNS_PER_ROUND = 4
TARGET, STRETCH = 1.5, 1.0

OURS_CHILD = """
import sys
from hermes_store import SessionDB
SessionDB(sys.argv[1]).close()
"""

UPSTREAM_CHILD = """
import sys
from pathlib import Path
sys.path.append(sys.argv[2])
import hermes_state
hermes_state.SessionDB(Path(sys.argv[1])).close()
"""


class Paths:
    """Fresh paths in a folder of their own per side (removed as they are used up)."""

    def __init__(self, base: Path, side: str) -> None:
        self.folder = base / side
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.n = 0
        self.last: Path | None = None

    def fresh(self) -> Path:
        self.n += 1
        self.last = self.folder / f"s{self.n:04d}" / "state.db"
        return self.last

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)


def _wall(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}… failed:\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def run(args, report) -> None:
    from hermes_store import SessionDB, migrate

    base = args.workdir / "create"
    home = args.workdir / "create-home"
    sides = {"ours": (SessionDB, Paths(base, "ours"))}
    if not args.no_upstream:
        hermes_state = _upstream.load(home)
        sides["upstream"] = (hermes_state.SessionDB, Paths(base, "upstream"))
    upgrade_paths = Paths(base, "upgrade")
    for make, paths in sides.values():  # first calls: imports, caches
        make(paths.fresh()).close()
    migrate.upgrade(upgrade_paths.fresh())

    create = {name: Samples() for name in sides}
    reopen = {name: Samples() for name in sides}
    upgrade = Samples()
    order = list(sides)
    for r in range(args.rounds):
        order = order[1:] + order[:1]
        sinks = {name: create[name].new_round() for name in order}
        again = {name: reopen[name].new_round() for name in order}
        up = upgrade.new_round()
        for _ in range(CALLS_PER_ROUND):
            for name in order:
                make, paths = sides[name]
                path = paths.fresh()
                t0 = time.perf_counter()
                db = make(path)
                sinks[name].append(time.perf_counter() - t0)
                db.close()
                t0 = time.perf_counter()
                db = make(path)
                again[name].append(time.perf_counter() - t0)
                db.close()
            t0 = time.perf_counter()
            migrate.upgrade(upgrade_paths.fresh())
            up.append(time.perf_counter() - t0)
        for _, paths in sides.values():
            paths.clear()
        upgrade_paths.clear()
        log(args, f"round {r + 1}/{args.rounds}")

    env = dict(os.environ, HERMES_HOME=str(home))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    up_dir = str(_upstream.upstream_dir()) if "upstream" in sides else ""
    children = {"ours": lambda path: [sys.executable, "-c", OURS_CHILD, str(path)]}
    if "upstream" in sides:
        children["upstream"] = lambda path: [sys.executable, "-c", UPSTREAM_CHILD, str(path), up_dir]
    child_paths = {name: Paths(base, f"child-{name}") for name in children}

    def child(name: str) -> list[str]:
        return children[name](child_paths[name].fresh())

    for name in children:
        _wall(child(name), env)
    cold = {name: Samples() for name in children}
    corder = list(children)
    for _ in range(args.rounds):
        corder = corder[1:] + corder[:1]
        sinks = {name: cold[name].new_round() for name in corder}
        for _ in range(CHILD_RUNS_PER_ROUND):
            for name in corder:
                sinks[name].append(_wall(child(name), env))
    for paths in child_paths.values():
        shutil.rmtree(paths.folder, ignore_errors=True)

    def p50(samples: dict, side: str):
        return samples[side].summary()["p50"] * 1e3 if side in samples else None

    o, u = p50(create, "ours"), p50(create, "upstream")
    report.add(NAME, "SessionDB(new path): create the file and bring it to head", "p50", "ms",
               o, None, u, target=f"≤{TARGET:g}× upstream (stretch ≤{STRETCH:g}×)",
               met=None if u is None else o <= TARGET * u,
               summaries={k: v.summary() for k, v in create.items()})
    report.add(NAME, "SessionDB(new path)", "p95", "ms",
               create["ours"].summary()["p95"] * 1e3, None,
               create["upstream"].summary()["p95"] * 1e3 if "upstream" in create else None)
    report.add(NAME, "reopen the new file (at head)", "p50", "ms",
               p50(reopen, "ours"), None, p50(reopen, "upstream"))
    report.add(NAME, "migrate.upgrade(missing file) (ours only)", "p50", "ms",
               upgrade.summary()["p50"] * 1e3)
    report.add(NAME, "new process: import, SessionDB(new path), close", "process wall p50", "ms",
               p50(cold, "ours"), None, p50(cold, "upstream"))
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[0], run))
