"""Scratch (issue 19): where one PostgreSQL ``search_messages`` call spends its wall time,
on the kept server's 100k database (``pg_keep.py``): before the statement, the
statement (send, server, receive), rows to dicts, the Python snippets, the rest.
Medians over 350 calls after 50 untimed; the wrapped functions are the package's own.

    python benchmarks/scratch/pg_search_phases.py 'chat-send'
"""
import json, os, statistics, sys, time

import hermes_store.repository.prebuilt as prebuilt
import hermes_store.repository.search as search
from hermes_store import SessionDB

info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
db = SessionDB(info["search_100k"]["url"])
query = sys.argv[1] if len(sys.argv) > 1 else "chat-send"
clock, marks = time.perf_counter, {}


def timed(name, fn):
    def wrapper(*args, **kwargs):
        marks[name + "0"] = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            marks[name + "1"] = clock()
    return wrapper


prebuilt.driver_execute = timed("exec", prebuilt.driver_execute)
search._with_snippets = timed("snip", search._with_snippets)
phases = {name: [] for name in ("before the statement", "statement", "rows to dicts",
                                "snippets", "after")}
for call in range(400):
    marks.clear()
    start = clock()
    db.search_messages(query)
    end = clock()
    if call < 50:
        continue
    # (the LIKE route writes its snippets as it builds the rows: no snippet phase)
    snip0, snip1 = marks.get("snip0", marks["exec1"]), marks.get("snip1", marks["exec1"])
    for name, value in zip(phases, (marks["exec0"] - start, marks["exec1"] - marks["exec0"],
                                    snip0 - marks["exec1"], snip1 - snip0, end - snip1)):
        phases[name].append(value)
for name, values in phases.items():
    print(f"{name:22s} {statistics.median(values) * 1e3:.3f} ms")
