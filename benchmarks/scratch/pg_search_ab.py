"""Scratch (issue 19): search_messages of package variants side by side on the kept
server (/tmp/speed/pg.json): one worker process per variant (PYTHONPATH = the variant
dir), each with a PostgreSQL and a SQLite store over the same rows; the driver asks the
workers in turn (order rotating) for N timed calls of each kind, PostgreSQL and SQLite
interleaved call by call; medians over rounds, and the paired PG ÷ SQLite ratio.
    python pg_search_ab.py SIZE ROUNDS VARIANT_DIR...      (SIZE: 10k or 100k)"""
import json, os, statistics, subprocess, sys, time
from pathlib import Path

WORKER = r'''
import json, shutil, sys, time
sys.path.insert(0, "/work/wt-speed/benchmarks")
from bench_search import QUERIES
from hermes_store import SessionDB
info = json.load(open("/tmp/speed/pg.json"))
size, copy = sys.argv[1], sys.argv[2]
shutil.copyfile(info[f"search_{size}"]["sqlite"], copy)
pg, lite = SessionDB(info[f"search_{size}"]["url"]), SessionDB(copy)
kinds = {k: (q, kw) for k, q, kw in QUERIES}
for k, (q, kw) in kinds.items():
    for _ in range(12):
        pg.search_messages(q, **kw); lite.search_messages(q, **kw)
print("ready", flush=True)
for line in sys.stdin:
    kind, n = json.loads(line)
    q, kw = kinds[kind]
    a, b = [], []
    for _ in range(n):
        t = time.perf_counter(); pg.search_messages(q, **kw); a.append(time.perf_counter() - t)
        t = time.perf_counter(); lite.search_messages(q, **kw); b.append(time.perf_counter() - t)
    print(json.dumps([a, b]), flush=True)
'''
size, rounds = sys.argv[1], int(sys.argv[2])
variants = sys.argv[3:]
sys.path.insert(0, "/work/wt-speed/benchmarks")
from bench_search import QUERIES
workers = {}
for v in variants:
    env = dict(os.environ, PYTHONPATH=v)
    name = os.path.basename(v.rstrip("/"))
    p = subprocess.Popen([sys.executable, "-c", WORKER, size, f"/tmp/speed/ab-{name}.db"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/tmp")
    assert p.stdout.readline().strip() == "ready"
    workers[name] = p
res = {(w, k): ([], [], []) for w in workers for k, _, _ in QUERIES}
order = list(workers)
for r in range(rounds):
    for kind, _, _ in QUERIES:
        order = order[1:] + order[:1]
        for w in order:
            p = workers[w]
            p.stdin.write(json.dumps([kind, 7]) + "\n"); p.stdin.flush()
            a, b = json.loads(p.stdout.readline())
            pa, pb, pr = res[(w, kind)]
            pa.append(statistics.median(a)); pb.append(statistics.median(b)); pr.append(statistics.median(a) / statistics.median(b))
for p in workers.values():
    p.stdin.close(); p.wait()
print(f"{'kind':20s} " + " ".join(f"{w+': PG ms':>14s} {'SQLite':>7s} {'ratio':>6s}" for w in workers))
for kind, _, _ in QUERIES:
    cells = []
    for w in workers:
        pa, pb, pr = res[(w, kind)]
        cells.append(f"{statistics.median(pa)*1e3:14.2f} {statistics.median(pb)*1e3:7.2f} {statistics.median(pr):6.2f}")
    print(f"{kind:20s} " + " ".join(cells))
