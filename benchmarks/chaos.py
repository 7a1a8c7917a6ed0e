#!/usr/bin/env python3
"""The chaos run (issue 31): writers, readers and the faults a live system meets, for T
seconds; then every acknowledged write is looked for in the file.

    python benchmarks/chaos.py --seconds 30 --writers 3 --readers 2 \
        [--faults all|kill,rawclose,sidecar,fts,diskfull] [--seed N] [--workdir DIR] \
        [--json OUT] [--interval S] [--disk-mb N] [--full-seconds S]

W writer processes (``_chaos_workers.py writer``) loop ``create_session`` /
``append_message`` (a quarter of them tool-call turns) / ``replace_messages`` through
their own ``SessionDB``, and report every call that returned (the oracle) and every one
that raised; a writer that meets an error other than busy or disk-full opens a new
``SessionDB``, and when that one refuses too it exits and a new process takes its slot,
as an agent restart would. R readers open stores (read-only and writable in turn) and
call ``search_messages``, ``get_messages`` and ``list_sessions_rich``. The injector
cycles through the faults, one every ``--interval`` seconds, in a seeded order:

* ``kill``: ``kill -9`` of a writer (a new process takes its slot);
* ``rawclose``: a thread inside one writer (or, every other time, all of them) opens and
  closes ``state.db`` with Python's own file calls, which drops that process's POSIX
  locks on it (decision D19);
* ``sidecar``: a sibling process's close that checkpoints everything and unlinks
  ``-wal``/``-shm`` under the live writers (``_chaos_workers.sidecar_main``);
* ``fts``: the full-text index damaged through plain ``sqlite3`` (its structure record
  overwritten, or leaf pages deleted or overwritten; both indexes in turn);
* ``diskfull``: the store lives on a tmpfs mounted for the run (root only); a filler file
  takes every free block for ``--full-seconds``, then is removed.

The report (a table, and JSON in ``--json`` or ``benchmarks/results/chaos-*.json``):
acknowledged writes against those present in the file (read with plain ``sqlite3``),
what is only in files the store set aside beside it, the failed calls by exception
class (per fault and in total), writer reopens and restarts, and for each injection the
time from the fault (its end, for the disk) to the next acknowledged write of the
affected writers (``kill``: the killed slot's new process; ``rawclose``: the targets;
the others: all writers). At the end the file must pass ``integrity_check``, and after
one ``SessionDB`` open (which rebuilds a stale index) the FTS integrity check. Exit 1 when
an acknowledged write is lost (in neither the file nor a set-aside copy).
"""

from __future__ import annotations

import argparse
import bisect
import datetime as _dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chaos_disk import FILLER, Disk  # noqa: E402
from _chaos_oracle import Ledger, verify  # noqa: E402
from _chaos_workers import FTS_DAMAGE, RESTART  # noqa: E402
from _common import RESULTS, ROOT, log, machine  # noqa: E402

NAME = "chaos"
FAULTS = ("kill", "rawclose", "sidecar", "fts", "diskfull")
WORKERS = Path(__file__).resolve().parent / "_chaos_workers.py"
#: files of the store that are not set aside (the live database, its sidecars, the
#: migration lock while someone holds it)
LIVE = {"state.db-wal", "state.db-shm", "state.db-journal", "state.db.migrate.lock"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--seconds", type=float, default=30.0, help="length of the run")
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--readers", type=int, default=2)
    p.add_argument("--faults", default="all",
                   help=f"all, none (a control run), or some of {','.join(FAULTS)}")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, default=RESULTS / "work" / "chaos",
                   help="scratch folder (its disk/, logs/, final/ and set-aside/ are "
                   "replaced)")
    p.add_argument("--json", type=Path, help="write the JSON summary here "
                   "[default: benchmarks/results/chaos-<stamp>.json and chaos-latest.json]")
    p.add_argument("--interval", type=float, help="seconds between injections "
                   "[default: the run spread over the faults, at most 5]")
    p.add_argument("--disk-mb", type=int, help="size of the tmpfs [default: 128 + 2 per second "
                   "of the run; the store grew under 0.5 MB/s here; tmpfs pages take memory "
                   "only while filled]")
    p.add_argument("--full-seconds", type=float, default=2.0, help="how long the disk stays full")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    kinds = {"all": FAULTS, "none": ()}.get(
        args.faults, tuple(k.strip() for k in args.faults.split(",")))
    unknown = set(kinds) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}: choose from {', '.join(FAULTS)}")
    args.kinds = kinds
    args.disk_mb = args.disk_mb or int(128 + 2 * args.seconds)
    return args


