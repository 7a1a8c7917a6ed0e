"""``SessionDB``: the session store, a drop-in for upstream Hermes' ``SessionDB``.

It is composed of one mixin per concern (``hermes_store.repository``); this module
only opens and closes the database. Which one is decided once by
``hermes_store.location.resolve`` (decision D11): a path or ``sqlite:///PATH`` is a
SQLite file, a ``postgresql+psycopg://…`` URL a PostgreSQL database, and with nothing
given ``$HERMES_STATE_DATABASE_URL``, else ``$HERMES_HOME/state.db`` (at call time).

A SQLite file:

1. refuse a symlink planted at the path or a sidecar; create the folder and, for a
   new database, the file with mode 0600 (SQLite gives ``-wal``/``-shm`` the
   database file's mode);
2. check through SQLite that the file is a readable database, before any write
   (healing one pattern, duplicated full-text schema entries: ``schema_repair``);
3. bring the schema to head with ``hermes_store.migrate`` (adopting a file upstream
   Hermes wrote), or refuse with the command to run when ``auto_upgrade=False``;
4. create the engine (connect/begin hooks) and the write-unit runner.

A PostgreSQL database (``hermes_store.postgres``, imported only then):

1. create the pooled engine (the NUL codec, the begin hook's transaction modes,
   ``lock_timeout`` = the retry policy's busy timeout, read-only transactions for
   ``read_only=True``);
2. check the schema: two statements answer "at head?"; anything else goes to
   ``migrate_pg.ensure_schema`` (an empty database gets the baseline, under the
   migration lock), or is refused with the command to run;
3. create the unit runner and the pooled readers.

    with SessionDB("/tmp/state.db") as db:
        db.create_session("s1", "cli", model="m")
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

from sqlalchemy.engine import Engine

from . import revisions, schema
from .engine import (
    HeldConnections,
    PooledConnections,
    RetryPolicy,
    WriteUnits,
    autocommit,
    create_engine,
    reader,
)
from .errors import (
    SchemaOutOfDateError,
    SchemaTooNewError,
    StoreNotFoundError,
    UnsafePathError,
)
from .location import Given, Target, resolve
from .repository.cleanup import CleanupMixin
from .repository.gateway import GatewayMixin
from .repository.handoff import HandoffMixin
from .repository.importing import ImportMixin
from .repository.lineage import LineageMixin
from .repository.lookups import LookupsMixin
from .repository.maintenance import MaintenanceMixin
from .repository.messages import MessagesMixin
from .repository.meta import MetaMixin
from .repository.portability import PortabilityMixin
from .repository.search import SearchMixin
from .repository.sessions import SessionsMixin
from .repository.telegram import TelegramTopicsMixin
from .repository.titles import TitlesMixin
from .repository.usage import UsageMixin
from .repository.values import scrub_surrogates
from .schema_repair import probe_or_heal

#: the upstream schema version a head file carries
SCHEMA_VERSION = schema.SCHEMA_VERSION
_SIDECARS = ("", "-wal", "-shm", "-journal")


def _upgrade_hint(path: Path) -> str:
    return (f"run `hermes-store db upgrade --db {path}` (or `alembic -x db={path} upgrade "
            "head`), or open it with auto_upgrade=True")


def _check_not_symlink(path: Path) -> None:
    for suffix in _SIDECARS:
        candidate = Path(f"{path}{suffix}")
        if candidate.is_symlink():
            raise UnsafePathError(
                f"{candidate} is a symbolic link (to {os.readlink(candidate)}); refusing to "
                "open it, since writes would land wherever it points. Remove the link or "
                "pass the real file's path."
            )


def _create_private_file(path: Path) -> None:
    """Create an empty database file readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return  # created meanwhile by another process: use it as found
    os.close(fd)


def _make_private(path: Path) -> None:
    """Take group/other access away from a database we own (it holds whole
    conversations); SQLite gives new -wal/-shm files the database's mode."""
    for suffix in ("", "-wal", "-shm"):
        candidate = Path(f"{path}{suffix}")
        try:
            st = candidate.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            candidate.chmod(st.st_mode & 0o700)


def ensure_schema(path: Path, *, auto_upgrade: bool, read_only: bool) -> None:
    """Bring the file to head, or raise the error that says what to run."""
    if revisions.stamped_at_head(path):
        return  # the usual open: answered without importing Alembic
    from . import migrate

    head = migrate.head()
    at = migrate.current(path)
    if at == head:
        return
    if at is not None and at > head:
        raise SchemaTooNewError(
            f"{path} has schema revision {at}, newer than this hermes_store knows ({head}); "
            "it was not touched. Upgrade hermes_store to open it."
        )
    if read_only or not auto_upgrade:
        state = "has no schema yet" if at is None else f"is at schema revision {at}"
        why = "it is opened read-only" if read_only else "auto_upgrade=False"
        raise SchemaOutOfDateError(
            f"{path} {state}, head is {head}, and {why}: {_upgrade_hint(path)}"
        )
    migrate.upgrade(path, "head")
    # Topic tables a user already opted into (e.g. in upstream Hermes) come along;
    # absent ones are never created here.
    migrate.upgrade_telegram_topics(path, only_if_present=True)


