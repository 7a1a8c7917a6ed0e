"""Scratch (issue 19): versions of ``hermes_store/fts/snippet.py`` side by side, µs per
row, over the rows PostgreSQL's search returns (the kept server's 100k database,
``pg_keep.py``): for each kind of the word route, the page's rows are fetched once, every
version must write the same snippets, then the versions cut them in turn (order
rotating: ``_common.interleaved``), median over rounds. Then the same over long messages, which the benchmark's
rows are not (generated prose of 10, 60 and 200 sentences, ~0.6k / 3.9k / 14k
characters, one ``chat-send`` in the middle, ``docker`` every ~15 words).

    git show REV:hermes_store/fts/snippet.py > /tmp/old_snippet.py
    python benchmarks/scratch/snippet_ab.py /tmp/old_snippet.py hermes_store/fts/snippet.py
"""
import importlib.util, json, os, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import Samples, interleaved  # noqa: E402
from bench_search import QUERIES  # noqa: E402

import sqlalchemy as sa  # noqa: E402

import hermes_store.fts.query  # noqa: E402,F401  (the versions' relative import)
from hermes_store import SessionDB  # noqa: E402
from hermes_store.backends.postgresql.fts import search as pg_search  # noqa: E402
from hermes_store.fts.query import sanitize_fts5_query  # noqa: E402

WORD_ROUTE = ("word", "phrase", "prefix", "boolean", "hyphenated", "word + filters",
              "word, newest first")


def load(path: str, number: int):
    spec = importlib.util.spec_from_file_location(f"hermes_store.fts._variant{number}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cutter(module, phrases, operands):
    """One row's snippet by this version (prepared once where the version can)."""
    mine = [module.Phrase(p.words, p.prefix) for p in phrases]
    if hasattr(module, "SnippetQuery"):
        return module.SnippetQuery(mine, operands).snippet
    return lambda columns: module.snippet(columns, mine, operands)


def long_rows():
    import random
    rng = random.Random(3)
    words = ("the build failed because the container could not reach the registry and "
             "docker compose retried").split()
    rows = []
    for sentences in (10, 60, 200):
        text = " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(6, 16)))
                        .capitalize() + "." for _ in range(sentences))
        rows.append((text[:len(text) // 2] + " chat-send " + text[len(text) // 2:], None, None))
    return rows


def timed(versions, cut, rows, label):
    """Every version must cut the same snippets; then µs per row, versions interleaved."""
    first = [cut[0](row) for row in rows]
    assert all([c(row) for row in rows] == first for c in cut[1:]), label
    res = interleaved({i: (lambda c=c: [c(row) for row in rows], Samples())
                       for i, c in enumerate(cut)}, rounds=30, iterations=5)
    medians = [res[i]["p50"] / len(rows) * 1e6 for i in range(len(versions))]
    print(f"{label:24s}", "  ".join(f"{m:7.2f}" for m in medians), "  ratio",
          " ".join(f"{m / medians[0]:.2f}" for m in medians[1:]))


def page_rows(db, query, kwargs):
    """The indexed columns of the page's rows, as the word route's snippet takes them."""
    ids = [hit["id"] for hit in db.search_messages(query, **kwargs)]
    with sa.create_engine(URL).connect() as conn:
        got = {r[0]: r[1:] for r in conn.execute(sa.text(
            "SELECT id, content, role, tool_name, tool_calls FROM messages WHERE id = ANY(:ids)"),
            {"ids": ids})}
    rows = []
    for message_id in ids:
        content, role, tool_name, tool_calls = got[message_id]
        if role == "tool" and isinstance(content, str):
            content = content[:pg_search.TOOL_CONTENT_PREFIX_CHARS]
        rows.append((content, tool_name, tool_calls))
    return rows


URL = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))["search_100k"]["url"]

if __name__ == "__main__":
    versions = [load(path, n) for n, path in enumerate(sys.argv[1:])]
    db = SessionDB(URL)
    print("µs per row, median of 30 rounds; ratio: each version ÷ the first")
    for kind, query, kwargs in QUERIES:
        if kind not in WORD_ROUTE:
            continue
        rows = page_rows(db, query, kwargs)
        sanitized = sanitize_fts5_query(query)
        prepared = pg_search.snippet_query(sanitized)
        cut = [cutter(v, prepared.phrases, prepared.operands) for v in versions]
        timed(versions, cut, rows, kind)
    for query in ("chat-send", "docker"):
        prepared = pg_search.snippet_query(sanitize_fts5_query(query))
        cut = [cutter(v, prepared.phrases, prepared.operands) for v in versions]
        for row in long_rows():
            timed(versions, cut, [row], f"{query}, {len(row[0]):,} chars")
