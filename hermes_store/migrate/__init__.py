"""Schema management for a store on either engine: upgrade, downgrade, current, check.

    from hermes_store import migrate

    migrate.upgrade()                      # $HERMES_HOME/state.db (else ~/.hermes) to head
    migrate.upgrade("state.db", "0022")    # to schema version 22
    migrate.current("state.db")            # "0022"
    migrate.downgrade("state.db", "0021")
    migrate.upgrade("postgresql+psycopg://hermes@db/hermes")

Revision ``00NN`` is upstream schema version N (decision D2). Every function takes a
path or a SQLAlchemy URL (D11, resolved by :mod:`hermes_store.location`) and hands the
work to that engine's backend (``Backend.migrations``, decision D17): SQLite files walk
the revisions (adopting a file upstream Hermes wrote first, D5; see
``backends/sqlite/migrate``), a PostgreSQL database starts from its baseline at ``0030``
under an advisory lock (``backends/postgresql/migrate/``). The Alembic scripts and
their configs are in :mod:`hermes_store.migrate.scripts`, the Telegram topic branch's
shared parts in :mod:`hermes_store.migrate.topics`.

Before anything touches a database it is probed read-only: a file that is not SQLite,
is damaged, or was written by a newer version (schema version above :func:`head`) is
refused with an error from :mod:`hermes_store.errors` and left as it was.
"""

from __future__ import annotations

from .. import errors, location
from ..backends.base import backend_of, get
from ..backends.facets import StoreState
from .results import CheckResult
from .scripts import (
    MIGRATIONS_DIR,
    TELEGRAM_TOPICS_DIR,
    Progress,
    config,
    head,
    history,
    read_only_command,
    telegram_topics_config,
    telegram_topics_head,
    telegram_topics_history,
)
from .topics import (
    TopicsCheck,
    TopicsState,
    check_telegram_topics,
    include_telegram_topics_name,
    write_telegram_topic_meta,
)

#: what a read-only probe found (``inspect_file``); the same on every engine
FileState = StoreState

Given = location.Given


def _migrations(given: Given):
    target = location.resolve(given)
    return target, get(target.backend).migrations


def _file_migrations(given: Given):
    """As :func:`_migrations`, for operations on files only (a server URL is refused:
    it is never a file name)."""
    target, migrations = _migrations(given)
    if target.path is None:
        raise errors.UnsupportedBackendError(
            f"{target.display} is not a SQLite file; this operation reads files only"
        )
    return target, migrations


def inspect_file(path: Given) -> StoreState:
    """Probe a database without writing to it (not even a file's journal mode).

    Raises NotADatabaseError, DatabaseDamagedError, SchemaTooNewError, StoreBusyError
    or DatabaseAccessError; never changes anything.
    """
    target, migrations = _file_migrations(path)
    return migrations.state(target)


def state(path: Given = None) -> StoreState:
    """Where a database stands (a file or a server), read without writing to it."""
    target, migrations = _migrations(path)
    return migrations.state(target)


def current(path: Given = None) -> str | None:
    """The database's revision, without writing to it: for a file upstream Hermes wrote
    (not yet adopted) the revision its ``schema_version`` corresponds to; None for a
    missing or empty one."""
    target, migrations = _migrations(path)
    return migrations.state(target).revision


def schema_version_of(path: Given) -> int | None:
    """The upstream ``schema_version`` recorded in a database (None when absent)."""
    target, migrations = _migrations(path)
    return migrations.schema_version_of(target)


def upgrade(path: Given = None, revision: str = "head", *,
            progress: Progress | None = None) -> str | None:
    """Upgrade (adopting first if needed) to ``revision``; returns the revision reached.

    A missing file is created, owner-only (with its directory); an empty PostgreSQL
    database gets the baseline. A database already there is left alone, even when it
    is read-only.
    """
    target, migrations = _migrations(path)
    return migrations.upgrade(target, revision, progress=progress)


