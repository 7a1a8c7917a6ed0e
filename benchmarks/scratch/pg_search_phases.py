"""Scratch (issue 19): where one PostgreSQL ``search_messages`` call spends its wall time,
on the kept server's 100k database (``pg_keep.py``): before the statement, the
statement (send, server, receive), rows to dicts, the Python snippets, the rest.
Medians over 350 calls after 50 untimed; the wrapped functions are the package's own
(put back afterwards). ``phases(db, query)`` is what ``pg_long_messages.py`` reports.

    python benchmarks/scratch/pg_search_phases.py 'chat-send'
"""
import json, os, statistics, sys, time

import hermes_store.repository.prebuilt as prebuilt
import hermes_store.repository.search as search
from hermes_store import SessionDB

PHASES = ("before the statement", "statement", "rows to dicts", "snippets", "after")


def phases(db, query: str, calls: int = 400, untimed: int = 50) -> dict[str, float]:
    """Median milliseconds of each of ``PHASES`` over ``calls - untimed`` searches."""
    clock, marks = time.perf_counter, {}

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
    found = {name: [] for name in PHASES}
    try:
        for call in range(calls):
            marks.clear()
            start = clock()
            db.search_messages(query)
            end = clock()
            if call < untimed:
                continue
            # (the LIKE route writes its snippets as it builds the rows: no snippet phase)
            snip0 = marks.get("snip0", marks["exec1"])
            snip1 = marks.get("snip1", marks["exec1"])
            for name, value in zip(PHASES, (marks["exec0"] - start,
                                            marks["exec1"] - marks["exec0"],
                                            snip0 - marks["exec1"], snip1 - snip0, end - snip1)):
                found[name].append(value)
    finally:
        prebuilt.driver_execute, search._with_snippets = execute, with_snippets
    return {name: statistics.median(values) * 1e3 for name, values in found.items()}


if __name__ == "__main__":
    info = json.load(open(os.environ.get("HERMES_SCRATCH_PG", "/tmp/speed/pg.json")))
    for name, ms in phases(SessionDB(info["search_100k"]["url"]),
                           sys.argv[1] if len(sys.argv) > 1 else "chat-send").items():
        print(f"{name:22s} {ms:.3f} ms")
