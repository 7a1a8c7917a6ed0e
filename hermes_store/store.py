"""``SessionDB``: the session store, a drop-in for upstream Hermes' ``SessionDB``.

It is composed of one mixin per concern (``hermes_store.repository``): ``sessions``
at import, the others on first use (``repository.concerns``: a process that reads one
session never imports them). This module only opens and closes the database. Which
database is decided once by
``hermes_store.location.resolve`` (decision D11): a path or ``sqlite:///PATH`` is a
SQLite file, a ``postgresql+psycopg://…`` URL a PostgreSQL database, and with nothing
given ``$HERMES_STATE_DATABASE_URL``, else ``$HERMES_HOME/state.db`` (at call time).
The target's backend (``hermes_store.backends``, D17) opens it —
``Backend.open_store``: a file's symlink and mode checks, the read-only probe and the
schema at head (``backends/sqlite``); a server's pooled engine and its head check
(``backends/postgresql``, imported only then) — and the store keeps what it hands back.

    with SessionDB("/tmp/state.db") as db:
        db.create_session("s1", "cli", model="m")
"""

from __future__ import annotations

import functools
from pathlib import Path

from sqlalchemy.engine import Engine

from . import schema
from .backends.base import get as backend_named
from .errors import InvalidArgumentError, ServerUnreachableError
from .location import Given, Target, resolve
from .repository.base import ReadInterrupted, ThreadSnapshot
from .repository.concerns import CONCERNS, EAGER, Assembled, AssembledOnUse, load
from .sql.values import need_no_scrubbing, scrub_surrogates
from .policy import RetryPolicy
from .units import Outage, WriteUnits

#: the upstream schema version a head file carries
SCHEMA_VERSION = schema.SCHEMA_VERSION


#: containers whose text items the boundary scrubs (rebuilt as the same type; a
#: subclass such as a named tuple cannot be rebuilt from one iterable, and is passed on)
_SCRUBBED_CONTAINERS = (list, tuple, set, frozenset)


def _scrub_argument(value):
    if type(value) in _SCRUBBED_CONTAINERS:
        return type(value)(scrub_surrogates(v) for v in value)
    return scrub_surrogates(value)


def _guarded(method):
    """The API boundary of every public method:

    * raise ``StoreClosedError`` on a closed store, even when the method would have
      returned early without touching the database;
    * replace lone surrogates in text arguments (and lists of text): stored text never
      holds them, so ids and filters must be scrubbed the same way to reach the same
      rows, and the driver could not bind them anyway;
    * re-run a call whose read snapshot lost its connection mid-way (a server restart:
      ``ReadInterrupted``), when the call has committed no write unit so far — it has
      then only read, and running it again reads afresh — within the outage budget
      (``RetryPolicy.outage_timeout``, decision D16). A call that wrote gets the error.
    """
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        self._require_open()
        # most calls carry only None, numbers and ASCII text: nothing is rebuilt then
        if args and not need_no_scrubbing(args):
            args = tuple(map(_scrub_argument, args))
        if kwargs and not need_no_scrubbing(kwargs.values()):
            kwargs = {k: _scrub_argument(v) for k, v in kwargs.items()}
        units = self._units
        wrote = units.commits_on_this_thread() if units is not None else 0
        try:
            return method(self, *args, **kwargs)
        except ReadInterrupted as exc:
            return _rerun_read(self, method, args, kwargs, exc, wrote)

    call._api_guard_of = method
    return call


def _rerun_read(db, method, args, kwargs, exc: ReadInterrupted, wrote: int):
    """Run ``method`` again after a ``ReadInterrupted`` (see ``_guarded``)."""
    outage = Outage(db.retry)
    while True:
        units = db._units
        if units is None or units.commits_on_this_thread() != wrote \
                or units.active_connection() is not None:
            raise ServerUnreachableError(str(exc)) from exc  # it wrote: not re-run
        if not outage.wait():
            raise ServerUnreachableError(
                f"{exc}; tried for {db.retry.outage_timeout:g} s "
                "(RetryPolicy(outage_timeout=…) sets how long)") from exc
        try:
            return method(db, *args, **kwargs)
        except ReadInterrupted as again:
            exc = again


_ABSENT = object()


