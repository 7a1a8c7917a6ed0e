"""Scratch (issue 19): search over long messages on both engines — what the benchmark's
corpus (messages of at most ~1.7k characters) does not show. A store of 100 sessions ×
20 messages of generated prose (5–90 sentences, ~3.3k characters on average; users,
assistants and tool rows), written through ``SessionDB`` on SQLite and on a database of
the kept server (``pg_keep.py``; recreated each run), then four word-route queries,
the engines interleaved call by call, p50 of 40, and where PostgreSQL's time goes
(``pg_search_phases.py``'s phases, in this process).

The vocabulary is small, so nearly every message matches every query: the worst case
for ranking (every match ranked) and for snippets (best-first rows are the longest,
with dozens of instances each).

    python benchmarks/scratch/pg_long_messages.py [--lz4]

``--lz4`` also fills a database whose ``default_toast_compression`` is ``lz4`` and times
PostgreSQL's searches on it beside the default (``pglz``) one, with both tables' sizes.
"""
import json, os, random, statistics, sys, time

import psycopg

from hermes_store import SessionDB

INFO = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
SQLITE = os.environ.get("HERMES_SCRATCH_LONG_DB", "/tmp/speed/longmsgs.db")
QUERIES = ("docker", "chat-send", '"docker compose"', "deploy*")
WORDS = ("the build failed because the container could not reach the registry and docker "
         "compose retried after chat-send returned an error while the deploy step waited").split()


def prose(rng, sentences: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize()
                    + "." for _ in range(sentences))


def fill(where: str) -> None:
    rng = random.Random(5)
    with SessionDB(where) as db:
        for s in range(100):
            db.create_session(f"s{s}", "cli")
        for s in range(100):
            for _ in range(20):
                role = rng.choice(["user", "assistant", "tool"])
                db.append_message(f"s{s}", role=role, content=prose(rng, rng.randint(5, 90)),
                                  tool_name="terminal" if role == "tool" else None)


def phases(db, query: str) -> dict:
    import hermes_store.repository.prebuilt as prebuilt
    import hermes_store.repository.search as search
    marks, clock = {}, time.perf_counter

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            marks[name + "0"] = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                marks[name + "1"] = clock()
        return wrapper

    execute, with_snippets = prebuilt.driver_execute, search._with_snippets
    prebuilt.driver_execute = timed("exec", execute)
    search._with_snippets = timed("snip", with_snippets)
    try:
        found = {"statement": [], "snippets": [], "rest": []}
        for _ in range(20):
            marks.clear()
            start = clock()
            db.search_messages(query)
            total = clock() - start
            statement, snippets = marks["exec1"] - marks["exec0"], marks["snip1"] - marks["snip0"]
            for name, value in zip(found, (statement, snippets, total - statement - snippets)):
                found[name].append(value)
        return {name: statistics.median(values) * 1e3 for name, values in found.items()}
    finally:
        prebuilt.driver_execute, search._with_snippets = execute, with_snippets


if __name__ == "__main__":
    admin = psycopg.connect(host="127.0.0.1", port=INFO["port"], user="postgres",
                            dbname="postgres", autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS longmsgs")
    admin.execute("CREATE DATABASE longmsgs")
    pg_url = f"postgresql+psycopg://postgres@127.0.0.1:{INFO['port']}/longmsgs"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(SQLITE + suffix):
            os.remove(SQLITE + suffix)
    for where in (SQLITE, pg_url):
        fill(where)
    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute("VACUUM ANALYZE messages")
    lite, pg = SessionDB(SQLITE), SessionDB(pg_url)
    print("p50 ms; PostgreSQL's phases (ms): the statement, the Python snippets, the rest")
    for query in QUERIES:
        for db in (lite, pg):
            for _ in range(12):
                db.search_messages(query)
        times = {"pg": [], "lite": []}
        for turn in range(40):
            for name, db in (("pg", pg), ("lite", lite)) if turn % 2 else (("lite", lite), ("pg", pg)):
                start = time.perf_counter()
                db.search_messages(query)
                times[name].append(time.perf_counter() - start)
        a, b = (statistics.median(times[k]) * 1e3 for k in ("pg", "lite"))
        split = phases(pg, query)
        print(f"{query:18s} PostgreSQL {a:7.2f}  SQLite {b:6.2f}  ratio {a / b:4.2f}  |  "
              + "  ".join(f"{k} {v:.2f}" for k, v in split.items()))
    if "--lz4" in sys.argv:
        admin.execute("DROP DATABASE IF EXISTS longlz4")
        admin.execute("CREATE DATABASE longlz4")
        admin.execute("ALTER DATABASE longlz4 SET default_toast_compression = 'lz4'")
        lz4_url = pg_url.replace("/longmsgs", "/longlz4")
        fill(lz4_url)
        lz4 = SessionDB(lz4_url)
        for name, url in (("pglz", pg_url), ("lz4", lz4_url)):
            with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"),
                                 autocommit=True) as c:
                c.execute("VACUUM ANALYZE messages")
                size = c.execute("SELECT pg_size_pretty(pg_total_relation_size('messages'))")
                print(f"messages with {name}: {size.fetchone()[0]}")
        for query in QUERIES:
            for db in (pg, lz4):
                for _ in range(12):
                    db.search_messages(query)
            times = {"pglz": [], "lz4": []}
            for turn in range(30):
                for name, db in (("pglz", pg), ("lz4", lz4)) if turn % 2 else (("lz4", lz4), ("pglz", pg)):
                    start = time.perf_counter()
                    db.search_messages(query)
                    times[name].append(time.perf_counter() - start)
            a, b = (statistics.median(times[k]) * 1e3 for k in ("pglz", "lz4"))
            print(f"{query:18s} pglz {a:6.2f}  lz4 {b:6.2f}  ratio {b / a:.2f}")
    sys.exit(0)
