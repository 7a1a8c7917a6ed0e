"""Scratch: time SQL statements on the kept server (median of N, after warm-up).
    python pg_sql.py DBNAME 'SQL1' 'SQL2' ...   (or -f file with statements separated by ';;')"""
import json, os, statistics, sys, time
import psycopg
info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
db = sys.argv[1]
stmts = sys.argv[2:]
if stmts and stmts[0] == "-f":
    stmts = [s.strip() for s in open(stmts[1]).read().split(";;") if s.strip()]
conn = psycopg.connect(host="127.0.0.1", port=info["port"], user="postgres", dbname=db, autocommit=True)
for st in stmts:
    for _ in range(5): rows = conn.execute(st).fetchall()
    ts = []
    for _ in range(21):
        t = time.perf_counter(); rows = conn.execute(st).fetchall(); ts.append(time.perf_counter() - t)
    print(f"{statistics.median(ts)*1e3:8.2f} ms  rows={len(rows):5d}  {st[:150]}")
