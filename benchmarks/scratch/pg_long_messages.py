"""Scratch (issue 19): search over long messages on both engines — what the benchmark's
corpus (messages of at most ~1.7k characters) does not show. A store of 100 sessions ×
20 messages of generated prose (5–90 sentences, ~3.3k characters on average; users,
assistants and tool rows), written through ``SessionDB`` on SQLite and on a database of
the kept server (``pg_keep.py``; recreated each run), then four word-route queries,
the engines interleaved (``_common.interleaved``), and where PostgreSQL's time goes
(``pg_search_phases.phases``).

The vocabulary is small, so nearly every message matches every query: the worst case
for ranking (every match ranked) and for snippets (best-first rows are the longest,
with dozens of instances each).

    python benchmarks/scratch/pg_long_messages.py [--lz4]

``--lz4`` also fills a database whose ``default_toast_compression`` is ``lz4`` and times
PostgreSQL's searches on it beside the default (``pglz``) one, with both tables' and
their stored content's sizes.
"""
import json, os, random, sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import Samples, interleaved  # noqa: E402
from pg_search_phases import phases  # noqa: E402

from hermes_store import SessionDB  # noqa: E402

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


def p50s(sides: dict, query: str) -> dict[str, float]:
    """p50 (ms) of ``query`` on each store in ``sides``, interleaved after 12 untimed calls."""
    for db in sides.values():
        for _ in range(12):
            db.search_messages(query)
    res = interleaved({name: (lambda db=db: db.search_messages(query), Samples())
                       for name, db in sides.items()}, rounds=20, iterations=2)
    return {name: summary["p50"] * 1e3 for name, summary in res.items()}


def stored(url: str) -> str:
    """The messages table's size and its stored content's (after a VACUUM)."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute("VACUUM ANALYZE messages")
        table, content = c.execute(
            "SELECT pg_size_pretty(pg_total_relation_size('messages')),"
            " pg_size_pretty(sum(pg_column_size(content))::bigint) FROM messages").fetchone()
    return f"table {table}, content stored {content}"


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
    print(f"PostgreSQL: {stored(pg_url)}")
    lite, pg = SessionDB(SQLITE), SessionDB(pg_url)
    print("p50 ms; PostgreSQL's phases (ms, pg_search_phases.py)")
    for query in QUERIES:
        times = p50s({"pg": pg, "lite": lite}, query)
        split = phases(pg, query, calls=60, untimed=10)
        print(f"{query:18s} PostgreSQL {times['pg']:7.2f}  SQLite {times['lite']:6.2f}  "
              f"ratio {times['pg'] / times['lite']:4.2f}  |  "
              + "  ".join(f"{k} {v:.2f}" for k, v in split.items()))
    if "--lz4" in sys.argv:
        admin.execute("DROP DATABASE IF EXISTS longlz4")
        admin.execute("CREATE DATABASE longlz4")
        admin.execute("ALTER DATABASE longlz4 SET default_toast_compression = 'lz4'")
        lz4_url = pg_url.replace("/longmsgs", "/longlz4")
        fill(lz4_url)
        print(f"with lz4: {stored(lz4_url)}")
        lz4 = SessionDB(lz4_url)
        for query in QUERIES:
            times = p50s({"pglz": pg, "lz4": lz4}, query)
            print(f"{query:18s} pglz {times['pglz']:6.2f}  lz4 {times['lz4']:6.2f}  "
                  f"ratio {times['lz4'] / times['pglz']:.2f}")
