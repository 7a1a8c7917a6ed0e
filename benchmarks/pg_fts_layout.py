"""Which PostgreSQL word index: an expression GIN index or a stored tsvector column?

    python3 benchmarks/pg_fts_layout.py [--messages 20000] [--url postgresql+psycopg://…]

Builds ``--messages`` synthetic messages (a quarter of them long tool rows, some CJK) in
a scratch database — on a throwaway server (``tests/support/postgres.py``) unless
``--url`` names a server to use — with both candidate word indexes over the same
projection ``backends/postgresql/fts/ddl.py`` indexes, then times (best of 5) and EXPLAINs the query
shapes search runs: best-first (``ts_rank``) and newest-first pages of 20 for a frequent,
a medium and a rare word, a phrase, a prefix and a boolean query, and a trigram
substring page. Decision and figures: ``docs/postgres.md`` ("Full-text search").
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hermes_store.backends.postgresql.fts.ddl import FUNCTIONS, VECTOR_FUNCTION  # noqa: E402

DOC = ("CASE WHEN role = 'tool' THEN left(coalesce(content, ''), 8192) "
       "ELSE coalesce(content, '') END || ' ' || coalesce(tool_name, '')")


def build(conn, messages: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    vocab = sorted({"".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 10)))
                    for _ in range(30000)})[:20000]
    rnd.shuffle(vocab)
    weights = [1 / (rank + 1) ** 1.1 for rank in range(len(vocab))]
    cjk = "今天天气很好我们去公园散步吧服务端修改配置数据库连接失败重新部署测试通过"

    def sentence(n: int) -> str:
        return " ".join(rnd.choices(vocab, weights, k=n))

    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    conn.execute(FUNCTIONS[VECTOR_FUNCTION])
    conn.execute("CREATE TABLE sessions (id text PRIMARY KEY, source text NOT NULL)")
    conn.execute("CREATE TABLE messages (id bigserial PRIMARY KEY, session_id text NOT NULL, "
                 "role text NOT NULL, content text, tool_name text, timestamp double precision, "
                 "active bigint NOT NULL DEFAULT 1, compacted bigint NOT NULL DEFAULT 0, "
                 "in_scope boolean NOT NULL DEFAULT false)")
    sessions = max(1, messages // 50)
    with conn.cursor() as cur:
        with cur.copy("COPY sessions (id, source) FROM STDIN") as copy:
            for i in range(sessions):
                copy.write_row((f"s{i}", "cron" if i % 10 == 0 else "cli"))
        with cur.copy("COPY messages (session_id, role, content, tool_name, timestamp, in_scope) "
                      "FROM STDIN") as copy:
            for j in range(messages):
                session = j % sessions
                r = rnd.random()
                if r < 0.25:
                    role, content, tool = "tool", sentence(rnd.randint(100, 1500)), "shell"
                elif r < 0.30:
                    role, content, tool = "user", "".join(rnd.choices(cjk, k=rnd.randint(10, 60))), None
                else:
                    role, content, tool = rnd.choice(["user", "assistant"]), sentence(rnd.randint(5, 200)), None
                copy.write_row((f"s{session}", role, content, tool, float(j),
                                role != "tool" and session % 10 != 0))
    return vocab


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--url", help="an existing server's database to create a scratch database on")
    args = parser.parse_args(argv)

    import psycopg

    server = None
    if args.url:
        import sqlalchemy as sa

        url = sa.engine.make_url(args.url)
        params = dict(host=url.host or url.query.get("host"), port=url.port or url.query.get("port"),
                      user=url.username, password=url.password, dbname=url.database)
    else:
        from support.postgres import PostgresServer, find_bindir

        server = PostgresServer(find_bindir())
        server.start()
        params = dict(host=str(server.base), port=server.port, user="postgres", dbname="postgres")
    try:
        admin = psycopg.connect(**params, autocommit=True)
        admin.execute("DROP DATABASE IF EXISTS hermes_fts_layout")
        admin.execute("CREATE DATABASE hermes_fts_layout")
        conn = psycopg.connect(**{**params, "dbname": "hermes_fts_layout"}, autocommit=True)
        vocab = build(conn, args.messages)
        vector = f"{VECTOR_FUNCTION}({DOC})"
        started = time.perf_counter()
        conn.execute(f"CREATE INDEX words_expr ON messages USING gin ({vector})")
        print(f"expression index built in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        conn.execute(f"ALTER TABLE messages ADD COLUMN doc tsvector GENERATED ALWAYS AS ({vector}) STORED")
        conn.execute("CREATE INDEX words_col ON messages USING gin (doc)")
        print(f"stored column + index built in {time.perf_counter() - started:.1f} s")
        conn.execute("CREATE INDEX trigram ON messages USING gin (content gin_trgm_ops) WHERE in_scope")
        conn.execute("VACUUM ANALYZE messages")
        sizes = conn.execute(
            "SELECT pg_size_pretty(pg_relation_size('words_expr')), pg_size_pretty(pg_relation_size('words_col')), "
            "pg_size_pretty(sum(pg_column_size(doc))), pg_size_pretty(sum(pg_column_size(content))) FROM messages"
        ).fetchone()
        print(f"sizes: expression index {sizes[0]}, column index {sizes[1]}, stored tsvectors {sizes[2]}, "
              f"content {sizes[3]}")

        def best_ms(sql: str) -> tuple[float, int]:
            best, rows = float("inf"), 0
            for _ in range(5):
                started = time.perf_counter()
                rows = len(conn.execute(sql).fetchall())
                best = min(best, time.perf_counter() - started)
            return best * 1000, rows

        queries = {
            "frequent word": vocab[0], "medium word": vocab[100], "rare word": vocab[3000],
            "phrase": f"{vocab[0]} <-> {vocab[1]}", "prefix": f"{vocab[100][:3]}:*",
            "boolean": f"{vocab[100]} & !{vocab[0]}",
        }
        print(f"\n{'query':14s} {'matches':>7s} | {'expr ranked':>11s} {'col ranked':>10s} | "
              f"{'expr newest':>11s} {'col newest':>10s}   (ms, best of 5, page of 20)")
        for name, tsquery in queries.items():
            q = f"to_tsquery('simple', '{tsquery}')"
            matches = conn.execute(f"SELECT count(*) FROM messages WHERE doc @@ {q}").fetchone()[0]
            cells = []
            for order in ("ranked", "newest"):
                for v in (vector, "doc"):
                    key = f"ts_rank({v}, {q}) DESC" if order == "ranked" else "timestamp DESC"
                    cells.append(best_ms(f"SELECT id FROM messages WHERE {v} @@ {q} "
                                         f"AND (active = 1 OR compacted = 1) ORDER BY {key} LIMIT 20")[0])
            print(f"{name:14s} {matches:7d} | {cells[0]:11.1f} {cells[1]:10.1f} | {cells[2]:11.1f} {cells[3]:10.1f}")
        for needle in ("天气很", "服务端修改"):
            ms, rows = best_ms(f"SELECT id FROM messages WHERE in_scope AND content ILIKE '%{needle}%' "
                               "ORDER BY timestamp DESC LIMIT 20")
            print(f"trigram {needle!r}: {ms:.1f} ms ({rows} rows)")
        plan = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT id FROM messages "
                            f"WHERE {vector} @@ to_tsquery('simple', '{queries['phrase']}') "
                            "ORDER BY timestamp DESC LIMIT 20").fetchall()
        print("\nphrase, expression index (note the recheck):")
        print("\n".join("  " + row[0] for row in plan))
        conn.close()
        admin.execute("DROP DATABASE hermes_fts_layout")
        admin.close()
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
