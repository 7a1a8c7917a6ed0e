"""``hermes_state`` for hermes-agent 0.19.0, on hermes_store (issue 16, decision D15).

The agent imports this module under the name ``hermes_state`` once ``hermes-store agent
enable`` is on (the switch maps the name to this very module object). It offers the
module-level names agent 0.19.0 uses, each answering as upstream's module does
(``tests/agent/agent_0_19_0_surface.md`` lists every use and how it is answered):

* ``SessionDB`` — ``hermes_store.SessionDB``, plus what the agent reaches into:
  ``_conn`` (``raw.RawConnection``: ``execute(sql, params)`` with ``?`` placeholders,
  cursors, ``sqlite3.Row``-like rows, ``commit()``) and ``_execute_write(fn)`` (``fn(conn)``
  as one write unit with the retry policy, returning its result). Every error it raises
  is also the ``sqlite3`` class upstream raised there (``errors``). With
  ``HERMES_STATE_DATABASE_URL`` set, the default path — also when the agent passes it
  explicitly, ``SessionDB(db_path=HERMES_HOME / "state.db")`` — opens that database;
  ``db_path`` is then a ``ServerDatabase`` (no file: ``exists()`` is False).
  On a SQLite file it keeps system prompts inline for the agent version the user may
  switch back to (``prompts``).
* ``AsyncSessionDB`` — the same methods, awaited, each run in a worker thread.
* ``DEFAULT_DB_PATH``, ``SCHEMA_VERSION`` (the schema version this package writes: 30),
  ``MAX_FTS5_QUERY_CHARS`` (where a search query is cut, as upstream's),
  ``get_last_init_error``, ``format_session_db_unavailable``, ``workspace_key``,
  ``apply_wal_with_fallback``, ``is_malformed_db_error``, ``_db_opens_cleanly``,
  ``repair_state_db_schema`` (``health``).

Imports are absolute: the module may be loaded under either name.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import inspect
import os
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Optional, TypeVar

import sqlalchemy as _sa

from hermes_store.paths import DB_FILENAME as _DB_FILENAME
from hermes_store.paths import expand_home as _expand_home
from hermes_store.paths import hermes_home as _env_home
from hermes_store.startup import collector_paused as _collector_paused

with _collector_paused():  # the agent's processes pay this import (startup.py)
    from hermes_store import schema as _schema
    from hermes_store.agent import errors as _errors
    from hermes_store.fts.query import MAX_FTS5_QUERY_CHARS
    from hermes_store.agent import health as _health
    from hermes_store.agent.prompts import keep_prompts_inline as _keep_prompts_inline
    from hermes_store.agent.raw import RawConnection as _RawConnection
    from hermes_store.location import URL_ENV as _URL_ENV
    from hermes_store.store import SessionDB as _StoreSessionDB

T = TypeVar("T")

__all__ = [
    "AsyncSessionDB", "DEFAULT_DB_PATH", "MAX_FTS5_QUERY_CHARS", "SCHEMA_VERSION", "SessionDB",
    "apply_wal_with_fallback", "format_session_db_unavailable", "get_last_init_error",
    "is_malformed_db_error", "repair_state_db_schema", "workspace_key",
]

#: the schema version this package writes into ``schema_version`` (upstream 0.19.0: 22)
SCHEMA_VERSION = _schema.SCHEMA_VERSION


def _hermes_home() -> Path:
    """The agent's own answer when it is installed (it honours a profile's context-local
    override), else ``$HERMES_HOME`` / ``~/.hermes``."""
    try:
        from hermes_constants import get_hermes_home
    except ImportError:
        return _env_home()
    return Path(get_hermes_home())


def _server_url() -> str | None:
    return os.environ.get(_URL_ENV, "").strip() or None


def _same_file(a, b) -> bool:
    return os.path.realpath(_expand_home(a)) == os.path.realpath(_expand_home(b))


def _names_default_file(path) -> bool:
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, ServerDatabase):
        return False
    if isinstance(path, str) and "://" in path:
        return False  # a URL is what it says
    candidates = (DEFAULT_DB_PATH, _hermes_home() / _DB_FILENAME, _env_home() / _DB_FILENAME)
    return any(_same_file(path, c) for c in candidates)


def _server_url_for(path) -> str | None:
    """The URL a path stands for: with ``HERMES_STATE_DATABASE_URL`` set, the default
    ``state.db`` (or no path) is that database; every other path is the file it names."""
    url = _server_url()
    if url is None:
        return None
    if path is None or _names_default_file(path):
        return url
    return None


class _StatePath(type(Path())):
    """``DEFAULT_DB_PATH``: the default file; with ``HERMES_STATE_DATABASE_URL`` set it
    stands for the server database, so ``exists()`` says there is a store (the agent
    asks before opening one: the dashboard's active-session count, ``sessions repair``)."""

    def exists(self, *args, **kwargs) -> bool:  # (3.12 adds follow_symlinks)
        if _server_url() is not None and _names_default_file(self):
            return True
        return super().exists(*args, **kwargs)


#: the default store, as upstream computes it at import: ``$HERMES_HOME/state.db``
DEFAULT_DB_PATH = _StatePath(_hermes_home() / _DB_FILENAME)


class ServerDatabase:
    """``SessionDB.db_path`` on PostgreSQL: there is no file. ``exists()`` is False (so
    the agent's ``sessions stats``/``optimize`` skip the file size), ``str()`` names the
    database with its password masked, and using it as a file path says why not."""

    def __init__(self, target) -> None:
        self.target = target

    def exists(self) -> bool:
        return False

    is_file = exists

    def __fspath__(self) -> str:
        raise FileNotFoundError(
            errno.ENOENT,
            f"{self.target.display} is a PostgreSQL database, not a file (its size: "
            "`hermes-store status`)",
        )

    def __str__(self) -> str:
        return str(self.target.display)

    def __repr__(self) -> str:
        return f"ServerDatabase({self.target.display!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ServerDatabase) and other.target == self.target

    def __hash__(self) -> int:
        return hash(self.target)


# --------------------------------------------------------------------------- init errors

_last_init_error: Optional[str] = None
_last_init_error_lock = threading.Lock()


def _set_last_init_error(message: Optional[str]) -> None:
    """Record the last failed ``SessionDB()`` open (None clears it; a later successful
    open does not, so a concurrent success cannot hide another thread's cause)."""
    global _last_init_error
    with _last_init_error_lock:
        _last_init_error = message


def get_last_init_error() -> Optional[str]:
    """``"ErrorClass: message"`` of the last ``SessionDB()`` that failed to open, or None."""
    return _last_init_error


def format_session_db_unavailable(prefix: str = "Session database not available") -> str:
    """``prefix`` with the last open failure's cause, for the agent's user-facing
    messages; names the network-filesystem cause when SQLite refused WAL."""
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    hint = ""
    if any(marker in cause.lower() for marker in _health.WAL_REFUSED):
        hint = (" (state.db may be on a network filesystem, NFS/SMB/FUSE, where SQLite's "
                "WAL mode does not work — see https://www.sqlite.org/wal.html)")
    return f"{prefix}: {cause}{hint}."


def workspace_key(row: Dict[str, Any]) -> Optional[str]:
    """A session's workspace: its git repository root when known, else its cwd (the
    branch is left out, so a new branch does not split a workspace); None when neither."""
    for field in ("git_repo_root", "cwd"):
        value = (row.get(field) or "").strip()
        if value:
            return value
    return None


apply_wal_with_fallback = _health.apply_wal_with_fallback
is_malformed_db_error = _health.is_malformed_db_error
#: the labels ``apply_wal_with_fallback`` has warned about, under upstream's name (its
#: tests empty it between cases)
_wal_fallback_warned_paths = _health._warned


def _db_opens_cleanly(db_path: Path) -> Optional[str]:
    """None when the store at ``db_path`` opens and takes writes, else why not."""
    return _health.db_opens_cleanly(db_path, _server_url_for)


def repair_state_db_schema(db_path: Path, *, backup: bool = True) -> Dict[str, Any]:
    """Repair the store at ``db_path`` with this package's repairs (``health``);
    ``{"repaired", "strategy", "backup_path", "error"}``."""
    return _health.repair_state_db_schema(db_path, backup=backup, server_url=_server_url_for)


# --------------------------------------------------------------------------- SessionDB

class SessionDB(_StoreSessionDB):
    """``hermes_store.SessionDB`` as agent 0.19.0 uses ``hermes_state.SessionDB``."""

    def __init__(self, db_path: Path = None, read_only: bool = False, **options) -> None:
        try:
            url = _server_url_for(db_path) if db_path is not None else None
            super().__init__(url or db_path, read_only, **options)
            try:
                if not read_only:
                    _keep_prompts_inline(self)
            except BaseException:
                self.close()
                raise
        except Exception as exc:
            _errors.as_compat(exc)
            _set_last_init_error(f"{type(exc).__name__}: {exc}")
            raise

    # upstream's attribute is the file; on PostgreSQL there is none (ServerDatabase)
    @property
    def db_path(self):
        path = self.__dict__.get("_file_path")
        target = self.__dict__.get("target")
        if path is None and target is not None:  # a database on a server: no file
            return ServerDatabase(target)
        return path

    @db_path.setter
    def db_path(self, value) -> None:
        self.__dict__["_file_path"] = value

    @property
    def _conn(self) -> Optional[_RawConnection]:
        """The raw connection (``raw``); None once closed, as upstream's."""
        if self.closed:
            return None
        conn = self.__dict__.get("_raw_conn")
        if conn is None:
            conn = self.__dict__["_raw_conn"] = _RawConnection(self)
        return conn

    def _execute_write(self, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` as one write unit (retried whole on contention, committed when
        it returns, rolled back when it raises); returns what ``fn`` returns. ``conn``
        is ``_conn``: its statements join the unit."""
        try:
            conn = self._conn
            if conn is None:
                self._require_open()
            return self._write(lambda _unit: fn(conn))
        except _sa.exc.DBAPIError as exc:  # a statement of fn failed: as upstream's did
            raise _errors.raw_statement_error(exc, conn._engine_name) from exc
        except Exception as exc:
            _errors.as_compat(exc)
            raise


def _translating_iter(generator):
    try:
        yield from generator
    except Exception as exc:
        _errors.as_compat(exc)
        raise


def _translating(method):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            result = method(self, *args, **kwargs)
        except Exception as exc:
            _errors.as_compat(exc)
            raise
        if inspect.isgenerator(result):
            return _translating_iter(result)
        return result

    return call


def _translate_errors_of(cls: type) -> None:
    """Every public method (and the context-manager methods) raises compat errors."""
    for name in [n for n in dir(cls) if not n.startswith("_")] + ["__enter__", "__exit__"]:
        raw = inspect.getattr_static(cls, name)
        if inspect.isfunction(raw):
            setattr(cls, name, _translating(raw))


_translate_errors_of(SessionDB)


class AsyncSessionDB:
    """The ``SessionDB`` methods as coroutines: each call runs in a worker thread
    (``asyncio.to_thread``), so a blocking database call never stalls the event loop.
    ``_db`` is the wrapped store; attributes that are not callable come back as they are."""

    def __init__(self, db: SessionDB) -> None:
        self._db = db

    def __getattr__(self, name: str):
        attr = getattr(self._db, name)
        if not callable(attr):
            return attr

        async def in_thread(*args, **kwargs):
            return await asyncio.to_thread(attr, *args, **kwargs)

        in_thread.__name__ = name
        return in_thread
