"""Scratch (issue 19): one cold process's phases for package variants side by side —
``import sqlalchemy``, the store's imports, open, first ``get_session``, close, exit —
timestamps taken in the child (no ``-X importtime`` overhead), variants alternating.

    python startup_variant_phases.py STORE SESSION_ID RUNS VARIANT_DIR...

A variant dir holds ``hermes_store/`` (a worktree of another commit): it is put first
on ``PYTHONPATH``. Medians in ms."""
import json, os, statistics, subprocess, sys, time
store, session, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
variants = sys.argv[4:]
CHILD = f'''
import time, sys, json
t0 = time.perf_counter()
import sqlalchemy
t1 = time.perf_counter()
from hermes_store import SessionDB
t2 = time.perf_counter()
db = SessionDB({store!r})
t3 = time.perf_counter()
db.get_session({session!r})
t4 = time.perf_counter()
db.close()
t5 = time.perf_counter()
sys.stderr.write(json.dumps([t1-t0, t2-t1, t3-t2, t4-t3, t5-t4, time.time()]) + "\\n")
'''
env0 = dict(os.environ); env0.pop("PYTHONDONTWRITEBYTECODE", None)


def once(variant):
    env = dict(env0, PYTHONPATH=variant)
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, cwd="/tmp")
    end = time.time()
    phases = json.loads(proc.stderr.strip().splitlines()[-1])
    return phases[:5] + [end - phases[5], end - start]


for v in variants:  # bytecode caches, page cache
    once(v)
results = {v: [] for v in variants}
for i in range(runs):
    for v in (variants if i % 2 == 0 else variants[::-1]):
        results[v].append(once(v))
names = ["sqlalchemy", "store imports", "open", "get_session", "close", "exit", "whole"]
print("variant".ljust(24) + "".join(n.rjust(14) for n in names))
for v, rows in results.items():
    print(os.path.basename(v.rstrip("/")).ljust(24)
          + "".join(f"{statistics.median(r[i] for r in rows) * 1e3:14.1f}" for i in range(7)))
