"""The facets' interfaces (decision D21): what ``Backend.search``, ``Backend.migrations``
and ``Backend.copying`` hand out, each an object of its own so that a newcomer reads one
concern at a time (``backends/base.py`` holds the ``Backend`` they belong to and the
registry). Like ``base.py`` this module imports only the foundation: what it needs of the
core it names as protocols (``StoreTarget``, here).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Protocol, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine, URL


class StoreTarget(Protocol):
    """What a backend reads of a resolved database (``hermes_store.location.Target``)."""

    backend: str
    url: URL
    path: Path | None
    source: str

    @property
    def display(self) -> str: ...


class SearchRoute:
    """How a full-text route is written on one engine (``repository.search`` builds its
    statements from these pieces; ``Backend.search``).

    ``prepare(index, expression)`` gives the statement's *shape* (hashable: statements
    are built once per shape) and its bound values, or None when nothing can match;
    ``source``, ``row_id``, ``condition``, ``rank``, ``best_first``, ``snippet`` give Core
    pieces for a shape; when ``snippet`` is None the caller computes it in Python with
    ``text_snippet``. ``present_indexes``/``present_indexes_values``: the statement that
    says which indexes exist (``a``: the word index, ``b``: the trigram one).
    """

    name = ""
    #: a MATCH that fails (a damaged index) may be answered by the bounded LIKE scan
    falls_back_to_like = False
    #: pick the page from (id, rank) first, read its rows after
    page_first = False
    present_indexes: Any = None
    present_indexes_values: dict = {}
    #: "both indexes present" may be kept per connection instead of asked per search
    keeps_present_indexes = False
    #: a best-first page's LIMIT is written into the statement (else bound)
    page_size_in_sql = False
    #: each hit's neighbours are LATERAL subqueries of their rows (else a probe for the
    #: id, then the row by its key: SQLite has no LATERAL)
    lateral_context = False

    def search_layer_missing(self, exc: BaseException) -> bool:
        return False

    def prepare(self, index: str, expression: str):
        raise NotImplementedError

    def source(self, index: str, messages: sa.Table) -> sa.FromClause:
        raise NotImplementedError

    def row_id(self, index: str, messages: sa.Table) -> sa.ColumnElement:
        raise NotImplementedError

    def condition(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    def rank(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement:
        raise NotImplementedError

    def best_first(self, index: str, messages: sa.Table, shape) -> tuple:
        raise NotImplementedError

    def snippet(self, index: str, messages: sa.Table, shape) -> sa.ColumnElement | None:
        return None

    def best_page(self, index: str, messages: sa.Table, shape, source: sa.FromClause,
                  filters: tuple, rows: int | None) -> sa.Select:
        """``page_first``: the matches' ``page_id``, ``page_rank``, best first (``rows``:
        a first page's size, None otherwise; an engine may rank only what can reach it)."""
        return (sa.select(self.row_id(index, messages).label("page_id"),
                          self.rank(index, messages, shape).label("page_rank"))
                .select_from(source).where(self.condition(index, messages, shape), *filters)
                .order_by(*self.best_first(index, messages, shape)))

    def text_snippet(self, index: str, expression: str, row: dict) -> str:
        """The snippet of a result row (its ``content``, ``role``, ``tool_name`` and,
        where ``snippet`` is None, ``tool_calls``) for ``index``'s route."""
        raise NotImplementedError


class StoreState(NamedTuple):
    """Where a database stands, read without writing to it.

    ``kind``: ``"missing"`` (no file), ``"empty"`` (no tables: a new store),
    ``"alembic"`` (``revision`` from ``alembic_version``) or ``"upstream"`` (a file
    upstream Hermes wrote, not adopted yet: ``revision`` derived from its
    ``schema_version``). ``schema_version`` is upstream's number as stored.
    """

    kind: str
    revision: str | None
    schema_version: int | None = None
    path: Path | None = None
    writable: bool = True

    @property
    def needs_adoption(self) -> bool:
        return self.kind == "upstream"


