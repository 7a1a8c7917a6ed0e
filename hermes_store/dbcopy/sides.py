"""One database of a copy: its target, engine and transactions, and the checks that
decide whether it can be read from or written into (at head, empty, no broken rows).

Everything engine-specific comes from the side's backend (``Backend.copying`` and
``Backend.migrations``); this module never asks which engine it has.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .. import errors, location, migrate, schema, telegram_schema
from ..backends.base import get
from ..location import Target
from ..migrate.scripts import same_schema_as_head
from .report import CopyError
from .tables import (
    BOOKKEEPING,
    DERIVED_META_PREFIXES,
    HEAD,
    PROGRESS_TABLE,
    Spec,
    specs,
)


class Side:
    """One database of the copy: its target, an engine, its backend's copy facet."""

    def __init__(self, target: Target, *, writable: bool) -> None:
        self.target = target
        self.writable = writable
        self.backend = get(target.backend)
        self.copying = self.backend.copying
        self._engine: Engine | None = None

    @property
    def display(self) -> str:
        return self.target.display

    @property
    def strict_types(self) -> bool:
        return self.copying.strict_types

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """The package's errors for driver errors, naming this database: those the
        backend knows (unreachable server, damaged file…), else a CopyError with the
        driver's message (a permission the role lacks, a full disk…)."""
        try:
            with self.backend.translated_errors(self.target):
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
            self._engine = self.copying.engine(self.target, writable=self.writable)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self.copying.close(self._engine, self.target, writable=self.writable)
            self._engine = None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """One read-only transaction: every read of the block sees the same state."""
        with self.errors(), self.engine.connect() as conn, self.copying.snapshot(conn) as conn:
            yield conn

    @contextlib.contextmanager
    def unit(self) -> Iterator[Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE)."""
        with self.errors(), self.engine.begin() as conn:
            yield conn

    def tables(self, conn: Connection) -> set[str]:
        return set(sa.inspect(conn).get_table_names())

    @property
    def exists(self) -> bool:
        """False for a missing file (never created by probing it)."""
        return self.copying.exists(self.target)


def unknown_tables(side: Side, present: set[str]) -> list[str]:
    known = {t.name for t in HEAD} | set(telegram_schema.TABLE_NAMES) | BOOKKEEPING
    return sorted(
        name for name in present
        if name not in known and not name.startswith("sqlite_")
        and not side.copying.own_object(name)
    )


# --------------------------------------------------------------------------- state


def _topics_at_head(side: Side, role: str) -> bool:
    """Topic tables present (and at the branch's head)? A side below it is refused."""
    head = migrate.telegram_topics_head()
    topics = side.backend.migrations.topics_state(side.target)
    if topics.kind == "absent":
        return False
    if topics.kind != "alembic" or topics.revision != head:
        raise errors.SchemaOutOfDateError(
            f"the {role} {side.display}: its Telegram topic tables are at "
            f"{topics.revision or 'no revision (unstamped)'} (head is {head}): bring them to "
            f"head first: {location.upgrade_hint(side.target)}"
        )
    return True


def source_state(side: Side) -> bool:
    """Refuse a source below head; True when it holds the Telegram topic tables.

    A source stamped below head only by steps that change the other engine (a SQLite
    file at ``0030`` or ``0030a``: ``same_schema_as_head``) has head's schema, and is
    read as it is: a copy only reads its source."""
    head = migrate.head()
    info = side.backend.migrations.state(side.target)
    if info.kind != "alembic" or not same_schema_as_head(info.revision, side.backend.name):
        at = {
            "empty": "has no schema",
            "upstream": f"was written by upstream Hermes (schema version {info.schema_version}) "
                        "and is not adopted yet",
        }.get(info.kind, f"is at revision {info.revision}")
        raise errors.SchemaOutOfDateError(
            f"the source {side.display} {at}, head is {head}: bring it to head first: "
            f"{location.upgrade_hint(side.target)}"
        )
    return _topics_at_head(side, "source")


def destination_state(side: Side) -> str:
    """``"new"`` (missing file, or no tables) or ``"head"``; a destination below head
    (or one upstream Hermes wrote) is refused. Reads only."""
    head = migrate.head()
    info = side.backend.migrations.state(side.target)
    kind = "new" if info.kind in ("missing", "empty") else info.kind
    if kind == "new" or (kind == "alembic" and info.revision == head):
        return "new" if kind == "new" else "head"
    raise errors.SchemaOutOfDateError(
        f"the destination {side.display} is at revision {info.revision}, head is {head}: "
        "db copy writes into a new file or an empty database (or one at head that is "
        "empty); choose another destination, or upgrade this one first: "
        f"{location.upgrade_hint(side.target)}"
    )


def create_destination(side: Side, new: bool, with_topics: bool) -> None:
    """Create the destination at head (when new), and the Telegram topic tables when
    the source has them (the opt-in's own creator; the source's state_meta row then
    upserts)."""
    if new:
        migrate.upgrade(side.target)
    if with_topics and not _topics_at_head(side, "destination"):
        with side.unit() as conn:
            migrate.upgrade_telegram_topics(connection=conn)


def check_source(src: Side, *, strict_destination: bool) -> bool:
    """Everything the source must satisfy before anything is written; True when it
    holds the Telegram topic tables."""
    if not src.exists:
        raise errors.StoreNotFoundError(f"no database at {src.display}: nothing to copy")
    with_topics = source_state(src)
    with src.snapshot() as conn:
        present = src.tables(conn)
        if PROGRESS_TABLE in present:
            raise CopyError(
                f"the source {src.display} is an unfinished copy ({PROGRESS_TABLE} is there): "
                "finish that copy with `hermes-store db copy … --resume` first"
            )
        unknown = unknown_tables(src, present)
        if unknown:
            raise CopyError(
                f"the source {src.display} holds tables hermes_store does not know "
                f"({', '.join(unknown)}); db copy copies the store's own tables only: "
                "move them elsewhere first (or copy the file with `hermes-store db backup`)"
            )
        src.copying.check_source_rows(conn, specs(with_topics), where=src.display,
                                      strict_destination=strict_destination)
    return with_topics


def _is_schema_meta_key(key: str) -> bool:
    """``state_meta`` keys a freshly created destination writes itself."""
    return (key.startswith(DERIVED_META_PREFIXES) or key == telegram_schema.META_KEY
            or key == schema.FILE_IDENTITY_KEY)


def holds_rows(conn: Connection, specs_: list[Spec], present: set[str]) -> list[str]:
    """Tables of the destination that hold rows (beyond its own schema keys)."""
    full = []
    for spec in specs_:
        if spec.name not in present:
            continue
        if spec.table is schema.state_meta:
            keys = conn.execute(sa.select(schema.state_meta.c.key)).scalars()
            if any(not _is_schema_meta_key(str(k)) for k in keys):
                full.append(spec.name)
        elif conn.execute(sa.select(sa.literal(1)).select_from(spec.table).limit(1)).first():
            full.append(spec.name)
    return full


def refuse_rows(dst: Side, conn: Connection, present: set[str]) -> None:
    full = holds_rows(conn, specs(True), present)
    if full:
        raise CopyError(
            f"the destination {dst.display} is not empty ({', '.join(full)} hold rows); "
            "db copy writes into a new file or an empty database only (--resume "
            "continues a copy that this command left unfinished)"
        )


def id_high_water(side: Side, conn: Connection) -> int:
    """The highest message id ever handed out: ``MAX(id)``, or more when the engine's
    counter (SQLite's ``sqlite_sequence``, PostgreSQL's sequence) went further."""
    top = conn.execute(sa.select(sa.func.max(schema.messages.c.id))).scalar() or 0
    return side.copying.id_high_water(conn, top)


def resolve_pair(source, destination) -> tuple[Target, Target]:
    src, dst = location.resolve(source), location.resolve(destination)
    if src.backend == dst.backend and get(src.backend).same_database(src, dst):
        raise CopyError(f"the source and the destination are the same database ({src.display})")
    get(src.backend).require_driver(src)
    get(dst.backend).require_driver(dst)
    return src, dst


__all__ = ["Side", "check_source", "create_destination", "destination_state", "holds_rows",
           "id_high_water", "refuse_rows", "resolve_pair", "source_state", "unknown_tables"]
