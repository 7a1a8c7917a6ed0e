"""Scratch: the page statement of one search kind, and variants of it, timed on the kept
server through psycopg with prepared statements (generic plans, as the store runs them).
    python pg_variants.py KIND"""
import json, os, re, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import psycopg
from bench_search import QUERIES
from _floor import Recorder, engine_of
from hermes_store import SessionDB

info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
kind = sys.argv[1]
db = sys.argv[2] if len(sys.argv) > 2 else "search_100k"
query, kw = next((q, k) for n, q, k in QUERIES if n == kind)
store = SessionDB(info[db]["url"])
rec = Recorder(engine_of(store))
with rec.call():
    store.search_messages(query, **kw)
rec.close()
store.close()
st, params = [(s, p) for k, s, p in rec.calls[0] if k == "exec" and "page" in s][-1]
conn = psycopg.connect(host="127.0.0.1", port=info["port"], user="postgres", dbname=db, autocommit=True)

def strip_snippet(s):
    i = s.index("(SELECT concat(CASE"); j = s.index("AS snippet")
    return s[:i] + "NULL " + s[j:]

def strip_context(s):
    s = re.sub(r"prev_message\.role AS prev_role, prev_message\.content AS prev_content, next_message\.role AS next_role, next_message\.content AS next_content, ", "", s)
    i = s.index("LEFT OUTER JOIN messages AS prev_message")
    j = s.index("ORDER BY page.page_rank") if "ORDER BY page.page_rank" in s else s.index("ORDER BY page.page_time")
    return s[:i] + s[j:]

variants = {"as is": st, "no snippet": strip_snippet(st), "no context": strip_context(st),
            "neither": strip_context(strip_snippet(st))}
m = re.search(r"\(SELECT (messages\.id AS page_id.*?)\) AS page JOIN", st, re.S)
if m: variants["page only"] = "SELECT " + m.group(1)
for extra in sys.argv[3:]:
    name, _, sql = extra.partition("=")
    variants[name] = sql
for name, sql in variants.items():
    for _ in range(8): rows = conn.execute(sql, params, prepare=True).fetchall()
    ts = []
    for _ in range(61):
        t = time.perf_counter(); rows = conn.execute(sql, params, prepare=True).fetchall(); ts.append(time.perf_counter() - t)
    print(f"{kind:12s} {name:12s} median {statistics.median(ts)*1e3:7.2f} ms  min {min(ts)*1e3:6.2f} ms rows={len(rows)}")
