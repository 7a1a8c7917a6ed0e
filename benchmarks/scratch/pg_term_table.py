"""Scratch (issue 19): would a term table rank a word query with less server work?

On the kept server (``pg_keep.py``), builds ``scratch_terms`` — one row per (lexeme,
message) of the visible messages, with the lexeme's count and the document's length,
btree on (lexeme, message_id) INCLUDE (tf, doclen) — and times, alternating, the top 20
of a word query ranked two ways: ``ts_rank`` over ``messages.fts_document`` (today's
page statement, the GIN bitmap scan visits one heap page per match) against a BM25-like
score from an index-only scan of the term table (its average document length computed
from the table). Drops the table after, however the run ends.

    python benchmarks/scratch/pg_term_table.py [search_100k] [word ...]
"""
import json, os, statistics, sys, time
import psycopg

info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
db = sys.argv[1] if len(sys.argv) > 1 else "search_100k"
words = sys.argv[2:] or ["docker", "kubernetes", "compose"]
conn = psycopg.connect(host="127.0.0.1", port=info["port"], user="postgres", dbname=db,
                       autocommit=True)
conn.execute("DROP TABLE IF EXISTS scratch_terms")
try:
    t = time.perf_counter()
    conn.execute("""CREATE TABLE scratch_terms AS
        SELECT u.lexeme, m.id AS message_id, cardinality(u.positions)::int2 AS tf,
               length(m.fts_document)::int2 AS doclen
        FROM messages m, unnest(m.fts_document) u
        WHERE (m.active = 1 OR m.compacted = 1) AND coalesce(m.display_kind, '') <> 'hidden'""")
    conn.execute("CREATE INDEX ON scratch_terms (lexeme, message_id) INCLUDE (tf, doclen)")
    conn.execute("VACUUM ANALYZE scratch_terms")
    rows, size = conn.execute("SELECT count(*), pg_total_relation_size('scratch_terms') FROM scratch_terms").fetchone()
    msize = conn.execute("SELECT pg_total_relation_size('messages')").fetchone()[0]
    avg_len = conn.execute("SELECT avg(doclen) FROM (SELECT DISTINCT message_id, doclen "
                           "FROM scratch_terms) d").fetchone()[0]
    print(f"built in {time.perf_counter() - t:.1f} s: {rows:,} rows, {size / 2**20:.0f} MiB "
          f"(messages with its indexes: {msize / 2**20:.0f} MiB); average document length "
          f"{avg_len:.1f} lexemes")
    TS_RANK = ("SELECT id FROM messages WHERE fts_document @@ (SELECT to_tsquery('simple', %(w)s)) "
               "AND (active = 1 OR compacted = 1) AND coalesce(display_kind, '') <> 'hidden' "
               "ORDER BY ts_rank(fts_document, (SELECT to_tsquery('simple', %(w)s))), id LIMIT 20")
    TERMS = ("SELECT message_id FROM scratch_terms WHERE lexeme = %(w)s "
             "ORDER BY tf::float8 / (tf + 1.2 * (0.25 + 0.75 * doclen / %(avg_len)s)) DESC, message_id LIMIT 20")
    for w in words:
        params = {"w": w, "avg_len": float(avg_len)}
        matches = conn.execute(TERMS.replace("LIMIT 20", ""), params).rowcount
        times = {"ts_rank": [], "terms": []}
        for _ in range(5):
            for st in (TS_RANK, TERMS):
                conn.execute(st, params).fetchall()
        for _ in range(41):
            for name, st in (("ts_rank", TS_RANK), ("terms", TERMS)):
                a = time.perf_counter(); conn.execute(st, params).fetchall()
                times[name].append(time.perf_counter() - a)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"{w!r} ({matches} matches): ts_rank {med['ts_rank']:.2f} ms, term table "
              f"{med['terms']:.2f} ms, ratio {med['terms'] / med['ts_rank']:.2f}")
finally:
    conn.execute("DROP TABLE IF EXISTS scratch_terms")