class SessionDB(
    SessionsMixin,
    TitlesMixin,
    LineageMixin,
    UsageMixin,
    PortabilityMixin,
    CleanupMixin,
    ImportMixin,
    MetaMixin,
    MaintenanceMixin,
    MessagesMixin,
    SearchMixin,
    GatewayMixin,
    HandoffMixin,
    LookupsMixin,
    TelegramTopicsMixin,
):
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
    ) -> None:
        target = resolve(db_path)
        #: the database (``display`` names it: a path, or the URL with its password masked)
        self.target: Target = target
        #: the SQLite file, or None on PostgreSQL
        self.db_path: Path | None = target.path
        self.read_only = bool(read_only)
        self.retry = retry
        self._snapshots = threading.local()
        if target.is_postgresql:
            self._open_server(target, auto_upgrade, pool_size=pool_size,
                              max_overflow=max_overflow)
        else:
            self._open_file(target.path, auto_upgrade)

    def _open_file(self, path: Path, auto_upgrade: bool) -> None:
        retry = self.retry
        _check_not_symlink(path)
        if not path.exists():
            if self.read_only:
                raise StoreNotFoundError(
                    f"{path} does not exist; a read-only open never creates a database. "
                    "Check the path (or $HERMES_HOME), or open it without read_only=True."
                )
            if not auto_upgrade:
                raise SchemaOutOfDateError(f"{path} does not exist: {_upgrade_hint(path)}")
            _create_private_file(path)
        elif not self.read_only:
            _make_private(path)
        probe_or_heal(path, read_only=self.read_only)  # heals only duplicated FTS schema rows
        ensure_schema(path, auto_upgrade=auto_upgrade, read_only=self.read_only)
        engine = create_engine(path, read_only=self.read_only, busy_timeout=retry.busy_timeout)
        self._engine = engine
        self._units = WriteUnits(engine, retry, label=path)
        self._readers = HeldConnections(engine)

    def _open_server(self, target: Target, auto_upgrade: bool, **pool) -> None:
        from . import postgres

        engine = postgres.create_engine(target, lock_timeout=self.retry.busy_timeout,
                                        read_only=self.read_only, **pool)
        try:
            with postgres.pg_errors(target):
                at_head = postgres.stamped_at_head(engine, revisions.head())
            if not at_head:
                from . import migrate_pg

                migrate_pg.ensure_schema(target, auto_upgrade=auto_upgrade,
                                         read_only=self.read_only)
        except BaseException:
            engine.dispose()
            raise
        self._engine = engine
        self._units = WriteUnits(engine, self.retry, label=target,
                                 hold_connections=postgres.HOLD_CONNECTIONS, serialize=False)
        connections = HeldConnections if postgres.HOLD_CONNECTIONS else PooledConnections
        self._readers = connections(reader(engine))
        self._singles = connections(autocommit(engine))

    def close(self) -> None:
        """Checkpoint (SQLite, PASSIVE: never waits for, or disturbs, other processes)
        and release the database (PostgreSQL: the pool's connections). Idempotent; any
        other call afterwards raises ``StoreClosedError``."""
        engine, units = self._engine, self._units
        if engine is None:
            return
        try:
            self._release_connections()  # every thread's held connections
        finally:
            self._engine = None
            self._units = None
            try:
                if not self.read_only and units is not None:
                    units.checkpoint("PASSIVE")
            finally:
                engine.dispose()

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


def _scrub_argument(value):
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(scrub_surrogates(v) for v in value)
    return scrub_surrogates(value)


def _guarded(method):
    """The API boundary of every public method:

    * raise ``StoreClosedError`` on a closed store, even when the method would have
      returned early without touching the database;
    * replace lone surrogates in text arguments (and lists of text): stored text never
      holds them, so ids and filters must be scrubbed the same way to reach the same
      rows, and the driver could not bind them anyway.
    """
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        self._require_open()
        if args:
            args = tuple(map(_scrub_argument, args))
        if kwargs:
            kwargs = {k: _scrub_argument(v) for k, v in kwargs.items()}
        return method(self, *args, **kwargs)

    return call


def _guard_public_methods(cls: type) -> None:
    exempt = {"close"}
    for name in dir(cls):
        if name.startswith("_") or name in exempt:
            continue
        raw = None
        for klass in cls.__mro__:
            if name in klass.__dict__:
                raw = klass.__dict__[name]
                break
        if callable(raw) and not isinstance(raw, (staticmethod, classmethod, type)):
            setattr(cls, name, _guarded(raw))


_guard_public_methods(SessionDB)