def _guard_public_methods(cls: type, mro: tuple[type, ...] | None = None) -> None:
    """Put ``_guarded`` on every public method ``cls`` resolves to — through ``mro``
    when given: the order it is about to have (``repository.concerns``), so the guard
    is in place before the methods of its new concerns can be reached."""
    mro = cls.__mro__ if mro is None else mro
    exempt = {"close", "reopen", "replaced"}
    for name in {name for klass in mro for name in vars(klass)}:
        if name.startswith("_") or name in exempt:
            continue
        raw = None
        for klass in mro:
            found = klass.__dict__.get(name, _ABSENT)
            if found is not _ABSENT and not (klass is cls and hasattr(found, "_api_guard_of")):
                raw = found  # the first definition past a guard already in place
                break
        if callable(raw) and not isinstance(raw, (staticmethod, classmethod, type)):
            if getattr(cls.__dict__.get(name), "_api_guard_of", None) is not raw:
                setattr(cls, name, _guarded(raw))


class SessionDB(*load(CONCERNS[:EAGER]), Assembled, metaclass=AssembledOnUse,
                later=CONCERNS[EAGER:], on_assembly=_guard_public_methods):
    """The Hermes session store over one SQLite file or one PostgreSQL database (see
    the module docstring)."""

    def __init__(
        self,
        db_path: Given = None,
        read_only: bool = False,
        *,
        auto_upgrade: bool = True,
        retry: RetryPolicy = RetryPolicy(),
        pool_size: int | None = None,
        max_overflow: int | None = None,
        journal_mode: str | None = None,
    ) -> None:
        target = resolve(db_path)
        #: the database (``display`` names it: a path, or the URL with its password masked)
        self.target: Target = target
        #: the SQLite file, or None on PostgreSQL
        self.db_path: Path | None = target.path
        self.read_only = bool(read_only)
        self.retry = retry
        backend = self._backend = backend_named(target.backend)  # resolved once, carried
        options = dict(read_only=self.read_only, auto_upgrade=auto_upgrade, retry=retry,
                       pool_size=pool_size, max_overflow=max_overflow)
        if journal_mode is not None:  # a file's setting: "wal" or "delete"
            if not backend.stores_files:
                raise InvalidArgumentError(
                    f"journal_mode is a SQLite file's setting; {target.display} is a "
                    f"{backend.name} database, which keeps its own write-ahead log"
                )
            options["journal_mode"] = journal_mode
        self._open_options = options
        self._open()

    def _open(self, *, reopening: bool = False) -> None:
        self._snapshots = ThreadSnapshot()
        backend = self._backend
        opened = backend.open_store(self.target, reopening=reopening, **self._open_options)
        self._engine = opened.engine
        self._units = WriteUnits(opened.engine, self.retry, label=opened.label,
                                 backend=backend, guard=opened.guard)
        self._readers = opened.readers
        self._singles = opened.singles

    def close(self) -> None:
        """Checkpoint (SQLite: under the writer lock, skipped when another writer keeps
        it; never waits for readers) and release the database (PostgreSQL: the pool's connections). Idempotent; any
        other call afterwards raises ``StoreClosedError``."""
        engine, units = self._engine, self._units
        if engine is None:
            return
        if units is not None and units.guard is not None:
            # A replaced file's log must not stay where the new file's next opener would
            # read it: moved while this store's connections still prove it theirs.
            units.guard.settle()
        try:
            self._release_connections()  # every thread's kept connections
        finally:
            self._engine = None
            self._units = None
            try:
                if not self.read_only and units is not None:
                    units.checkpoint()  # skipped for a replaced file
            finally:
                engine.dispose()

    def reopen(self) -> None:
        """Close, then open the database again with the same settings. After
        ``StoreReplacedError`` this picks up the file now at the path: a store never
        switches files by itself; nor does it create a SQLite file's directory that
        vanished (``StoreDirectoryVanishedError``: a new ``SessionDB`` does)."""
        self.close()
        self._open(reopening=True)

    @property
    def replaced(self) -> bool:
        """Whether the database is no longer the one this store opened (a SQLite file
        renamed over, moved or deleted); False on a server and on a closed store."""
        units = self._units
        return units is not None and units.guard is not None and units.guard.replaced()

    @property
    def closed(self) -> bool:
        return self._engine is None

    @property
    def engine(self) -> Engine:
        """The store's SQLAlchemy engine, so ``hermes_store.transfer`` (and other tools
        of this package) can work on an open store; ``StoreClosedError`` once closed."""
        return self._require_open()

    def __enter__(self) -> "SessionDB":
        self._require_open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self.read_only else "open")
        return f"SessionDB({self.target.display!r}, {state})"


_guard_public_methods(SessionDB)
