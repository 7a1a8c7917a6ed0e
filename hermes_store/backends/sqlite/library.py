"""Which SQLite library the store runs on: the one source of truth for "which sqlite3".

**One SQLite per process, and by default it is the interpreter's** (decision D19). A
library cannot know what else its host process does with ``state.db``: an admin script,
a plugin, a notebook or the agent itself may open the file with ``import sqlite3``. Two
copies of SQLite in one process keep two tables of POSIX locks, and closing a file in
one drops the locks the other holds (sqlite.org/howtocorrupt.html §2.2.1): acknowledged
writes go missing silently (docs/reliability.md). So the store runs on the standard
library's ``sqlite3`` unless the host chooses otherwise for a process it owns whole:

* in code, :func:`use` (``hermes_store.use_sqlite_library("pysqlite3")``), before the
  first store opens: ``chosen_by == "argument"``; it wins over the environment;
* ``HERMES_STATE_SQLITE_MODULE=pysqlite3`` (or ``sqlite3``): ``chosen_by ==
  "environment"``;
* otherwise ``sqlite3``: ``chosen_by == "default"``. ``pysqlite3`` is the optional extra
  ``hermes_store[pysqlite3]``; a base install never imports it.

SQLite 3.7.0 through 3.51.2 has the WAL-reset bug (sqlite.org/wal.html#walresetbug;
fixed in 3.51.3 and in the backports 3.44.6 and 3.50.7). It is closed on an affected
library by how the store checkpoints, not by the library: see :data:`RACE_CLOSED_BY`
and ``engine.checkpoint``. :attr:`Library.race_guard` says which of the two applies.

Every module of the package that opens SQLite itself — the engine (SQLAlchemy's pysqlite
dialect, given this module), the probes, migrations, recovery, repairs — asks
``dbapi()`` or :func:`connect`.

``library() -> Library``  the chosen library (name, module, version, fix, how chosen)
``dbapi()``               its DB-API module (``connect``, ``Error``, ``OperationalError``…)
``connect(database, **kwargs)``  a raw connection from it, automatic checkpoints off
``check_capabilities()``  raise ``SQLiteLibraryError`` naming the library when FTS5, the
                          trigram tokenizer or JSON functions are missing
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from typing import NamedTuple
from types import ModuleType

log = logging.getLogger("hermes_store.backends.sqlite")

#: picks the library: "pysqlite3" or "sqlite3"; unset = the standard library's
ENV = "HERMES_STATE_SQLITE_MODULE"
#: the library a process runs on when neither code nor the environment chooses
DEFAULT = "sqlite3"
#: the first SQLite release with the WAL-reset fix
WAL_RESET_FIX = (3, 51, 3)
#: older release lines that got the fix as a backport: (line, first fixed release)
WAL_RESET_BACKPORTS = (((3, 44), (3, 44, 6)), ((3, 50), (3, 50, 7)))
#: how the store closes the WAL-reset race on a library, by whether it has the fix
RACE_CLOSED_BY = {True: "fixed library", False: "writer-locked checkpoints"}
#: what installs the opt-in library
EXTRA_HINT = "pip install 'hermes_store[pysqlite3]'"
#: name -> the module that holds its DB-API
_MODULES = {"pysqlite3": "pysqlite3.dbapi2", "sqlite3": "sqlite3"}
#: the hazard of the opt-in, for errors and logs
HAZARD = ("pysqlite3 is a second copy of SQLite: any code of this process that opens "
          "state.db with the standard library's sqlite3 makes the two copies drop each "
          "other's file locks (writes can be lost silently)")


def has_wal_reset_fix(version: tuple[int, ...]) -> bool:
    """Whether a SQLite release has the WAL-reset fix (3.51.3+, or a backport)."""
    version = tuple(version[:3])
    if version >= WAL_RESET_FIX:
        return True
    return any(version[:2] == line and version >= first for line, first in WAL_RESET_BACKPORTS)


class Library(NamedTuple):
    """A SQLite DB-API module and the SQLite it links."""

    name: str
    module: ModuleType
    version: tuple[int, ...]
    #: "argument" (:func:`use`), "environment" (``HERMES_STATE_SQLITE_MODULE``) or
    #: "default"
    chosen_by: str
    #: what the head schema needs and this library lacks ("" when it has everything)
    missing: str = ""

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def has_wal_reset_fix(self) -> bool:
        return has_wal_reset_fix(self.version)

    @property
    def race_guard(self) -> str:
        """How the WAL-reset race is closed here: "fixed library" or "writer-locked
        checkpoints" (the store's checkpoints hold the writer lock for their whole run
        and its connections never checkpoint on their own)."""
        return RACE_CLOSED_BY[self.has_wal_reset_fix]

    def describe(self) -> str:
        """``sqlite3 (SQLite 3.40.1, WAL-reset race closed by writer-locked checkpoints)``"""
        fix = "has the WAL-reset fix" if self.has_wal_reset_fix else "without the WAL-reset fix"
        return f"{self.name} (SQLite {self.version_text}, {fix})"

    def summary(self) -> str:
        """One line for ``status``: the library, how it was chosen, how the race is closed."""
        return (f"{self.describe()}, chosen by {self.chosen_by}; WAL-reset race closed by "
                f"{self.race_guard}")

    def as_dict(self) -> dict:
        return {"name": self.name, "sqlite_version": self.version_text,
                "chosen_by": self.chosen_by, "wal_reset_fix": self.has_wal_reset_fix,
                "wal_reset_race_closed_by": self.race_guard, "summary": self.summary()}


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError:
        return None


def _missing(module: ModuleType) -> str:
    """What of FTS5, the trigram tokenizer and JSON an in-memory connection lacks."""
    conn = module.connect(":memory:")
    try:
        lacks = []
        for what, sql in (
            ("FTS5", "CREATE VIRTUAL TABLE temp.hermes_probe_fts5 USING fts5(x)"),
            ("the FTS5 trigram tokenizer",
             "CREATE VIRTUAL TABLE temp.hermes_probe_tri USING fts5(x, tokenize='trigram')"),
            ("JSON functions", "SELECT json_valid('{}')"),
        ):
            try:
                conn.execute(sql)
            except module.Error:
                lacks.append(what)
        return ", ".join(lacks)
    finally:
        conn.close()


#: the name :func:`use` chose, and why
_chosen_in_code: tuple[str, str] | None = None
_choice_lock = threading.Lock()


def _check_name(name: str, source: str) -> None:
    from ...errors import SQLiteLibraryError

    if name not in _MODULES:
        raise SQLiteLibraryError(
            f"{source}={name!r} names no SQLite library hermes_store knows: use "
            f"{' or '.join(_MODULES)}")


def use(name: str, *, why: str = "") -> None:
    """Run this process's stores on ``name`` ("sqlite3" or "pysqlite3"), whatever
    ``HERMES_STATE_SQLITE_MODULE`` says. Call it before the first store opens.

    Choose ``pysqlite3`` only for a process you own whole: if any code in it opens
    ``state.db`` with the standard library's ``sqlite3``, the two copies of SQLite drop
    each other's file locks (docs/operations.md, "Which SQLite"). Once a store has
    opened, asking for another library raises ``SQLiteLibraryError``; asking for the
    one in use is a no-op."""
    global _chosen_in_code
    from ...errors import SQLiteLibraryError

    _check_name(name, "use_sqlite_library")
    with _choice_lock:
        if library.cache_info().currsize:
            current = library()
            if current.name != name:
                raise SQLiteLibraryError(
                    f"hermes_store already runs on {current.describe()} in this process "
                    f"(chosen by {current.chosen_by}); {name} was asked for too late"
                    f"{f' ({why})' if why else ''}: choose the library before the first "
                    "store opens")
            return
        env = os.environ.get(ENV, "").strip()
        if env and env != name:
            log.warning("%s=%s is overridden: this process runs on %s%s", ENV, env, name,
                        f" ({why})" if why else "")
        _chosen_in_code = (name, why)


@functools.lru_cache(maxsize=None)
def library() -> Library:
    """The library this process runs on, chosen once (see the module docstring)."""
    from ...errors import SQLiteLibraryError

    if _chosen_in_code is not None:
        name, chosen_by = _chosen_in_code[0], "argument"
    else:
        name, chosen_by = os.environ.get(ENV, "").strip(), "environment"
        if name:
            _check_name(name, ENV)
        else:
            name, chosen_by = DEFAULT, "default"
    module = _import(name)
    if module is None:
        raise SQLiteLibraryError(
            f"{name} was chosen ({chosen_by}) but cannot be imported here: {EXTRA_HINT}, "
            f"or choose sqlite3 (unset {ENV})")
    lib = Library(name, module, tuple(module.sqlite_version_info), chosen_by,
                  _missing(module))
    if name != "sqlite3":
        log.info("hermes_store runs on %s; %s", lib.describe(), HAZARD)
    return lib


def dbapi() -> ModuleType:
    """The DB-API module every SQLite connection of the package comes from."""
    return library().module


def connect(database, **kwargs):
    """A raw connection from the chosen library (``sqlite3.connect``'s arguments), with
    SQLite's automatic checkpoints off: a checkpoint that runs without the writer lock
    can meet the WAL-reset race on an affected library, so the store's connections only
    ever checkpoint through ``engine.checkpoint`` (decision D19)."""
    conn = dbapi().connect(database, **kwargs)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


class _ChosenModule:
    """``sqlite3`` for a module's own use, resolved on first use (so importing the
    package never chooses, nor fails on a bad ``HERMES_STATE_SQLITE_MODULE``): every
    attribute is the chosen library's (``Error``, ``Row``…), and ``connect`` is
    :func:`connect`."""

    __slots__ = ()
    connect = staticmethod(connect)

    def __getattr__(self, name: str):
        return getattr(dbapi(), name)

    def __repr__(self) -> str:
        return "<the SQLite DB-API module hermes_store runs on>"


#: ``from .library import SQLITE as sqlite3``: the chosen DB-API module, looked up lazily
SQLITE = _ChosenModule()


def check_capabilities() -> Library:
    """The chosen library, or ``SQLiteLibraryError`` naming it and what it lacks."""
    from ...errors import SQLiteLibraryError

    lib = library()
    if lib.missing:
        raise SQLiteLibraryError(
            f"the SQLite library {lib.describe()} lacks {lib.missing}, which the store's "
            f"full-text search needs: use a Python whose sqlite3 has FTS5 with the "
            f"trigram tokenizer (SQLite 3.34+), or {EXTRA_HINT} in a process that "
            "opens state.db only through the store"
        )
    return lib


def is_index_problem(line: str) -> bool:
    """Whether an integrity-check row is about a full-text index (derived data)."""
    return "fts5" in line.lower()


def integrity_problems(conn, pragma: str = "quick_check", limit: int = 100) -> tuple[list[str], list[str]]:
    """``PRAGMA quick_check`` (or ``integrity_check``) on a DB-API connection, split into
    (structural problems, full-text index problems); ``([], [])`` for a whole file.

    SQLite 3.44 and later check FTS5 tables in these pragmas too, and report an index
    that is out of step with its content as "malformed inverted index for FTS5 table …"
    — e.g. a trigram index an older SQLite built over text holding a NUL, which it
    tokenized only up to the NUL (upstream's multimodal ``\\x00json:`` rows). The
    full-text indexes are derived data, rebuilt from ``messages`` (migrations do,
    ``maintenance doctor --fix`` does): damage there is not damage to the file. Older
    libraries never report these lines, so the split keeps both libraries' verdicts on
    the file the same.
    """
    rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
    if rows == ["ok"]:
        return [], []
    structural = [r for r in rows if not is_index_problem(r)]
    fts = [r for r in rows if is_index_problem(r)]
    return structural, fts