class Migrations:
    """Creating, inspecting and migrating one engine's schema (``hermes_store.migrate``
    is the dialect-free API over it; ``migrations/env.py`` hands its run to
    :meth:`run_env`)."""

    #: the first revision a database of this engine runs (None: the chain's base)
    baseline: str | None = None

    def first_step(self, revision: str) -> str | None:
        """The first revision a new (empty) database runs on its way to ``revision``
        (None: the chain's base): the baseline, unless the engine creates a new
        database at ``revision`` in one step."""
        return self.baseline

    def state(self, target: StoreTarget) -> StoreState:
        raise NotImplementedError

    def schema_version_of(self, target: StoreTarget) -> int | None:
        raise NotImplementedError

    def upgrade(self, target: StoreTarget, revision: str = "head", *,
                progress=None) -> str | None:
        raise NotImplementedError

    def downgrade(self, target: StoreTarget, revision: str) -> str | None:
        raise NotImplementedError

    def refuse_downgrade(self, target: StoreTarget, revision: str) -> None:
        """Raise before anything runs when ``revision`` cannot be reached downwards."""

    def stamp(self, target: StoreTarget, revision: str) -> None:
        raise NotImplementedError

    def check(self, target: StoreTarget):
        """``migrate.CheckResult``: at head, and drift from ``hermes_store.schema``."""
        raise NotImplementedError

    def ensure_schema(self, target: StoreTarget, *, auto_upgrade: bool, read_only: bool) -> None:
        raise NotImplementedError

    def run_env(self, context, target: StoreTarget, *, read_only: bool) -> None:
        """The body of ``migrations/env.py`` for this engine."""
        raise NotImplementedError

    def run_env_on(self, context, connection: sa.Connection, where: object) -> None:
        """``migrations/env.py`` on a caller's live connection."""
        raise NotImplementedError

    def run_topics_env(self, context, target: StoreTarget, *, read_only: bool) -> None:
        """The body of ``migrations/telegram_topics/env.py`` for this engine."""
        raise NotImplementedError

    def run_topics_env_on(self, context, connection: sa.Connection, where: object) -> None:
        raise NotImplementedError

    # -- the Telegram topic branch (opt-in; its own version table)

    def topics_state(self, target: StoreTarget):
        raise NotImplementedError

    def topics_state_on(self, conn: sa.Connection, where: object):
        raise NotImplementedError

    def upgrade_topics(self, target: StoreTarget, revision: str, *, only_if_present: bool) -> str | None:
        raise NotImplementedError

    def upgrade_topics_on(self, conn: sa.Connection, revision: str) -> str | None:
        """The opt-in inside the caller's write unit."""
        raise NotImplementedError

    def downgrade_topics(self, target: StoreTarget, revision: str) -> str | None:
        raise NotImplementedError

    def topics_drift(self, conn: sa.Connection, diffs: list, metadata) -> list:
        """Autogenerate differences of the topic tables that are real (the engine's
        reflection artefacts removed)."""
        return diffs


class CopySide:
    """What ``db copy`` needs of one side (``hermes_store.dbcopy``)."""

    #: the engine's columns hold values only of their declared type (a copy from a
    #: looser engine must check the rows first)
    strict_types: bool = False

    def exists(self, target: StoreTarget) -> bool:
        return True

    def engine(self, target: StoreTarget, *, writable: bool) -> Engine:
        raise NotImplementedError

    def close(self, engine: Engine, target: StoreTarget, *, writable: bool) -> None:
        engine.dispose()

    @contextlib.contextmanager
    def snapshot(self, conn: sa.Connection) -> Iterator[sa.Connection]:
        """One read-only transaction on ``conn``."""
        raise NotImplementedError
        yield conn  # pragma: no cover

    def own_object(self, name: str) -> bool:
        """A table the engine keeps for itself (full-text shadow tables…)."""
        return False

    def check_source_rows(self, conn: sa.Connection, specs: Sequence, *, where: str,
                          strict_destination: bool) -> None:
        """Refuse rows a copy could not keep (broken references, values of another type
        than their column's where the destination is strict)."""

    def write_rows(self, conn: sa.Connection, table: sa.Table, rows: list[tuple]) -> None:
        raise NotImplementedError

    def suspended_objects(self, conn: sa.Connection, names: list[str],
                          triggers: Sequence[str]) -> list[tuple[str, str, str]]:
        """``(name, drop, create)`` of secondary indexes, keys and the given triggers
        that a bulk load suspends, from the destination's own catalog."""
        raise NotImplementedError

    def before_load(self, conn: sa.Connection, low: int | None, high: int | None) -> None:
        """Set up the full-text layer for a bulk load of messages ``low..high``."""

    def after_load(self, conn: sa.Connection, where: str) -> None:
        """Build the full-text layer after the load; check references."""

    def after_finish(self, engine: Engine) -> None:
        """Outside a transaction, once the finish step committed (statistics)."""

    def id_high_water(self, conn: sa.Connection, top: int) -> int:
        """The highest message id ever handed out (``top`` is ``MAX(id)``)."""
        return top

    def carry_id_high_water(self, conn: sa.Connection, high_water: int) -> None:
        raise NotImplementedError


__all__ = ["CopySide", "Migrations", "SearchRoute", "StoreState", "StoreTarget"]
