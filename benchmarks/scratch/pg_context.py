"""Scratch: the 40 neighbour probes of a search page, three ways, on the kept server.
    python pg_context.py [DB]"""
import json, os, re, statistics, sys, time
import psycopg
info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
db = sys.argv[1] if len(sys.argv) > 1 else "search_100k"
conn = psycopg.connect(host="127.0.0.1", port=info["port"], user="postgres", dbname=db, autocommit=True)
ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE fts_document @@ to_tsquery('simple', 'chat <-> send') ORDER BY id LIMIT 20")]
page = "(SELECT unnest(%(ids)s::bigint[]) AS page_id) AS page JOIN messages ON messages.id = page.page_id"
variants = {
 "no context": f"SELECT messages.id, messages.content FROM {page}",
 "id probe + pk join (today)": f"""SELECT messages.id, messages.content, prev_message.role, prev_message.content, next_message.role, next_message.content FROM {page}
 LEFT OUTER JOIN messages AS prev_message ON prev_message.id = (SELECT probe.id FROM messages AS probe WHERE probe.session_id = messages.session_id AND (probe.timestamp, probe.id) < (messages.timestamp, messages.id) ORDER BY probe.timestamp DESC, probe.id DESC LIMIT 1)
 LEFT OUTER JOIN messages AS next_message ON next_message.id = (SELECT probe.id FROM messages AS probe WHERE probe.session_id = messages.session_id AND (probe.timestamp, probe.id) > (messages.timestamp, messages.id) ORDER BY probe.timestamp ASC, probe.id ASC LIMIT 1)""",
 "lateral rows": f"""SELECT messages.id, messages.content, prev_message.role, prev_message.content, next_message.role, next_message.content FROM {page}
 LEFT JOIN LATERAL (SELECT probe.role, probe.content FROM messages AS probe WHERE probe.session_id = messages.session_id AND (probe.timestamp, probe.id) < (messages.timestamp, messages.id) ORDER BY probe.timestamp DESC, probe.id DESC LIMIT 1) AS prev_message ON true
 LEFT JOIN LATERAL (SELECT probe.role, probe.content FROM messages AS probe WHERE probe.session_id = messages.session_id AND (probe.timestamp, probe.id) > (messages.timestamp, messages.id) ORDER BY probe.timestamp ASC, probe.id ASC LIMIT 1) AS next_message ON true""",
}
def run():
    for name, sql in variants.items():
        for _ in range(8): rows = conn.execute(sql, {"ids": ids}, prepare=True).fetchall()
        ts = []
        for _ in range(41):
            t = time.perf_counter(); rows = conn.execute(sql, {"ids": ids}, prepare=True).fetchall(); ts.append(time.perf_counter() - t)
        print(f"  {name:28s} {statistics.median(ts)*1e3:6.2f} ms rows={len(rows)}")
print("indexes as they are:"); run()
conn.execute("CREATE INDEX IF NOT EXISTS scratch_session_time_id ON messages (session_id, timestamp, id)")
conn.execute("ANALYZE messages")
print("with (session_id, timestamp, id):"); run()
conn.execute("DROP INDEX scratch_session_time_id")