def downgrade(path: Given, revision: str) -> str | None:
    """Downgrade to ``revision`` (``"base"`` removes every table of a file; a PostgreSQL
    database cannot go below its baseline ``0030``)."""
    target, migrations = _migrations(path)
    return migrations.downgrade(target, revision)


def refuse_downgrade(path: Given, revision: str) -> None:
    """Raise the error :func:`downgrade` would raise for an unreachable ``revision``,
    before anything is asked or run."""
    target, migrations = _migrations(path)
    migrations.refuse_downgrade(target, revision)


def stamp(path: Given, revision: str) -> None:
    """Record ``revision`` (and its schema_version) without running migrations."""
    target, migrations = _migrations(path)
    migrations.stamp(target, revision)


def check(path: Given = None) -> CheckResult:
    """Is the database at head, and do its ordinary tables match ``hermes_store.schema``?

    ``drift`` lists Alembic autogenerate's differences (FTS objects excluded);
    ``telegram_topics`` reports the opt-in Telegram topic branch. Read-only.
    """
    target, migrations = _migrations(path)
    return migrations.check(target)


def ensure_schema(path: Given, *, auto_upgrade: bool = True, read_only: bool = False) -> None:
    """Bring the database to head, or raise the error that says what to run (what
    ``SessionDB`` does at open)."""
    target, migrations = _migrations(path)
    migrations.ensure_schema(target, auto_upgrade=auto_upgrade, read_only=read_only)


# --------------------------------------------------------------------------- Telegram topic branch


def inspect_telegram_topics(path: Given = None) -> TopicsState:
    """Where the database stands on the Telegram topic branch; read-only."""
    target, migrations = _migrations(path)
    return migrations.topics_state(target)


def telegram_topics_current(path: Given = None) -> str | None:
    """The database's revision on the Telegram topic branch (None: nobody opted in).

    For tables upstream Hermes created this is the revision their shape corresponds
    to (``t001`` without ``ON DELETE CASCADE``, else ``t002``)."""
    return inspect_telegram_topics(path).revision


def upgrade_telegram_topics(path: Given = None, revision: str = "head", *,
                            connection=None, only_if_present: bool = False) -> str | None:
    """Opt in: create the Telegram topic tables, or bring them to ``revision``.

    Returns the branch's revision afterwards. With ``connection`` it runs inside the
    caller's transaction (``SessionDB.apply_telegram_topic_migration``); otherwise on the
    database, whose main chain must be at head. ``only_if_present``: upgrade tables the
    database already has (e.g. an upstream file that opted in), never create them.
    """
    if connection is not None:
        return backend_of(connection).migrations.upgrade_topics_on(connection, revision)
    target, migrations = _file_migrations(path)
    return migrations.upgrade_topics(target, revision, only_if_present=only_if_present)


def downgrade_telegram_topics(path: Given, revision: str) -> str | None:
    """Downgrade the Telegram topic tables (``"base"`` drops them and the meta key)."""
    target, migrations = _file_migrations(path)
    return migrations.downgrade_topics(target, revision)


__all__ = [
    "CheckResult",
    "FileState",
    "MIGRATIONS_DIR",
    "TELEGRAM_TOPICS_DIR",
    "TopicsCheck",
    "TopicsState",
    "check",
    "check_telegram_topics",
    "config",
    "current",
    "downgrade",
    "downgrade_telegram_topics",
    "ensure_schema",
    "head",
    "history",
    "include_telegram_topics_name",
    "inspect_file",
    "inspect_telegram_topics",
    "read_only_command",
    "refuse_downgrade",
    "schema_version_of",
    "stamp",
    "telegram_topics_config",
    "telegram_topics_current",
    "telegram_topics_head",
    "telegram_topics_history",
    "upgrade",
    "upgrade_telegram_topics",
    "write_telegram_topic_meta",
]
