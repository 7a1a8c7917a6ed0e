"""Stairway: every revision's downgrade undoes exactly its upgrade, on a populated file.

For each revision in order: upgrade to it, record the schema, downgrade one step,
upgrade again — the schema must be the one reached the first time, schema_version
must follow, and the rows already in the file must still be there.
"""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

from support.migrations import row_counts, schema, schema_version
from support import schema_dump

from hermes_store import migrate, revisions


def _populate(path, n: int) -> None:
    """Rows using only v1 columns, so they fit every revision's shape."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, model_config) VALUES (?, 'cli', ?, '{}')",
            (f"s{n}", float(n)),
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [(f"s{n}", "user", f"stair {n} question", n + 0.1),
             (f"s{n}", "assistant", f"stair {n} answer 階段", n + 0.2)],
        )
    sqlite3.connect(path).close()


def test_every_revision_downgrades_and_upgrades_back_to_the_same_schema(tmp_path):
    path = tmp_path / "stairway.db"
    chain = [rev for rev, _ in migrate.history()]  # oldest first: the order it climbs
    assert chain[0] == "0001" and chain[-1] == migrate.head()
    failures = []
    for n, rev in enumerate(chain, start=1):
        migrate.upgrade(path, rev)
        _populate(path, n)
        first = schema(path)
        counts = row_counts(path)
        previous = chain[n - 2] if n > 1 else "base"
        migrate.downgrade(path, previous)
        if previous != "base":
            assert schema_version(path) == [revisions.upstream_version(previous)], (
                f"after downgrading {rev}")
        migrate.upgrade(path, rev)
        assert schema_version(path) == [revisions.upstream_version(rev)], (
            f"after re-upgrading {rev}")
        again = schema(path)
        difference = schema_dump.diff(first, again)
        if difference:
            failures.append(f"{rev}: " + "; ".join(difference))
        if n > 1:  # 0001's downgrade drops every table by design
            after = row_counts(path)
            lost = {t: (c, after.get(t)) for t, c in counts.items()
                    if t in ("sessions", "messages") and after.get(t) != c}
            if lost:
                failures.append(f"{rev}: rows lost by down/up {lost}")
        else:
            _populate(path, n)
    assert not failures, "\n".join(failures)
