"""Scratch (issue 19): search_messages of package variants side by side on the kept
server (``pg_keep.py``'s $HERMES_SCRATCH_PG): one worker process per variant (PYTHONPATH = the variant
dir), each with a PostgreSQL and a SQLite store over the same rows; the driver asks the
workers in turn (order rotating) for N timed calls of each kind, PostgreSQL and SQLite
interleaved call by call; medians over rounds, and the paired PG ÷ SQLite ratio.
    python pg_search_ab.py SIZE ROUNDS VARIANT_DIR...      (SIZE: 10k or 100k)"""
import json, os, statistics, subprocess, sys, time
from pathlib import Path

BENCH = str(Path(__file__).resolve().parents[1])

WORKER = r'''
import json, os, shutil, sys, time
sys.path.insert(0, sys.argv[3])
from bench_search import QUERIES
from hermes_store import SessionDB
info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
size, copy = sys.argv[1], sys.argv[2]
shutil.copyfile(info[f"search_{size}"]["sqlite"], copy)
pg, lite = SessionDB(info[f"search_{size}"]["url"]), SessionDB(copy)
kinds = {k: (q, kw) for k, q, kw in QUERIES}
for k, (q, kw) in kinds.items():
    for _ in range(12):
        pg.search_messages(q, **kw); lite.search_messages(q, **kw)
print("ready", flush=True)
import os, psycopg
admin = psycopg.connect(host="127.0.0.1", port=info["port"], user="postgres", dbname="postgres", autocommit=True)
def backends():
    return [r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (f"search_{size}",))]
def server_cpu():
    total = 0
    for pid in backends():
        try:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except FileNotFoundError:
            pass
    return total
for line in sys.stdin:
    kind, n = json.loads(line)
    q, kw = kinds[kind]
    a, b = [], []
    for _ in range(n):
        t = time.perf_counter(); pg.search_messages(q, **kw); a.append(time.perf_counter() - t)
        t = time.perf_counter(); lite.search_messages(q, **kw); b.append(time.perf_counter() - t)
    m = 4 * n  # CPU: blocks of calls (the server's clock ticks are 10 ms)
    c0, s0 = time.process_time(), server_cpu()
    for _ in range(m): pg.search_messages(q, **kw)
    c1, s1 = time.process_time(), server_cpu()
    for _ in range(m): lite.search_messages(q, **kw)
    c2 = time.process_time()
    print(json.dumps([a, b, (c1 - c0) / m, (s1 - s0) / m, (c2 - c1) / m]), flush=True)
'''
size, rounds = sys.argv[1], int(sys.argv[2])
variants = sys.argv[3:]
sys.path.insert(0, BENCH)
from bench_search import QUERIES
workers = {}
for v in variants:
    env = dict(os.environ, PYTHONPATH=v)
    name = os.path.basename(v.rstrip("/"))
    copy = Path(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")).parent / f"ab-{name}.db"
    p = subprocess.Popen([sys.executable, "-c", WORKER, size, str(copy), BENCH], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/tmp")
    assert p.stdout.readline().strip() == "ready"
    workers[name] = p
res = {(w, k): ([], [], [], [], [], []) for w in workers for k, _, _ in QUERIES}
order = list(workers)
for r in range(rounds):
    for kind, _, _ in QUERIES:
        order = order[1:] + order[:1]
        for w in order:
            p = workers[w]
            p.stdin.write(json.dumps([kind, 7]) + "\n"); p.stdin.flush()
            a, b, cc, sc, lc = json.loads(p.stdout.readline())
            pa, pb, pr, pcc, psc, plc = res[(w, kind)]
            pa.append(statistics.median(a)); pb.append(statistics.median(b)); pr.append(statistics.median(a) / statistics.median(b))
            pcc.append(cc); psc.append(sc); plc.append(lc)
for p in workers.values():
    p.stdin.close(); p.wait()
print("wall p50 (ms) and paired ratio; CPU per call (ms): PG client + PG server vs SQLite, and its ratio")
for w in workers:
    print(f"== {w}")
    for kind, _, _ in QUERIES:
        pa, pb, pr, pcc, psc, plc = res[(w, kind)]
        med = statistics.median
        cpu_pg = med(pcc) + med(psc)
        print(f"  {kind:20s} wall PG {med(pa)*1e3:7.2f} SQLite {med(pb)*1e3:7.2f} ratio {med(pr):5.2f} | "
              f"cpu PG {med(pcc)*1e3:5.2f}+{med(psc)*1e3:5.2f} SQLite {med(plc)*1e3:5.2f} ratio {cpu_pg/med(plc):5.2f}")