# --------------------------------------------------------------------------- processes

class Proc:
    """A worker process whose JSON lines are collected as they arrive (and logged)."""

    def __init__(self, run: "Run", role: str, slot: int, incarnation: int, argv: list[str]):
        self.role, self.slot, self.incarnation = role, slot, incarnation
        self.name = f"{role}{slot}" + (f".{incarnation}" if role == "writer" else "")
        self.killed = False  # by the injector
        self.exit_noted = False
        stderr = open(run.logs / f"{self.name}.stderr", "w")
        self.popen = subprocess.Popen([sys.executable, str(WORKERS), role, *map(str, argv)],
                                      stdout=subprocess.PIPE, stderr=stderr, env=run.env)
        stderr.close()
        run.every.append(self)
        self.thread = threading.Thread(target=self._collect, args=(run,), daemon=True)
        self.thread.start()

    def _collect(self, run: "Run") -> None:
        with open(run.logs / f"{self.name}.jsonl", "wb") as logfile:
            for line in self.popen.stdout:
                logfile.write(line)
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # cut short by a kill: never reported, so never promised
                rec.update(who=self.name, role=rec.get("role", self.role), slot=self.slot)
                run.records.append(rec)

    def alive(self) -> bool:
        return self.popen.poll() is None


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        work = args.workdir.resolve()
        for sub in ("logs", "final"):
            shutil.rmtree(work / sub, ignore_errors=True)
        self.disk = Disk(work / "disk", args.disk_mb)
        self.logs = work / "logs"
        self.final = work / "final"
        #: where what the store set aside is moved off the tmpfs (``evacuate``)
        self.moved = work / "set-aside"
        shutil.rmtree(self.moved, ignore_errors=True)
        self.logs.mkdir(parents=True)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
        self.records: list[dict] = []  # appended by the collector threads
        self.writers: dict[int, Proc] = {}
        self.readers: list[Proc] = []
        self.every: list[Proc] = []  # every process started, for the final wait
        self.exits: list[dict] = []
        self.injections: list[dict] = []
        self.skipped: dict[str, str] = {}
        self.kinds = list(args.kinds)

    @property
    def db(self) -> Path:
        return self.disk.store_dir / "state.db"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.disk.setup()
        for entry in self.disk.store_dir.iterdir():  # a fresh store for every run
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        if "diskfull" in self.kinds and self.disk.reason:
            self.skipped["diskfull"] = self.disk.reason
            self.kinds.remove("diskfull")
        from hermes_store import SessionDB

        SessionDB(self.db).close()  # created at head before the writers race to it
        self.t0 = time.monotonic()
        self.deadline = self.t0 + self.args.seconds
        for slot in range(self.args.writers):
            self.spawn_writer(slot, 0)
        self.readers = [Proc(self, "reader", slot, 0, [self.db, slot, self.args.seed, self.deadline])
                        for slot in range(self.args.readers)]

    def spawn_writer(self, slot: int, incarnation: int) -> None:
        self.writers[slot] = Proc(self, "writer", slot, incarnation,
                                  [self.db, slot, incarnation, self.args.seed, self.deadline])

    def supervise(self) -> None:
        """A writer that exited (killed, or asking for a restart) gets a new process."""
        for slot, proc in list(self.writers.items()):
            rc = proc.popen.poll()
            if rc is None:
                continue
            if not proc.exit_noted:
                proc.exit_noted = True
                self.exits.append({"writer": proc.name, "rc": rc, "t": time.monotonic() - self.t0,
                                   "cause": "killed by the injector" if proc.killed
                                   else "restart" if rc == RESTART else "exited"})
            if time.monotonic() < self.deadline - 1.0:
                self.spawn_writer(slot, proc.incarnation + 1)

    def evacuate(self, settled: float = 10.0) -> None:
        """Move what the store set aside beside the file (row 3 copies a lost WAL and the
        database image, per writer) off the tmpfs once nothing has changed in it for
        ``settled`` seconds: in a long run those copies would fill the small disk
        outside the disk-full fault. The verdict reads them where they went."""
        if not self.disk.mounted:
            return
        for entry in list(self.disk.store_dir.iterdir()):
            if entry.name in LIVE or entry.name == self.db.name:
                continue
            files = [entry, *entry.rglob("*")] if entry.is_dir() else [entry]
            if time.time() - max(f.stat().st_mtime for f in files) >= settled:
                self.moved.mkdir(exist_ok=True)
                shutil.move(str(entry), str(self.moved / entry.name))

    def sleep_until(self, when: float) -> None:
        while (now := time.monotonic()) < when:
            self.supervise()
            time.sleep(min(0.05, when - now))

    def stop(self) -> list[str]:
        """Wait for every process to end by its deadline; kill the ones that hang."""
        hung = []
        for proc in self.every:
            try:
                proc.popen.wait(timeout=max(1.0, self.deadline + 60 - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung.append(proc.name)
                proc.popen.kill()
                proc.popen.wait()
            proc.thread.join(10)
        self.supervise()  # notes the last exits
        return hung

    # ------------------------------------------------------------------ faults

    def schedule(self) -> list[tuple[float, str]]:
        first = self._warm()
        last = self.last_injection = self.deadline - max(5.0, 0.1 * self.args.seconds)
        if not self.kinds or last <= first:
            return []
        interval = self.args.interval or min(5.0, (last - first) / len(self.kinds))
        times = []
        t = first
        while t <= last + 1e-9:
            times.append(t)
            t += interval
        order: list[str] = []
        while len(order) < len(times):
            cycle = list(self.kinds)
            self.rng.shuffle(cycle)
            order += cycle
        return list(zip(times, order))

    def _warm(self) -> float:
        """When every writer has acknowledged a write (or 20 s went by)."""
        until = min(self.t0 + 20, self.deadline)
        while time.monotonic() < until:
            acked = {r["slot"] for r in list(self.records) if r.get("ev") == "ack"}
            if len(acked) >= self.args.writers:
                break
            self.sleep_until(time.monotonic() + 0.1)
        return time.monotonic()

    def inject(self, kind: str, count: int) -> dict:
        alive = [slot for slot, p in self.writers.items() if p.alive()] or list(self.writers)
        rec = {"kind": kind, "t_start": time.monotonic(), "affected": list(self.writers)}
        if self.disk.mounted:
            rec["free_mb"] = round(self.disk.free_bytes() / 2**20, 1)
        if kind == "kill":
            slot = self.rng.choice(alive)
            proc = self.writers[slot]
            proc.killed = True
            proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait()
            rec.update(variant=proc.name, affected=[slot])
            self.supervise()
        elif kind == "rawclose":
            targets = alive if count % 2 else [self.rng.choice(alive)]
            for slot in targets:
                self.writers[slot].popen.send_signal(signal.SIGUSR1)
            rec.update(variant="all writers" if count % 2 else self.writers[targets[0]].name,
                       affected=targets)
        elif kind == "sidecar":
            rec.update(self._sibling("sidecar"))
        elif kind == "fts":
            variants = list(FTS_DAMAGE)
            rec.update(self._sibling("fts", variants[count % len(variants)]))
        elif kind == "diskfull":
            rec["filled_bytes"] = self.disk.fill()
            rec["full_at"] = time.monotonic() - self.t0
            self.sleep_until(time.monotonic() + self.args.full_seconds)
            self.disk.free()
            rec["variant"] = f"{self.args.full_seconds:g} s full"
        rec.setdefault("t_end", time.monotonic())
        return rec

    def _sibling(self, *argv: str) -> dict:
        done = subprocess.run([sys.executable, str(WORKERS), argv[0], str(self.db), *argv[1:]],
                              capture_output=True, text=True, env=self.env, timeout=120)
        lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode or not lines:
            return {"skipped": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
        out = lines[-1]
        if out.get("ev") == "skipped":
            return {"skipped": out["reason"]}
        variant = out.get("variant") or f"{out.get('frames')} frames, unlinked {out.get('unlinked')}"
        return {"variant": variant, "t_end": out["t"], "rows": out.get("rows")}

    def run(self) -> None:
        self.start()
        counts: Counter = Counter()
        for when, kind in self.schedule():
            self.sleep_until(when)
            if time.monotonic() > self.last_injection:
                break  # a slow injection ate the time: leave the tail for recovery
            self.evacuate()
            rec = self.inject(kind, counts[kind])
            if "skipped" not in rec:
                counts[kind] += 1
            self.injections.append(rec)
            log(self.args, f"{kind}: {rec.get('variant') or rec.get('skipped')}")
        self.sleep_until(self.deadline)


# --------------------------------------------------------------------------- report

def failure(rec: dict) -> str:
    """A failed call's class, with SQLite's result code when one is behind it."""
    return f"{rec['cls']} ({rec['code']})" if rec.get("code") else rec["cls"]


def recovery(run: Run, lost: list[dict]) -> None:
    """Per injection, until the next one: the failed calls, and the acknowledged writes
    made then that were lost; and the time from the fault's end to the next acknowledged
    transcript write (an append or a replace: a restarted writer's first call,
    ``create_session``, proves little) of each affected slot."""
    acks: dict[int, list[float]] = {}
    for r in run.records:
        if r.get("ev") == "ack" and r["op"] != "create":
            acks.setdefault(r["slot"], []).append(r["t"])
    for times in acks.values():
        times.sort()
    starts = [i["t_start"] for i in run.injections] + [run.deadline + 60]
    for n, inj in enumerate(run.injections):
        window = [r for r in run.records if r.get("ev") in ("fail", "reopen", "restart")
                  and starts[n] <= r["t"] < starts[n + 1]]
        inj["failed"] = dict(Counter(f"{r['role']} {failure(r)}" for r in window
                                     if r["ev"] == "fail"))
        inj["reopens"] = sum(r["ev"] == "reopen" for r in window)
        inj["restarts"] = sum(r["ev"] == "restart" for r in window)
        inj["lost_acked_until_next"] = sum(starts[n] <= x["t"] < starts[n + 1] for x in lost)
        if "skipped" in inj:
            continue
        delays = []
        for slot in inj["affected"]:
            times = acks.get(slot, [])
            k = bisect.bisect_right(times, inj["t_end"])
            delays.append(times[k] - inj["t_end"] if k < len(times) else None)
        inj["recovered"] = all(d is not None for d in delays)
        inj["recover_s"] = max(delays) if inj["recovered"] else None
        inj["first_ack_s"] = min((d for d in delays if d is not None), default=None)


def _relative(items: list[dict], t0: float, limit: int = 500) -> list[dict]:
    return [{**x, "t": round(x["t"] - t0, 3)} for x in items[:limit]]


def summary(run: Run, verdict: dict, hung: list[str]) -> dict:
    recovery(run, verdict["lost"])
    first = run.injections[0]["t_start"] if run.injections else run.deadline + 60
    fails = [r for r in run.records if r.get("ev") == "fail"]
    last_ack = {}
    for r in run.records:
        if r.get("ev") == "ack":
            last_ack[r["slot"]] = max(last_ack.get(r["slot"], 0.0), r["t"])
    per_kind = {}
    for kind in run.args.kinds:
        done = [i for i in run.injections if i["kind"] == kind and "skipped" not in i]
        times = sorted(i["recover_s"] for i in done if i["recover_s"] is not None)
        per_kind[kind] = {
            "injected": len(done),
            "skipped": run.skipped.get(kind) or
            [i["skipped"] for i in run.injections if i["kind"] == kind and "skipped" in i],
            "recovered": sum(i["recovered"] for i in done),
            "recover_s_median": times[len(times) // 2] if times else None,
            "recover_s_max": times[-1] if times else None,
            "failed": dict(sum((Counter(i["failed"]) for i in done), Counter())),
            "lost_acked_until_next": sum(i["lost_acked_until_next"] for i in run.injections
                                         if i["kind"] == kind),
        }
    git = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "hermes_store"],
                         capture_output=True, text=True).stdout.split("\n")
    return {
        "benchmark": NAME,
        "when": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": {**machine(), "uncommitted_store_changes": [g for g in git if g]},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(run.args).items()},
        "disk": {"tmpfs_mb": None if run.disk.reason else run.args.disk_mb,
                 "reason": run.disk.reason},
        "writes": {**verdict, "lost": len(verdict["lost"]),
                   "lost_acked_before_any_fault": sum(x["t"] < first for x in verdict["lost"]),
                   "only_in_set_aside": len(verdict["only_in_set_aside"]),
                   "lost_examples": _relative(verdict["lost"], run.t0),
                   "only_in_set_aside_examples": _relative(verdict["only_in_set_aside"], run.t0)},
        "acknowledged_by_call": dict(Counter(r["op"] for r in run.records if r.get("ev") == "ack")),
        "failed_calls": {role: dict(Counter(failure(r) for r in fails if r["role"] == role))
                         for role in ("writer", "reader")},
        "failed_examples": {f"{r['role']} {r['op']} {failure(r)}": r["msg"] for r in fails},
        "store_full_outside_diskfull": sum(
            r.get("code") == "SQLITE_FULL" and not any(
                i["kind"] == "diskfull" and i["t_start"] <= r["t"] <= i["t_end"] + 1.0
                for i in run.injections) for r in fails),
        "min_free_mb_at_injections": min((i["free_mb"] for i in run.injections
                                          if "free_mb" in i), default=None),
        "reopens": dict(Counter(r["cause"] for r in run.records if r.get("ev") == "reopen")),
        "restarts": dict(Counter(r["cause"] for r in run.records if r.get("ev") == "restart")),
        "rawcloses_done": sum(r.get("ev") == "rawclose" for r in run.records),
        "reads": dict(sum((Counter(r["reads"]) for r in run.records
                           if r.get("ev") == "done" and "reads" in r), Counter())),
        "writer_exits": run.exits,
        "hung": hung,
        "last_ack_before_end_s": {str(s): round(run.deadline - t, 2) for s, t in sorted(last_ack.items())},
        "faults": per_kind,
        "injections": [{**i, "t_start": round(i["t_start"] - run.t0, 3),
                        "t_end": round(i["t_end"] - run.t0, 3)} for i in run.injections],
    }


def _s(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(data: dict) -> str:
    w = data["writes"]
    rows = [("fault", "injected", "recovered", "recover p50/max s", "lost*",
             "failed calls until the next injection")]
    for kind, f in data["faults"].items():
        failed = ", ".join(f"{k}×{n}" for k, n in sorted(f["failed"].items())) or "-"
        injected = str(f["injected"]) if not f["skipped"] or f["injected"] else f"skipped: {f['skipped']}"
        rows.append((kind, injected, f"{f['recovered']}/{f['injected']}",
                     f"{_s(f['recover_s_median'])} / {_s(f['recover_s_max'])}",
                     str(f["lost_acked_until_next"]), failed))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(wd) for c, wd in zip(r[:5], widths)) + "  " + r[5] for r in rows]
    lines += ["* acknowledged writes lost, counted in the window from the injection to the next one",
              "", "timeline (s from the start; recovered: to the next acknowledged transcript "
              "write of every writer hit):"]
    for i in data["injections"][:15]:
        outcome = (f"skipped: {i['skipped']}" if "skipped" in i else
                   f"recovered in {_s(i['recover_s'])} s" if i["recovered"] else "NOT recovered")
        lines.append(f"  {i['t_start']:7.2f}  {i['kind']:<9} {str(i.get('variant')):<32} "
                     f"{outcome}, lost {i['lost_acked_until_next']}")
    if len(data["injections"]) > 15:
        lines.append(f"  … {len(data['injections']) - 15} more in the JSON")
    lines += [
        "",
        f"writes: acknowledged {w['acknowledged']} {data['acknowledged_by_call']}, present "
        f"{w['present']}, superseded by a later replace {w['superseded']}, missing from "
        f"state.db {w['missing_from_file']} (only in set-aside files {w['only_in_set_aside']}, "
        f"LOST {w['lost']} of which {w['lost_acked_before_any_fault']} acknowledged before the "
        f"first injection; lost at the final open {len(w['lost_at_final_open'])})",
        f"refused calls whose rows are in the file anyway: {len(w['refused_but_written'])}",
        f"failed calls: writers {data['failed_calls']['writer']}; readers {data['failed_calls']['reader']}",
        f"writer reopens {data['reopens']}, restarts {data['restarts']}, hung {data['hung']}",
        f"disk: tmpfs {data['disk']['tmpfs_mb']} MB, least free at an injection "
        f"{data['min_free_mb_at_injections']} MB, disk-full failures outside the disk-full "
        f"fault {data['store_full_outside_diskfull']}",
        f"reads done: {data['reads']}",
        f"file read with: {w['read']}; set aside by the store: {len(w['set_aside'])} files, "
        f"{sum(a['bytes'] for a in w['set_aside']) / 2**20:.1f} MB",
        f"integrity as left: {_ok(w['integrity_as_left'])}; store open: {_ok(w['store_open'])}; "
        f"after open: {_ok(w['integrity_after_open'])}; counters: "
        f"{'ok' if not w['counter_mismatches'] else w['counter_mismatches'][:3]}",
    ]
    if w["lost"]:
        lines += ["", "LOST (acknowledged, in neither state.db nor a set-aside file), first 10:",
                  *(f"  {x['write']} (acknowledged at {x['t']:.2f} s)" for x in w["lost_examples"][:10])]
    return "\n".join(lines)


def _ok(d: dict) -> str:
    if d.get("ok"):
        return "ok"
    return str({k: v for k, v in d.items() if k != "ok" and v})[:300]


def main(argv=None) -> int:
    args = parse_args(argv)
    run = Run(args)
    try:
        run.run()
        hung = run.stop()
        run.disk.free()
        ledger = Ledger()
        for rec in run.records:
            ledger.add(rec)
        run.evacuate(settled=0.0)
        verdict = verify(run.db, ledger, LIVE | {FILLER}, [run.moved])
        shutil.copytree(run.disk.store_dir, run.final)  # kept for a post-mortem
    finally:
        for proc in run.every:
            if proc.alive():
                proc.popen.kill()
        run.disk.teardown()
    data = summary(run, verdict, hung)
    if args.json:
        out = args.json
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=2, default=str))
    else:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"{NAME}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps(data, indent=2, default=str))
        (RESULTS / f"{NAME}-latest.json").write_text(out.read_text())
    print(table(data))
    print(f"\nJSON: {out}")
    return 1 if verdict["lost"] or verdict["lost_at_final_open"] else 0


if __name__ == "__main__":
    sys.exit(main())
