"""A new SQLite file at head in one step (decision D18), without Alembic.

    engine = open_new(path, busy_timeout=1.0)   # SessionDB on a file of zero bytes
    create_file(path)                           # migrate.upgrade of a missing/empty file

An empty file does not need revisions 0001…0030 replayed to reach a schema this package
already knows: it gets the head schema in one transaction and the stamp with it. The
statements are ``head_schema`` (beside this module): what the revisions leave in
``sqlite_master``, byte for byte, in the order they created it (tables, indexes, the
display-order triggers, the FTS views, virtual tables and triggers), the FTS5
``'rebuild'`` they end with, and the rows they write (``alembic_version`` at head,
``schema_version``, ``state_meta``'s ``fts_storage_version``); a store's file also gets
its own random identity there (``files/stamp.py``; not part of the head schema: a
stairway file is stamped at its first writable open). Replaying the very text the
stairway produced, rather than rendering Core's DDL, keeps one shape of head file:
a new file and an upgraded one have the same column order and the same stored CREATE
text, so every later revision, downgrade and repair meets the same schema whichever way
the file reached head (``tests/migrations/test_new_store.py`` builds both and compares
them object by object and row by row, and the frozen text with the stairway's). This
is Rails' ``structure.sql`` / Alembic's "building an up to date database from scratch",
with the stairway kept as the proof.

Only a database with no object at all is created this way, under the migration lock
(``fileops.migration_lock``) and SQLite's write lock (``BEGIN IMMEDIATE``), the emptiness
checked again inside: a concurrent ``alembic upgrade`` or another process's open either
finished first (the file then has objects and goes the usual way: at head, or the
revisions) or waits for this one. Adoption of existing files and every upgrade run the
revisions as before; ``alembic upgrade head`` itself always climbs the stairway.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from . import head_schema
from ..files import stamp
from ..files.ops import migration_lock
from ..library import SQLITE as sqlite3

#: what ``migrate.upgrade``'s ``progress`` hears for the one step
PROGRESS = "head schema created in one step"


def create(conn: sqlite3.Connection, identity: int | None = None) -> bool:
    """Create the head schema on the empty database behind ``conn``, in one
    ``BEGIN IMMEDIATE`` transaction; False (nothing written) when the database has any
    object already. Raises what SQLite raises, the transaction rolled back.
    ``identity``: the file's identity, stamped in the same transaction (``files/stamp``;
    a store's file always has one, the stairway's golden comparison none)."""
    previous = conn.isolation_level
    conn.isolation_level = None  # our BEGIN is the only one
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
                conn.execute("ROLLBACK")
                return False
            for statement in head_schema.STATEMENTS:
                conn.execute(statement)
            for table, columns, values in head_schema.ROWS:
                conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
                             f"VALUES ({', '.join('?' * len(values))})", values)
            if identity is not None:
                stamp.write(conn, identity)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return True
    finally:
        conn.isolation_level = previous


def objects(conn: sqlite3.Connection) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    """(statements, rows) that recreate the database behind ``conn``: every object's
    stored CREATE text in ``sqlite_master`` order, leaving out what SQLite creates by
    itself (automatic indexes, ``sqlite_sequence``, FTS5 shadow tables), and every row
    of its ordinary tables. ``head_schema`` is this, taken of a stairway file."""
    master = conn.execute(
        "SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall()
    virtual = {name for kind, name, sql in master
               if kind == "table" and (sql or "").upper().startswith("CREATE VIRTUAL TABLE")}
    made_by_sqlite = {f"{v}_{suffix}" for v in virtual
                      for suffix in ("data", "idx", "content", "docsize", "config")}
    made_by_sqlite.add("sqlite_sequence")
    statements = [sql for _, name, sql in master if sql and name not in made_by_sqlite]
    # The revisions end with an FTS5 'rebuild' of each index, which writes its (empty)
    # totals record; the same command gives a new file the same shadow rows.
    statements += [f"INSERT INTO \"{name}\"(\"{name}\") VALUES ('rebuild')"
                   for name in sorted(virtual) if _is_fts5(master, name)]
    rows = []
    for kind, name, _ in master:
        if kind != "table" or name in made_by_sqlite or name in virtual:
            continue
        columns = tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{name}")'))
        for values in conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid'):
            rows.append((name, columns, tuple(values)))
    return tuple(statements), tuple(rows)


def _is_fts5(master, name: str) -> bool:
    sql = next(sql for _, n, sql in master if n == name)
    return " fts5" in sql.lower().split("(", 1)[0]


def render(statements: tuple[str, ...], rows: tuple[tuple, ...], revision: str) -> str:
    """``head_schema``'s source for ``objects``' answer (kept readable: each statement
    as a triple-quoted string where its text allows)."""
    def literal(text: str) -> str:
        # repr() where an editor could change the text unseen (tabs, trailing blanks)
        risky = ('"""' in text or "\\" in text or "\t" in text or text[:1] == '"'
                 or text[-1:] == '"' or any(line != line.rstrip() for line in text.split("\n")))
        return repr(text) if risky else f'"""{text}"""'

    lines = [
        '"""The head schema of a SQLite state.db (revision ' + revision + '), as revisions',
        "0001…" + revision + " leave it on an empty file: every CREATE statement exactly as",
        "``sqlite_master`` stores it, in creation order, then the FTS5 'rebuild' the",
        "revisions end with (it writes each empty index's totals record), and the rows the",
        "revisions write.",
        "Replayed by ``hermes_store.backends.sqlite.migrate.create`` to create a new file in one step (D18).",
        "",
        "Generated from the stairway; do not edit. After a new revision, regenerate it and",
        "review the diff:",
        "    HERMES_UPDATE_GOLDEN=1 python3 -m pytest tests/migrations/test_new_store.py",
        '"""',
        "",
        "# fmt: off",
        f"REVISION = {revision!r}",
        "",
        "STATEMENTS = (",
    ]
    lines += [f"{literal(s)}," for s in statements]
    lines += [")", "", "ROWS = ("]
    lines += [f"    {row!r}," for row in rows]
    lines += [")", ""]
    return "\n".join(lines)


def create_file(path: Path, conn: sqlite3.Connection | None = None, *,
                busy_timeout: float = 1.0) -> bool:
    """Give the empty file at ``path`` the head schema in one step, with an identity of
    its own (``files/stamp``), under the migration lock; False (nothing written) when it
    has any object already. ``conn``: a DBAPI connection to it to use; else one of its
    own, in the journal mode the engine would give it (``journal.py``: WAL on a local
    disk, DELETE on a VM share or network mount, or an explicit setting)."""
    identity = stamp.new_identity()
    with migration_lock(path):
        if conn is not None:
            return create(conn, identity)
        from ..files import journal

        own = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout)
        try:
            own.execute("PRAGMA synchronous=FULL")
            journal.apply(own, journal.plan(path), path)
            return create(own, identity)
        finally:
            own.close()


def open_new(path: Path, *, busy_timeout: float, journal_mode: str | None = "auto",
             watch=None) -> sa.Engine | None:
    """The engine of a new store: the file (of zero bytes) gets the head schema on the
    engine's first connection, which the store then keeps (no second open, and its
    pragmas and WAL mode from the engine's connect hook). None when the file holds
    objects after all (another process's): the caller goes the usual way."""
    from ..engine import create_engine

    engine = create_engine(path, busy_timeout=busy_timeout, journal_mode=journal_mode,
                           watch=watch)
    try:
        with engine.connect() as conn:
            created = create_file(path, conn.connection.dbapi_connection)
    except BaseException:
        engine.dispose()
        raise
    if created:
        return engine
    engine.dispose()
    return None

