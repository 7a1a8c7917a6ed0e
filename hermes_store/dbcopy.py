"""Copy a whole store from one engine to the other: ``hermes-store db copy SRC DST`` (D14).

A SQLite file into PostgreSQL to scale out, a PostgreSQL database into a SQLite file to
take a snapshot home (and file → file, server → server). ``SRC`` and ``DST`` are paths
or SQLAlchemy URLs (:mod:`hermes_store.location`).

``copy_store(source, destination, *, resume=False, …) -> CopyReport``
    In order:

    1. **Source.** It must be at head (and so must its Telegram topic tables, when it
       has them): otherwise :class:`~hermes_store.errors.SchemaOutOfDateError` naming
       ``hermes-store db upgrade``. It is only read, in one read-only snapshot per run.
       A SQLite source whose rows break a foreign key or hold an empty key is refused
       (PostgreSQL would reject those rows; ``hermes-store recover`` repairs them).
    2. **Destination.** Missing or empty: created at head (``migrate.upgrade``: SQLite's
       migrations, or PostgreSQL's baseline), with the Telegram topic tables when the
       source has them. A destination that holds rows is refused (:class:`CopyError`)
       unless ``resume`` is given and it holds the progress record of an interrupted
       copy of the same source.
    3. **Prepare** (one transaction). The progress record (table
       ``hermes_store_copy``) is created. What would slow the load or change the
       copied rows is suspended, its definition kept in the record so an interrupted
       run can restore it: secondary indexes (and on PostgreSQL the foreign keys:
       a parent session may come after its children in key order), the display-order
       triggers (they would number rows whose order is NULL). Full-text: on SQLite
       the migrations' rebuild window (``fts_rebuild_high_water`` /
       ``fts_rebuild_progress``) is opened over the source's message ids, so the gated
       triggers skip the rows; on PostgreSQL the two GIN indexes are dropped
       (``fts.postgres.drop_indexes``).
    4. **Load**, table by table: batches read by keyset pagination on the primary key
       (bounded in rows and in bytes, never a whole table), written with ``COPY`` on
       PostgreSQL and ``executemany`` on SQLite; each batch commits together with its
       last key in the progress record, so a rerun with ``resume`` continues after the
       last committed batch and never writes a row twice.
    5. **Finish** (one transaction): the suspended objects come back from their recorded
       definitions; the full-text indexes are built (SQLite: ``fts.maintenance.rebuild``,
       which also closes the window; PostgreSQL: ``fts.postgres.create_indexes``);
       ``messages``' id counter is carried over (``setval`` / ``sqlite_sequence``), so
       ids are never reused; SQLite's ``foreign_key_check`` must be clean.
    6. **Verify** (:func:`verify_copy`): every table's row count and content hash on
       both sides; a mismatch raises :class:`CopyMismatchError` naming the tables. The
       progress record is removed only once verification passed.

What is copied: every table of the head schema but ``schema_version`` (the destination
is created at head itself), the Telegram topic tables when the source has them, and
every ``state_meta`` key but the full-text layer's own (``fts_*``): derived data is
rebuilt in the destination, never copied. Ids and values come through unchanged:
``messages.id``, every character of text (NUL and the ``"\\x00json:"`` marker through
PostgreSQL's NUL encoding), REAL values bit for bit, 64-bit integers, BLOBs.

The content hash of a table: each row's values (in the head schema's column order, as
Python reads them from either engine) hashed with BLAKE2b, and the row hashes summed
modulo 2**128. The sum does not depend on the order rows are read in, so the two engines'
collations (and the NUL encoding's effect on the order of keys) cannot make equal tables
differ; rows are still streamed in key order in bounded batches.

Copy a store nobody writes to (stop the gateway and agents, or copy a
``hermes-store db backup``): each run reads one snapshot, but a resumed copy reads a
later one, and verification compares with the source as it is at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import errors, location, schema, telegram_schema
from .engine import BEGIN_MODE
from .location import Target

#: the most rows one batch reads and writes (``--batch-rows``)
BATCH_ROWS = 5000
#: ... and about the most bytes of text and BLOBs (fewer rows when rows are large)
BATCH_BYTES = 8 * 1024 * 1024
#: the destination's progress record: present from "prepared" until "verified"
PROGRESS_TABLE = "hermes_store_copy"
#: ``state_meta`` keys the full-text layer owns: rebuilt in the destination, never copied
DERIVED_META_PREFIXES = ("fts_",)

#: ``progress(phase, table, done, total)``; phase is "copy" or "verify"
ProgressCallback = Callable[[str, str, int, int], None]

_progress_md = sa.MetaData()
progress_table = sa.Table(
    PROGRESS_TABLE,
    _progress_md,
    # "source" (value: the source copied from), "table" (value: last key copied, as
    # JSON), "ddl" (value: a suspended object's definition; rows: its position),
    # "state" (name "finished": the finish step committed)
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.Text),
    sa.Column("rows", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("done", sa.Integer, nullable=False, server_default=sa.text("0")),
)
_P = progress_table.c

#: the display-order triggers (same names on both engines)
_DISPLAY_TRIGGERS = (
    "messages_display_order_insert",
    "messages_display_visibility_update",
    "messages_display_identity_update",
    "messages_display_identity_delete",
)


class CopyError(errors.HermesStoreError):
    """``db copy`` cannot start or go on (a non-empty destination, another copy's
    progress record, data PostgreSQL cannot hold…); the message says what to do."""


class CopyMismatchError(CopyError):
    """Verification found tables whose row count or content differ; ``report`` says
    which (the destination keeps its progress record)."""

    def __init__(self, message: str, report: "CopyReport") -> None:
        super().__init__(message)
        self.report = report


# --------------------------------------------------------------------------- reports


@dataclass
class TableReport:
    name: str
    copied: int = 0
    source_rows: int | None = None
    destination_rows: int | None = None
    source_hash: str | None = None
    destination_hash: str | None = None

    @property
    def ok(self) -> bool:
        return (self.source_rows == self.destination_rows
                and self.source_hash == self.destination_hash)

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


@dataclass
class CopyReport:
    source: str
    destination: str
    #: the destination was created (missing file, empty database)
    created: bool = False
    #: this run continued an interrupted copy
    resumed: bool = False
    tables: list[TableReport] = field(default_factory=list)
    #: the highest message id ever handed out, on each side (ids are never reused)
    source_id_high_water: int | None = None
    destination_id_high_water: int | None = None
    load_seconds: float = 0.0
    finish_seconds: float = 0.0
    verify_seconds: float = 0.0
    seconds: float = 0.0
    verified: bool = False
    #: the destination still holds a progress record (a copy that did not finish)
    unfinished: bool = False

    @property
    def ok(self) -> bool:
        return self.verified and not self.unfinished and all(t.ok for t in self.tables) and (
            self.destination_id_high_water or 0) >= (self.source_id_high_water or 0)

    @property
    def mismatched(self) -> list[str]:
        return [t.name for t in self.tables if not t.ok]

    def table(self, name: str) -> TableReport:
        for item in self.tables:
            if item.name == name:
                return item
        item = TableReport(name)
        self.tables.append(item)
        return item

    @property
    def messages_per_second(self) -> float | None:
        """Messages copied by this run per second of the whole run (load, index
        builds and verification included)."""
        copied = sum(t.copied for t in self.tables if t.name == "messages")
        return round(copied / self.seconds, 1) if copied and self.seconds else None

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "destination": self.destination,
            "created": self.created,
            "resumed": self.resumed,
            "tables": [t.as_dict() for t in self.tables],
            "copied_rows": sum(t.copied for t in self.tables),
            "source_id_high_water": self.source_id_high_water,
            "destination_id_high_water": self.destination_id_high_water,
            "load_seconds": round(self.load_seconds, 3),
            "finish_seconds": round(self.finish_seconds, 3),
            "verify_seconds": round(self.verify_seconds, 3),
            "seconds": round(self.seconds, 3),
            "messages_per_second": self.messages_per_second,
            "verified": self.verified,
            "unfinished": self.unfinished,
            "mismatched": self.mismatched,
            "ok": self.ok,
        }


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class _Spec:
    """One table to copy: its head columns, in order, and its primary key."""

    table: sa.Table

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def columns(self) -> list[sa.Column]:
        return list(self.table.columns)

    @property
    def key(self) -> list[sa.Column]:
        return list(self.table.primary_key.columns)

    @property
    def key_positions(self) -> list[int]:
        names = [c.name for c in self.columns]
        return [names.index(c.name) for c in self.key]

    def keep(self, row: Sequence) -> bool:
        """Rows that are copied and compared (``state_meta``: not the FTS layer's keys)."""
        if self.table is schema.state_meta:
            return not str(row[0]).startswith(DERIVED_META_PREFIXES)
        return True


#: head tables in dependency order; ``schema_version`` is the destination's own
_HEAD = [t for t in schema.metadata.sorted_tables if t is not schema.schema_version]
_TOPICS = list(telegram_schema.TABLES)
#: the version tables: each database keeps its own (the destination is created at head)
_BOOKKEEPING = {"schema_version", "alembic_version", telegram_schema.VERSION_TABLE}


def _specs(with_topics: bool) -> list[_Spec]:
    return [_Spec(t) for t in _HEAD + (_TOPICS if with_topics else [])]


# --------------------------------------------------------------------------- one side


class _Side:
    """One database of the copy: its target, an engine, dialect-specific probes."""

    def __init__(self, target: Target, *, writable: bool) -> None:
        self.target = target
        self.writable = writable
        self._engine: Engine | None = None

    @property
    def display(self) -> str:
        return self.target.display

    @property
    def is_pg(self) -> bool:
        return self.target.is_postgresql

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """The package's errors for driver errors, naming this database: those the
        engine layer knows (unreachable server, damaged file…), else a CopyError with
        the driver's message (a permission the role lacks, a full disk…)."""
        try:
            if self.is_pg:
                from . import postgres

                with postgres.pg_errors(self.target):
                    yield
            else:
                from .migrate import sqlite_errors

                with sqlite_errors(self.target.path):
                    yield
        except sa.exc.DBAPIError as exc:
            detail = " ".join(str(getattr(exc, "orig", exc)).split())
            raise CopyError(
                f"{self.display}: {detail}. Rows committed so far are kept; once the cause "
                "is fixed, `hermes-store db copy SRC DST --resume` continues"
            ) from exc

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            if self.is_pg:
                from . import postgres

                # pooled: each batch is a transaction of its own, not a new connection
                self._engine = postgres.create_engine(self.target, pool_size=2, max_overflow=2)
            else:
                from .engine import create_engine, writer

                # Foreign keys are not enforced while loading: a parent session can come
                # after its children in key order (checked at the end instead).
                engine = create_engine(
                    self.target.path, read_only=not self.writable, foreign_keys=False,
                    journal_mode="WAL" if self.writable else None,
                )
                if self.writable:
                    # WAL + NORMAL: a crash can lose the last batches, never consistency
                    # (each batch commits with its progress); close() checkpoints.
                    sa.event.listen(engine, "connect", _synchronous_normal)
                self._engine = writer(engine) if self.writable else engine
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            if self.writable and not self.is_pg and self.target.path.exists():
                with contextlib.suppress(sa.exc.DBAPIError), self._engine.connect() as conn:
                    conn = conn.execution_options(**{BEGIN_MODE: None})
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            self._engine.dispose()
            self._engine = None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """One read-only transaction: every read of the block sees the same state."""
        with self.errors(), self.engine.connect() as conn:
            if self.is_pg:
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                    yield conn
            else:
                # a plain deferred BEGIN even on the writer engine: reading takes no lock
                conn = conn.execution_options(**{BEGIN_MODE: "DEFERRED"})
                with conn.begin():
                    yield conn

    @contextlib.contextmanager
    def unit(self) -> Iterator[Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE)."""
        with self.errors(), self.engine.begin() as conn:
            yield conn

    # -- probes (inside a connection)

    def tables(self, conn: Connection) -> set[str]:
        return set(sa.inspect(conn).get_table_names())

    @property
    def exists(self) -> bool:
        """False for a missing SQLite file (never created by probing it)."""
        return self.is_pg or self.target.path.exists()


def _synchronous_normal(dbapi_conn, _record) -> None:
    dbapi_conn.execute("PRAGMA synchronous=NORMAL")


def _unknown_tables(side: _Side, present: set[str]) -> list[str]:
    from .fts import ddl as fts_ddl

    known = {t.name for t in _HEAD} | set(telegram_schema.TABLE_NAMES) | _BOOKKEEPING
    return sorted(
        name for name in present
        if name not in known and not name.startswith("sqlite_")
        and not (not side.is_pg and fts_ddl.is_fts_object(name))
    )


# --------------------------------------------------------------------------- reading


def _after(spec: _Spec, last: Sequence | None):
    """The keyset condition "key greater than ``last``" (a row value for composite keys)."""
    key = spec.key
    if last is None:
        return None
    if len(key) == 1:
        return key[0] > sa.bindparam("k0", last[0], type_=key[0].type)
    return sa.tuple_(*key) > sa.tuple_(*[
        sa.bindparam(f"k{i}", v, type_=c.type) for i, (c, v) in enumerate(zip(key, last))
    ])


def _approx_bytes(rows: list) -> int:
    """About how many bytes of values ``rows`` hold, from a sample of up to 64 rows
    (summing every value of every row would cost more than the copy's own work)."""
    step = max(1, len(rows) // 64)
    sample = rows[::step]
    size = sum(len(v) if isinstance(v, (str, bytes)) else 8 for row in sample for v in row)
    return size * len(rows) // len(sample)


@dataclass(frozen=True)
class Batch:
    rows: list[tuple]
    #: the key of the last row (where the next batch starts)
    last: tuple
    #: no row comes after this batch
    final: bool


def read_batches(
    conn: Connection,
    spec: _Spec,
    after: Sequence | None = None,
    *,
    max_rows: int = BATCH_ROWS,
    max_bytes: int = BATCH_BYTES,
) -> Iterator[Batch]:
    """Batches of ``spec``'s table after key ``after``, in key order. Each batch is one
    ``SELECT … WHERE key > last ORDER BY key LIMIT n``; ``n`` shrinks when rows are
    large so that a batch holds about ``max_bytes``."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows!r}")
    positions = spec.key_positions
    limit = max_rows
    last = tuple(after) if after is not None else None
    base = sa.select(*spec.columns).order_by(*spec.key)
    while True:
        stmt = base
        condition = _after(spec, last)
        if condition is not None:
            stmt = stmt.where(condition)
        rows = [tuple(r) for r in conn.execute(stmt.limit(limit))]
        if not rows:
            return
        last = tuple(rows[-1][i] for i in positions)
        final = len(rows) < limit
        yield Batch(rows, last, final)
        if final:
            return
        size = _approx_bytes(rows)
        limit = max(1, min(max_rows, max_bytes * len(rows) // max(size, 1)))


# --------------------------------------------------------------------------- hashing

_MASK = (1 << 128) - 1


def row_digest(row: tuple) -> int:
    """One row's hash: BLAKE2b-128 of the repr of its values. ``repr`` is exact for
    every type a column holds here (int, float — shortest round-trip form, str, bytes,
    None; both drivers return BLOBs as ``bytes``) and tells them apart (``5`` vs
    ``5.0``, ``'5'`` vs ``b'5'``)."""
    text = repr(row).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "big")


def table_digest(conn: Connection, spec: _Spec, *, tick: Callable[[int], None] | None = None,
                 max_rows: int = BATCH_ROWS) -> tuple[int, str]:
    """``(rows, hash)`` of one table as the connection reads it (streamed)."""
    count = 0
    total = 0
    for batch in read_batches(conn, spec, max_rows=max_rows):
        for row in batch.rows:
            if spec.keep(row):
                count += 1
                total = (total + row_digest(row)) & _MASK
        if tick is not None:
            tick(count)
    return count, f"{total:032x}"


# --------------------------------------------------------------------------- writing


def _quote(dialect: sa.Dialect, name: str) -> str:
    return dialect.identifier_preparer.quote(name)


class _Writer:
    """Writes batches of one table into the destination (COPY / executemany)."""

    def __init__(self, dialect: sa.Dialect, spec: _Spec) -> None:
        self.spec = spec
        self.is_pg = dialect.name == "postgresql"
        names = ", ".join(_quote(dialect, c.name) for c in spec.columns)
        table = _quote(dialect, spec.name)
        self.upsert = spec.table is schema.state_meta
        if self.is_pg:
            self.sql = f"COPY {table} ({names}) FROM STDIN"
        else:
            self.sql = str(spec.table.insert().compile(dialect=dialect))

    def write(self, conn: Connection, rows: list[tuple]) -> None:
        if self.upsert:
            self._upsert(conn, rows)
        elif self.is_pg:
            cursor = conn.connection.driver_connection.cursor()
            try:
                with cursor.copy(self.sql) as copy:
                    for row in rows:
                        copy.write_row(row)
            finally:
                cursor.close()
        else:
            conn.exec_driver_sql(self.sql, rows)

    def _upsert(self, conn: Connection, rows: list[tuple]) -> None:
        """``state_meta``: the source's value wins over a key the destination's own
        schema creation wrote (the Telegram topic version)."""
        from .repository.dialect import insert_for

        names = [c.name for c in self.spec.columns]
        stmt = insert_for(conn, self.spec.table)
        stmt = stmt.on_conflict_do_update(
            index_elements=[c.name for c in self.spec.key],
            set_={n: stmt.excluded[n] for n in names if n not in {c.name for c in self.spec.key}},
        )
        conn.execute(stmt, [dict(zip(names, row)) for row in rows])


# --------------------------------------------------------------------------- state


def _source_state(side: _Side) -> bool:
    """Refuse a source below head; True when it holds the Telegram topic tables."""
    from . import migrate

    head = migrate.head()
    if side.is_pg:
        from . import migrate_pg

        state = migrate_pg.inspect_database(side.target)
        if state.kind != "alembic" or state.revision != head:
            at = "has no schema" if state.revision is None else f"is at revision {state.revision}"
            raise errors.SchemaOutOfDateError(
                f"the source {side.display} {at}, head is {head}: bring it to head first: "
                f"{location.upgrade_hint(side.target)}"
            )
        with side.snapshot() as conn:
            return _pg_topics_state(conn, side, "source")
    path = side.target.path
    info = migrate.inspect_file(path)
    if info.kind != "alembic" or info.revision != head:
        at = {
            "empty": "has no schema",
            "upstream": f"was written by upstream Hermes (schema version {info.schema_version}) "
                        "and is not adopted yet",
        }.get(info.kind, f"is at revision {info.revision}")
        raise errors.SchemaOutOfDateError(
            f"the source {path} {at}, head is {head}: bring it to head first: "
            f"{location.upgrade_hint(side.target)}"
        )
    topics = migrate.inspect_telegram_topics(path)
    if topics.kind == "absent":
        return False
    if topics.kind != "alembic" or topics.revision != migrate.telegram_topics_head():
        raise errors.SchemaOutOfDateError(
            f"the source {path}: its Telegram topic tables are at {topics.revision} "
            f"(head is {migrate.telegram_topics_head()}): bring them to head first: "
            f"{location.upgrade_hint(side.target)}"
        )
    return True


def _pg_topics_state(conn: Connection, side: _Side, role: str) -> bool:
    """PostgreSQL: topic tables present (and stamped at the branch's head)?"""
    from . import migrate

    present = side.tables(conn)
    if not any(name in present for name in telegram_schema.TABLE_NAMES):
        return False
    version = None
    if telegram_schema.VERSION_TABLE in present:
        version = conn.execute(sa.text(
            f"SELECT version_num FROM {telegram_schema.VERSION_TABLE}")).scalar()
    if version != migrate.telegram_topics_head() or not all(
            n in present for n in telegram_schema.TABLE_NAMES):
        raise errors.SchemaOutOfDateError(
            f"the {role} {side.display}: its Telegram topic tables are not at the branch's "
            f"head ({version or 'unstamped'}, head is {migrate.telegram_topics_head()})"
        )
    return True


#: SQLite storage classes (``typeof``) a PostgreSQL column of each declared type holds
#: exactly; SQLite's columns take any value whatever they declare
_PG_STORAGE = ((sa.Integer, "integer"), (sa.Float, "real"), (sa.Text, "text"),
               (sa.LargeBinary, "blob"))


def _storage_class(column: sa.Column) -> str:
    for type_, storage in _PG_STORAGE:
        if isinstance(column.type, type_):
            return storage
    raise TypeError(f"no storage class for {column.table.name}.{column.name}")  # pragma: no cover


def _check_pg_types(side: _Side, conn: Connection, spec: _Spec) -> None:
    """A SQLite value whose storage class differs from its column's declared type
    (text in an INTEGER column, a BLOB in a TEXT column…) cannot go into PostgreSQL
    unchanged: name the first such values before copying anything."""
    q = lambda n: _quote(conn.dialect, n)  # noqa: E731
    odd = [f"(typeof({q(c.name)}) NOT IN ('null', '{_storage_class(c)}'))" for c in spec.columns]
    key = ", ".join(q(c.name) for c in spec.key)
    cases = ", ".join(
        f"CASE WHEN {cond} THEN typeof({q(c.name)}) END"
        for c, cond in zip(spec.columns, odd))
    rows = conn.exec_driver_sql(
        f"SELECT {key}, {cases} FROM {q(spec.name)} WHERE {' OR '.join(odd)} LIMIT 3"
    ).all()
    if rows:
        width = len(spec.key)
        found = []
        for row in rows:
            at = ", ".join(str(v) for v in row[:width])
            found += [f"{c.name} holds {v} at key ({at})"
                      for c, v in zip(spec.columns, row[width:]) if v is not None]
        raise CopyError(
            f"the source {side.display}: {spec.name} has values PostgreSQL cannot hold "
            f"as declared ({'; '.join(found[:3])}); fix them, or copy to a SQLite file"
        )


def _check_source_rows(side: _Side, conn: Connection, specs: list[_Spec],
                       to_postgresql: bool) -> None:
    """SQLite lets rows break their foreign keys, hold an empty (NULL) text key or a
    value of another type than its column's; a copy could not keep such rows (and
    PostgreSQL rejects them). Say so before copying anything."""
    if side.is_pg:
        return
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        by_table: dict[str, int] = {}
        for table, _rowid, parent, _fk in broken:
            key = f"{table} → {parent}"
            by_table[key] = by_table.get(key, 0) + 1
        listed = ", ".join(f"{n} in {k}" for k, n in sorted(by_table.items()))
        raise CopyError(
            f"the source {side.display} has rows whose references are broken ({listed}); "
            "a copy must keep them valid: repair the file with `hermes-store recover "
            "--output NEW.db` and copy NEW.db"
        )
    for spec in specs:
        empty = sa.or_(*[c.is_(None) for c in spec.key])
        count = conn.execute(sa.select(sa.func.count()).select_from(spec.table).where(empty)).scalar()
        if count:
            raise CopyError(
                f"the source {side.display}: {count} row(s) of {spec.name} have an empty "
                f"(NULL) key, which PostgreSQL cannot hold and a copy cannot address; "
                f"delete or fix them first"
            )
        if to_postgresql:
            _check_pg_types(side, conn, spec)


def _destination_state(side: _Side) -> str:
    """``"new"`` (missing file, or no tables) or ``"head"``; a destination below head
    (or one upstream Hermes wrote) is refused. Reads only."""
    from . import migrate

    head = migrate.head()
    if side.is_pg:
        from . import migrate_pg

        state = migrate_pg.inspect_database(side.target)
        kind, revision = ("new" if state.kind == "empty" else state.kind), state.revision
    else:
        info = migrate.inspect_file(side.target.path)
        kind = "new" if info.kind in ("missing", "empty") else info.kind
        revision = info.revision
    if kind == "new" or (kind == "alembic" and revision == head):
        return "new" if kind == "new" else "head"
    raise errors.SchemaOutOfDateError(
        f"the destination {side.display} is at revision {revision}, head is {head}: db copy "
        "writes into a new file or an empty database (or one at head that is empty); "
        f"choose another destination, or upgrade this one first: "
        f"{location.upgrade_hint(side.target)}"
    )


def _create_destination(side: _Side, new: bool, with_topics: bool) -> None:
    """Create the destination at head (when new), and the Telegram topic tables when
    the source has them."""
    from . import migrate

    if new:
        migrate.upgrade(side.target)
    if not with_topics:
        return
    if side.is_pg:
        with side.unit() as conn:
            if not _pg_topics_state(conn, side, "destination"):
                from . import migrate_pg

                # the opt-in's own creator; the source's state_meta row then upserts
                migrate_pg.create_telegram_topics(conn)
    else:
        migrate.upgrade_telegram_topics(side.target.path)


def _is_schema_meta_key(key: str) -> bool:
    """``state_meta`` keys a freshly created destination writes itself."""
    return key.startswith(DERIVED_META_PREFIXES) or key == telegram_schema.META_KEY


def _holds_rows(conn: Connection, specs: list[_Spec], present: set[str]) -> list[str]:
    """Tables of the destination that hold rows (beyond its own schema keys)."""
    full = []
    for spec in specs:
        if spec.name not in present:
            continue
        if spec.table is schema.state_meta:
            keys = conn.execute(sa.select(schema.state_meta.c.key)).scalars()
            if any(not _is_schema_meta_key(str(k)) for k in keys):
                full.append(spec.name)
        elif conn.execute(sa.select(sa.literal(1)).select_from(spec.table).limit(1)).first():
            full.append(spec.name)
    return full


# --------------------------------------------------------------------------- suspend


def _suspended_objects(conn: Connection, names: list[str]) -> list[tuple[str, str, str]]:
    """``(name, drop, create)`` of what the load suspends on the copied tables, from
    the destination's own catalog: secondary indexes, PostgreSQL's foreign keys, the
    display-order triggers. Creation order: indexes, keys, triggers."""
    q = lambda n: _quote(conn.dialect, n)  # noqa: E731
    items: list[tuple[str, str, str]] = []
    if conn.dialect.name == "postgresql":
        from .fts import postgres as fts_pg

        rows = conn.exec_driver_sql(
            "SELECT ic.relname, pg_get_indexdef(i.indexrelid) FROM pg_index AS i "
            "JOIN pg_class AS ic ON ic.oid = i.indexrelid "
            "JOIN pg_class AS tc ON tc.oid = i.indrelid "
            "WHERE tc.relnamespace = current_schema()::regnamespace "
            "AND tc.relname = ANY(%(t)s) AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint AS k WHERE k.conindid = i.indexrelid) "
            "ORDER BY ic.relname", {"t": names},
        ).all()
        items += [(n, f"DROP INDEX {q(n)}", sql) for n, sql in rows
                  if n not in fts_pg.FTS_INDEXES]
        rows = conn.exec_driver_sql(
            "SELECT k.conname, tc.relname, pg_get_constraintdef(k.oid) FROM pg_constraint AS k "
            "JOIN pg_class AS tc ON tc.oid = k.conrelid "
            "WHERE k.contype = 'f' AND tc.relnamespace = current_schema()::regnamespace "
            "AND tc.relname = ANY(%(t)s) ORDER BY k.conname", {"t": names},
        ).all()
        items += [(n, f"ALTER TABLE {q(t)} DROP CONSTRAINT {q(n)}",
                   f"ALTER TABLE {q(t)} ADD CONSTRAINT {q(n)} {d}") for n, t, d in rows]
        rows = conn.exec_driver_sql(
            "SELECT tg.tgname, tc.relname, pg_get_triggerdef(tg.oid) FROM pg_trigger AS tg "
            "JOIN pg_class AS tc ON tc.oid = tg.tgrelid "
            "WHERE NOT tg.tgisinternal AND tc.relnamespace = current_schema()::regnamespace "
            "AND tg.tgname = ANY(%(g)s) ORDER BY tg.tgname", {"g": list(_DISPLAY_TRIGGERS)},
        ).all()
        items += [(n, f"DROP TRIGGER {q(n)} ON {q(t)}", d) for n, t, d in rows]
        return items
    marks = ", ".join("?" for _ in names)
    rows = conn.exec_driver_sql(
        f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
        f"AND tbl_name IN ({marks}) ORDER BY name", tuple(names),
    ).all()
    items += [(n, f"DROP INDEX {q(n)}", sql) for n, sql in rows]
    marks = ", ".join("?" for _ in _DISPLAY_TRIGGERS)
    rows = conn.exec_driver_sql(
        f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN ({marks}) "
        "ORDER BY name", _DISPLAY_TRIGGERS,
    ).all()
    items += [(n, f"DROP TRIGGER {q(n)}", sql) for n, sql in rows]
    return items


def _open_fts_window(conn: Connection, low: int, high: int) -> None:
    """SQLite: the migrations' rebuild window over ids ``low..high`` — the gated FTS
    triggers leave those rows alone; ``fts.maintenance.rebuild`` fills the indexes and
    closes the window (its keys) at the end."""
    from .fts import ddl as fts_ddl
    from .repository.dialect import insert_for

    present = set(conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table'").scalars())
    pairs = [(fts_ddl.REBUILD_HIGH_WATER_KEY, fts_ddl.REBUILD_PROGRESS_KEY)]
    if fts_ddl.CJK_TABLE in present:
        pairs.append((fts_ddl.CJK_REBUILD_HIGH_WATER_KEY, fts_ddl.CJK_REBUILD_PROGRESS_KEY))
    meta = schema.state_meta
    for high_key, progress_key in pairs:
        for key, value in ((high_key, high), (progress_key, low - 1)):
            stmt = insert_for(conn, meta).values(key=key, value=str(value))
            conn.execute(stmt.on_conflict_do_update(index_elements=["key"],
                                                    set_={"value": stmt.excluded.value}))


# --------------------------------------------------------------------------- id counter


def _id_high_water(conn: Connection) -> int:
    """The highest message id ever handed out: ``MAX(id)``, or more when the counter
    (SQLite's ``sqlite_sequence``, PostgreSQL's sequence) went further."""
    top = conn.execute(sa.select(sa.func.max(schema.messages.c.id))).scalar() or 0
    if conn.dialect.name == "postgresql":
        sequence = conn.exec_driver_sql(
            "SELECT pg_get_serial_sequence('messages', 'id')").scalar()
        if sequence:
            last, called = conn.exec_driver_sql(
                f"SELECT last_value, is_called FROM {sequence}").one()
            top = max(top, last if called else last - 1)
        return top
    has_sequence = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").first()
    if has_sequence:
        seq = conn.exec_driver_sql(
            "SELECT seq FROM sqlite_sequence WHERE name = 'messages'").scalar()
        top = max(top, seq or 0)
    return top


def _carry_id_high_water(conn: Connection, high_water: int) -> None:
    """Make the destination hand out ids above ``high_water`` (explicit ids inserted by
    the load do not move a PostgreSQL sequence)."""
    high_water = max(high_water, _id_high_water(conn))
    if conn.dialect.name == "postgresql":
        sequence = conn.exec_driver_sql(
            "SELECT pg_get_serial_sequence('messages', 'id')").scalar()
        if high_water > 0:
            conn.exec_driver_sql("SELECT setval(%(s)s, %(v)s, true)",
                                 {"s": sequence, "v": high_water})
        else:
            conn.exec_driver_sql("SELECT setval(%(s)s, 1, false)", {"s": sequence})
        return
    if high_water <= 0:
        return
    updated = conn.exec_driver_sql(
        "UPDATE sqlite_sequence SET seq = ? WHERE name = 'messages'", (high_water,)).rowcount
    if not updated:
        conn.exec_driver_sql(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (high_water,))


# --------------------------------------------------------------------------- the copy


def _same_database(a: Target, b: Target) -> bool:
    if a.is_sqlite and b.is_sqlite:
        return a.path.resolve() == b.path.resolve()
    if a.is_postgresql and b.is_postgresql:
        ua, ub = a.url, b.url
        return (ua.host, ua.port, ua.database, ua.query.get("host")) == (
            ub.host, ub.port, ub.database, ub.query.get("host"))
    return False


def _resolve_pair(source, destination) -> tuple[Target, Target]:
    src, dst = location.resolve(source), location.resolve(destination)
    if _same_database(src, dst):
        raise CopyError(f"the source and the destination are the same database ({src.display})")
    location.require_driver(src)
    location.require_driver(dst)
    return src, dst


def copy_store(
    source,
    destination,
    *,
    resume: bool = False,
    batch_rows: int = BATCH_ROWS,
    batch_bytes: int = BATCH_BYTES,
    progress: ProgressCallback | None = None,
) -> CopyReport:
    """Copy the whole store ``source`` into ``destination`` (see module docstring).

    Raises :class:`CopyMismatchError` when verification fails (the report says which
    tables), :class:`CopyError` when the copy cannot start or go on, the package's
    schema and connection errors otherwise. Nothing is written anywhere before both
    sides passed their checks.
    """
    if batch_rows < 1:
        raise errors.InvalidArgumentError(f"batch_rows must be at least 1, got {batch_rows!r}")
    started = time.monotonic()
    src_target, dst_target = _resolve_pair(source, destination)
    src = _Side(src_target, writable=False)
    dst = _Side(dst_target, writable=True)
    report = CopyReport(source=src.display, destination=dst.display)
    try:
        with_topics = _check_source(src, to_postgresql=dst.is_pg)
        specs = _specs(with_topics)
        dst_state = _destination_state(dst)
        recorded = False
        if dst_state == "head":
            with dst.snapshot() as conn:
                present = dst.tables(conn)
                recorded = PROGRESS_TABLE in present
                if not recorded:
                    _refuse_rows(dst, conn, present)
        if recorded:
            _check_resumable(dst, src, resume)
            report.resumed = True
        else:
            _create_destination(dst, dst_state == "new", with_topics)
            report.created = dst_state == "new"
            _begin(dst, src, specs)
        load_started = time.monotonic()
        _load(src, dst, specs, report, batch_rows, batch_bytes, progress)
        report.load_seconds = time.monotonic() - load_started
        finish_started = time.monotonic()
        _finish(src, dst)
        report.finish_seconds = time.monotonic() - finish_started
        verify_started = time.monotonic()
        _verify_into(src, dst, report, progress, batch_rows)
        report.verify_seconds = time.monotonic() - verify_started
        if not report.ok:
            raise CopyMismatchError(_mismatch_message(report), report)
        with dst.unit() as conn:
            progress_table.drop(conn)
    finally:
        report.seconds = time.monotonic() - started
        src.close()
        dst.close()
    return report


def _check_source(src: _Side, *, to_postgresql: bool) -> bool:
    """Everything the source must satisfy before anything is written; True when it
    holds the Telegram topic tables."""
    if not src.exists:
        raise errors.StoreNotFoundError(f"no database at {src.display}: nothing to copy")
    with_topics = _source_state(src)
    with src.snapshot() as conn:
        present = src.tables(conn)
        if PROGRESS_TABLE in present:
            raise CopyError(
                f"the source {src.display} is an unfinished copy ({PROGRESS_TABLE} is there): "
                "finish that copy with `hermes-store db copy … --resume` first"
            )
        unknown = _unknown_tables(src, present)
        if unknown:
            raise CopyError(
                f"the source {src.display} holds tables hermes_store does not know "
                f"({', '.join(unknown)}); db copy copies the store's own tables only: "
                "move them elsewhere first (or copy the file with `hermes-store db backup`)"
            )
        _check_source_rows(src, conn, _specs(with_topics), to_postgresql)
    return with_topics


def _refuse_rows(dst: _Side, conn: Connection, present: set[str]) -> None:
    full = _holds_rows(conn, _specs(True), present)
    if full:
        raise CopyError(
            f"the destination {dst.display} is not empty ({', '.join(full)} hold rows); "
            "db copy writes into a new file or an empty database only (--resume "
            "continues a copy that this command left unfinished)"
        )


def _check_resumable(dst: _Side, src: _Side, resume: bool) -> None:
    with dst.snapshot() as conn:
        recorded_source = conn.execute(
            sa.select(_P.value).where(_P.kind == "source")).scalar()
    if not resume:
        raise CopyError(
            f"the destination {dst.display} holds an interrupted copy (of {recorded_source}); "
            "finish it with `hermes-store db copy SRC DST --resume`, or choose another "
            "destination"
        )
    if recorded_source != src.display:
        raise CopyError(
            f"the destination {dst.display} holds an interrupted copy of {recorded_source}, "
            f"not of {src.display}; resume it from that source, or choose another destination"
        )


def _begin(dst: _Side, src: _Side, specs: list[_Spec]) -> None:
    """Refuse a destination that holds rows; then, in one transaction, the progress
    record, the suspended objects and the full-text set-up for the load."""
    with src.snapshot() as conn:
        low, high = conn.execute(sa.select(
            sa.func.min(schema.messages.c.id), sa.func.max(schema.messages.c.id))).one()
    with dst.unit() as conn:
        _refuse_rows(dst, conn, dst.tables(conn))  # again, inside the unit: no race
        progress_table.create(conn)
        conn.execute(progress_table.insert(), [
            {"kind": "source", "name": "", "value": src.display},
            *({"kind": "table", "name": s.name, "value": None} for s in specs),
        ])
        objects = _suspended_objects(conn, [s.name for s in specs])
        if objects:
            conn.execute(progress_table.insert(), [
                {"kind": "ddl", "name": name, "value": create, "rows": position}
                for position, (name, _drop, create) in enumerate(objects)
            ])
        for _name, drop, _create in objects:
            conn.exec_driver_sql(drop)
        if dst.is_pg:
            from .fts import postgres as fts_pg

            fts_pg.drop_indexes(conn)
        elif high is not None:
            _open_fts_window(conn, low, high)


def _load(src: _Side, dst: _Side, specs: list[_Spec], report: CopyReport,
          batch_rows: int, batch_bytes: int, progress: ProgressCallback | None) -> None:
    with dst.snapshot() as conn:
        state = {name: (value, rows, done) for name, value, rows, done in conn.execute(
            sa.select(_P.name, _P.value, _P.rows, _P.done).where(_P.kind == "table"))}
    missing = [s.name for s in specs if s.name not in state]
    if missing:  # e.g. a source that gained topic tables: continue with an empty record
        with dst.unit() as conn:
            conn.execute(progress_table.insert(),
                         [{"kind": "table", "name": n, "value": None} for n in missing])
        state.update({n: (None, 0, 0) for n in missing})
    with src.snapshot() as sconn:
        report.source_id_high_water = _id_high_water(sconn)
        totals = {
            s.name: sconn.execute(sa.select(sa.func.count()).select_from(s.table)).scalar()
            for s in specs if not state[s.name][2]
        }
        empty = [name for name, total in totals.items() if total == 0]
        if empty:  # one transaction for every empty table, not one each
            with dst.unit() as conn:
                conn.execute(sa.update(progress_table).where(
                    _P.kind == "table", _P.name.in_(empty)).values(done=1))
        for spec in specs:
            report.table(spec.name)
            if totals.get(spec.name):
                _load_table(sconn, dst, spec, state[spec.name], totals[spec.name],
                            report, batch_rows, batch_bytes, progress)


def _load_table(sconn: Connection, dst: _Side, spec: _Spec, state: tuple, total: int,
                report: CopyReport, batch_rows: int, batch_bytes: int,
                progress: ProgressCallback | None) -> None:
    """One table: each batch, and the key it ends at, in one destination transaction
    (the last batch also marks the table done)."""
    last_json, done_rows, _done = state
    item = report.table(spec.name)
    if progress is not None:
        progress("copy", spec.name, done_rows, total)
    after = json.loads(last_json) if last_json is not None else None
    writer = _Writer(dst.engine.dialect, spec)
    finished = False
    for batch in read_batches(sconn, spec, after, max_rows=batch_rows, max_bytes=batch_bytes):
        rows = batch.rows
        kept = rows if spec.table is not schema.state_meta else [r for r in rows if spec.keep(r)]
        new_json = json.dumps(list(batch.last))
        with dst.unit() as dconn:
            claimed = dconn.execute(
                sa.update(progress_table)
                .where(_P.kind == "table", _P.name == spec.name,
                       _P.value.is_not_distinct_from(last_json))
                .values(value=new_json, rows=_P.rows + len(rows), done=int(batch.final))
            ).rowcount
            if claimed != 1:
                raise CopyError(
                    f"another copy is writing into {dst.display} ({spec.name} moved on under "
                    "this one); let one copy run at a time"
                )
            if kept:
                writer.write(dconn, kept)
        finished = batch.final
        last_json = new_json
        done_rows += len(rows)
        item.copied += len(kept)
        if progress is not None:
            progress("copy", spec.name, done_rows, total)
    if not finished:  # the last batch was full: nothing came after it
        with dst.unit() as dconn:
            dconn.execute(sa.update(progress_table).where(
                _P.kind == "table", _P.name == spec.name).values(done=1))


def _finish(src: _Side, dst: _Side) -> None:
    """One transaction: suspended objects back, full-text indexes built, the id
    counter carried over, references checked."""
    with src.snapshot() as conn:
        high_water = _id_high_water(conn)
    with dst.unit() as conn:
        if conn.execute(sa.select(_P.done).where(_P.kind == "state", _P.name == "finished")
                        ).scalar():
            return
        for create in conn.execute(sa.select(_P.value).where(_P.kind == "ddl")
                                   .order_by(_P.rows)).scalars().all():
            conn.exec_driver_sql(create)
        conn.execute(sa.delete(progress_table).where(_P.kind == "ddl"))
        if dst.is_pg:
            from .fts import postgres as fts_pg

            fts_pg.create_indexes(conn)
        else:
            from .fts import maintenance

            maintenance.rebuild(conn)
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise CopyError(
                    f"the destination {dst.display}: {len(broken)} row(s) break a foreign key "
                    f"after the load (first: {broken[0][0]} → {broken[0][2]}); the source "
                    "changed during the copy? Nothing of the finish step was kept; rerun with "
                    "--resume once writers are stopped"
                )
        _carry_id_high_water(conn, high_water)
        conn.execute(progress_table.insert().values(kind="state", name="finished", done=1))
    if dst.is_pg:
        with dst.errors(), dst.engine.connect() as conn:
            # planner statistics for the freshly loaded tables (outside a transaction)
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")


# --------------------------------------------------------------------------- verify


def _verify_into(src: _Side, dst: _Side, report: CopyReport,
                 progress: ProgressCallback | None, batch_rows: int) -> None:
    with src.snapshot() as sconn, dst.snapshot() as dconn:
        with_topics = bool(set(telegram_schema.TABLE_NAMES) & (src.tables(sconn) | dst.tables(dconn)))
        report.source_id_high_water = _id_high_water(sconn)
        report.destination_id_high_water = _id_high_water(dconn)
        for spec in _specs(with_topics):
            item = report.table(spec.name)
            for side, conn, rows_attr, hash_attr in (
                (src, sconn, "source_rows", "source_hash"),
                (dst, dconn, "destination_rows", "destination_hash"),
            ):
                if spec.name not in side.tables(conn):
                    setattr(item, rows_attr, 0)
                    setattr(item, hash_attr, f"{0:032x}")
                    continue
                tick = None
                if progress is not None:
                    label = f"{spec.name} ({'source' if side is src else 'destination'})"
                    total = conn.execute(
                        sa.select(sa.func.count()).select_from(spec.table)).scalar()
                    progress("verify", label, 0, total)
                    tick = lambda done, label=label, total=total: progress(  # noqa: E731
                        "verify", label, done, total)
                rows, digest = table_digest(conn, spec, tick=tick, max_rows=batch_rows)
                setattr(item, rows_attr, rows)
                setattr(item, hash_attr, digest)
    report.verified = True


def _mismatch_message(report: CopyReport) -> str:
    parts = []
    for t in report.tables:
        if t.ok:
            continue
        if t.source_rows != t.destination_rows:
            parts.append(f"{t.name}: {t.source_rows} rows in the source, "
                         f"{t.destination_rows} in the destination")
        else:
            parts.append(f"{t.name}: same row count ({t.source_rows}), different content")
    if (report.destination_id_high_water or 0) < (report.source_id_high_water or 0):
        parts.append(f"messages id counter: {report.destination_id_high_water} in the "
                     f"destination, below the source's {report.source_id_high_water}")
    return (f"the copy {report.source} -> {report.destination} does not match: "
            f"{'; '.join(parts)}. Did something write to either side during the copy? "
            "Stop the writers and run `hermes-store db copy SRC DST --resume` again")


def verify_copy(source, destination, *, progress: ProgressCallback | None = None,
                batch_rows: int = BATCH_ROWS) -> CopyReport:
    """Compare two stores table by table (row counts and content hashes), reading only.

    Returns the report; ``report.ok`` says whether they match (no exception for a
    mismatch: the caller decides). Both must exist.
    """
    started = time.monotonic()
    src_target, dst_target = _resolve_pair(source, destination)
    src = _Side(src_target, writable=False)
    dst = _Side(dst_target, writable=False)
    report = CopyReport(source=src.display, destination=dst.display)
    try:
        for side in (src, dst):
            if side.target.is_sqlite and not side.target.path.exists():
                raise errors.StoreNotFoundError(f"no database at {side.display}")
        _verify_into(src, dst, report, progress, batch_rows)
        with dst.snapshot() as conn:
            report.unfinished = PROGRESS_TABLE in dst.tables(conn)
    finally:
        report.verify_seconds = report.seconds = time.monotonic() - started
        src.close()
        dst.close()
    return report


__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "CopyError",
    "CopyMismatchError",
    "CopyReport",
    "PROGRESS_TABLE",
    "TableReport",
    "copy_store",
    "Batch",
    "read_batches",
    "row_digest",
    "table_digest",
    "verify_copy",
]
