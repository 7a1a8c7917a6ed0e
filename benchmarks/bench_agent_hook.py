#!/usr/bin/env python3
"""The agent switch's start-up hook: what a process pays that never imports hermes_state.

``hermes-store agent enable`` puts one ``.pth`` file into the agent's site-packages, so
every Python process of that environment runs its line at start-up (the CLI, the
gateway, cron, every subprocess). The line only puts a name-comparing trampoline on
``sys.meta_path``; the claim is that it costs next to nothing (target: ≤ 2 ms).

Two environments are built identically (a venv, a hermes-agent 0.19.0 distribution's
metadata, this checkout importable through one path file), and the switch is enabled in
one of them with the real ``switch.enable``:

* hook on  — the enabled environment;
* hook off — the other one (what ``disable`` leaves);
* floor column: unused.

Cases, each a whole child process run by the parent, the two sides interleaved (who
goes first alternates), bytecode caches warm; each child's CPU time (user + system, from
``wait4``) is the figure, since on a shared machine wall time mostly measures the
neighbours (the wall time is recorded beside it):

* ``python -c pass`` — start-up alone;
* a process importing ~50 standard-library modules (``json``, ``asyncio``, ``email``,
  ``http.client``, ``sqlite3``, …) — several hundred imports, each of which asks the
  trampoline first;
* ``site.main()`` timed inside a ``python -S`` child: the part of start-up that reads
  site-packages and runs its ``.pth`` lines, where the hook runs (the least noisy
  whole-process figure);
* in one process, the parts on their own: running the hook's line (what ``site`` does
  at start-up) and one call of the trampoline for a name that is not ``hermes_state``
  (what every import pays), each the median of many runs.

The result is the difference of medians (on − off) in ms and the ratio.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, log, main_for  # noqa: E402

sys.path.insert(0, str(ROOT))

NAME = "agent_hook"
TARGET_MS = 2.0
RUNS_PER_ROUND = 40

HEAVY = ("import json, asyncio, email.mime.text, email.parser, http.client, urllib.request, "
         "sqlite3, decimal, logging.handlers, xml.dom.minidom, csv, zipfile, tarfile, "
         "argparse, dataclasses, typing, uuid, hashlib, hmac, secrets, ssl, socket, "
         "selectors, subprocess, threading, concurrent.futures, multiprocessing, "
         "pathlib, tempfile, shutil, glob, fnmatch, textwrap, difflib, pprint, "
         "statistics, fractions, random, base64, gzip, bz2, lzma, html.parser, "
         "inspect, ast, dis, tokenize, traceback, warnings, weakref, contextvars")


def _environment(folder: Path) -> Path:
    """A venv like an agent's for the switch's purpose; returns its interpreter."""
    if not (folder / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3*/site-packages"))
    dist = site / "hermes_agent-0.19.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-agent\nVersion: 0.19.0\n")
    (site / "hermes_store_checkout.pth").write_text(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    return folder / "bin" / "python"


def _child(cmd) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode})")
    return usage.ru_utime + usage.ru_stime, wall


def _interleaved(on, off, rounds: int, runs: int, cmd) -> dict[str, list[tuple[float, float]]]:
    out = {"on": [], "off": []}
    for r in range(rounds):
        for i in range(runs):
            order = (("on", on), ("off", off)) if (r + i) % 2 else (("off", off), ("on", on))
            for name, py in order:
                out[name].append(_child(cmd(py)))
    return out


_IN_PROCESS = r"""
import statistics, sys, time
line = open(sys.argv[1]).read().splitlines()[-1]
runs = []
for _ in range(2000):
    t0 = time.perf_counter()
    exec(line, {})
    runs.append(time.perf_counter() - t0)
    sys.meta_path.pop(0)
exec(line, {})
hook = sys.meta_path[0]
calls = []
for _ in range(200):
    t0 = time.perf_counter()
    for _ in range(1000):
        hook.find_spec("json.decoder", None, None)
    calls.append((time.perf_counter() - t0) / 1000)
