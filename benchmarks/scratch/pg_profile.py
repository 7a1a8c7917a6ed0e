"""Scratch (issue 19): per search kind at 100k, the statements PostgreSQL receives, their
server time (EXPLAIN ANALYZE), and the whole call's client time, both engines.

    python benchmarks/scratch/pg_profile.py URL SQLITE_COPY [--explain]
"""
import json, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_search import QUERIES
from _floor import Recorder, engine_of
from hermes_store import SessionDB

url, lite_path = sys.argv[1], sys.argv[2]
explain = "--explain" in sys.argv
only = [a.split("=",1)[1] for a in sys.argv if a.startswith("--only=")]
pg, lite = SessionDB(url), SessionDB(lite_path)

def p50(fn, n=40):
    for _ in range(12): fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3

for kind, query, kw in QUERIES:
    if only and kind not in only: continue
    rec = Recorder(engine_of(pg))
    with rec.call():
        pg.search_messages(query, **kw)
    rec.close()
    a = p50(lambda: pg.search_messages(query, **kw))
    b = p50(lambda: lite.search_messages(query, **kw))
    cpu0 = time.process_time(); [pg.search_messages(query, **kw) for _ in range(20)]; cpu = (time.process_time()-cpu0)/20*1e3
    line = f"{kind:20s} pg {a:6.2f}  lite {b:6.2f}  ratio {a/b:4.2f}  pg client cpu {cpu:5.2f}"
    if explain:
        with engine_of(pg).connect() as conn:
            cur = conn.connection.dbapi_connection.cursor()
            for k, st, params in rec.calls[0]:
                if k != "exec" or not st.lstrip().upper().startswith(("SELECT", "WITH")): continue
                times = []
                for _ in range(5):
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + st, params)
                    plan = cur.fetchone()[0]
                    times.append(plan[0]["Execution Time"] + plan[0]["Planning Time"])
                line += f"  server {statistics.median(times):.2f} ms"
                if "--plans" in sys.argv:
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + st, params)
                    print(st, params); print("\n".join(r[0] for r in cur.fetchall()))
            conn.rollback()
    print(line, flush=True)