print(statistics.median(runs), statistics.median(calls))
"""


_SITE_MAIN = ("import time; t0 = time.perf_counter(); import site; site.main(); "
              "print(time.perf_counter() - t0)")


def _site_main(python: Path) -> float:
    run = subprocess.run([str(python), "-S", "-c", _SITE_MAIN], capture_output=True, text=True,
                         check=True)
    return float(run.stdout)


def _count_imports(python: Path) -> int:
    run = subprocess.run([str(python), "-X", "importtime", "-c", HEAVY], capture_output=True,
                         text=True, check=True)
    return sum(1 for line in run.stderr.splitlines() if line.startswith("import time:")) - 1


def run(args, report) -> None:
    from hermes_store.agent import switch

    report.sides = ("hook on", None, "hook off")
    work = args.workdir / "agent_hook"
    work.mkdir(parents=True, exist_ok=True)
    on, off = _environment(work / "on"), _environment(work / "off")
    switch.disable(off)
    switch.enable(on)
    assert switch.probe(on).enabled and not switch.probe(off).enabled
    for py in (on, off):  # warm caches, bytecode
        for _ in range(3):
            _child([str(py), "-c", HEAVY])
    imports = _count_imports(on)
    cases = [
        ("python -c pass (start-up only)", lambda py: [str(py), "-c", "pass"]),
        (f"a process importing {imports} modules (~50 stdlib packages)",
         lambda py: [str(py), "-c", HEAVY]),
    ]
    for case, cmd in cases:
        log(args, f"{case}: {args.rounds} rounds × {RUNS_PER_ROUND} runs per side")
        res = _interleaved(on, off, args.rounds, RUNS_PER_ROUND, cmd)
        cpu = {k: statistics.median(c for c, _ in v) * 1e3 for k, v in res.items()}
        wall = {k: statistics.median(w for _, w in v) * 1e3 for k, v in res.items()}
        delta = cpu["on"] - cpu["off"]
        report.add(NAME, case, "child CPU median", "ms", cpu["on"], None, cpu["off"],
                   target=f"on − off ≤ {TARGET_MS:g} ms", met=delta <= TARGET_MS,
                   delta_ms=delta, runs=len(res["on"]))
        report.add(NAME, case, "child wall median", "ms", wall["on"], None, wall["off"],
                   delta_ms=wall["on"] - wall["off"])
        report.note(f"{case}: CPU hook on {cpu['on']:.2f} ms, off {cpu['off']:.2f} ms, "
                    f"difference {delta:+.3f} ms, ratio {cpu['on'] / cpu['off']:.3f}; wall "
                    f"{wall['on']:.1f} vs {wall['off']:.1f} ms")
    log(args, f"site.main(): {args.rounds} rounds × {RUNS_PER_ROUND} runs per side")
    times = {"on": [], "off": []}
    for r in range(args.rounds):
        for i in range(RUNS_PER_ROUND):
            for name in (("on", "off") if (r + i) % 2 else ("off", "on")):
                times[name].append(_site_main(on if name == "on" else off))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    delta = med["on"] - med["off"]
    report.add(NAME, "site.main() in a python -S child (site-packages and its .pth lines)",
               "median", "ms", med["on"], None, med["off"], target=f"on − off ≤ {TARGET_MS:g} ms",
               met=delta <= TARGET_MS, delta_ms=delta, runs=len(times["on"]))
    report.note(f"site.main(): hook on {med['on']:.3f} ms, off {med['off']:.3f} ms, "
                f"difference {delta:+.3f} ms")
    hook = next(iter(switch.probe(on).hooks))
    run = subprocess.run([sys.executable, "-c", _IN_PROCESS, str(Path(hook) / switch.HOOK_FILE)],
                         capture_output=True, text=True, check=True)
    line_s, call_s = map(float, run.stdout.split())
    report.add(NAME, "the hook's line, run once (in one process)", "median", "us", line_s * 1e6,
               None, None, target=f"≤ {TARGET_MS * 1e3:g} us", met=line_s * 1e3 <= TARGET_MS)
    report.add(NAME, "one trampoline call for another module (in one process)", "median", "us",
               call_s * 1e6, None, None,
               per_process_ms=call_s * imports * 1e3, imports=imports)
    report.note(f"in one process: the line {line_s * 1e6:.1f} us; a trampoline call "
                f"{call_s * 1e9:.0f} ns, × {imports} imports = {call_s * imports * 1e3:.3f} ms")
    switch.disable(on)


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
