"""Which SQLite library the store runs on: the one source of truth for "which sqlite3".

SQLite 3.7.0 through 3.51.2 can corrupt a WAL database when two connections checkpoint
back to back while a third commits (the WAL-reset bug, fixed in 3.51.3, 2026-03-13:
sqlite.org/wal.html#walresetbug). A store's normal life is exactly that: several
processes writing, each checkpointing every 50 units. The interpreter's ``sqlite3``
links whatever SQLite the OS ships (3.40.1 on Debian 12), so by default the store runs
on ``pysqlite3`` (a dependency where a wheel with a fixed SQLite exists: 0.6.1 bundles
3.53.4 with FTS5 and the trigram tokenizer) and on the standard library elsewhere.

Every module of the package that opens SQLite itself — the engine (SQLAlchemy's pysqlite
dialect, given this module), the probes, migrations, recovery, repairs — asks
``dbapi()``. That is not only tidiness: two SQLite libraries in one process keep two
separate tables of POSIX locks, and closing a file in one drops the locks the other
holds on it (sqlite.org/howtocorrupt.html, "multiple copies of SQLite linked into the
same application").

``HERMES_STATE_SQLITE_MODULE`` picks one explicitly: ``pysqlite3`` or ``sqlite3`` (the
standard library; what CI's stdlib leg runs). Unset, a process that shares its files
with code of its own on one library says so first (``prefer``: hermes-agent opens
``state.db`` with the standard library's ``sqlite3`` too, so the switch asks for
it); otherwise the first of ``pysqlite3``, ``sqlite3`` that can run the head schema
(FTS5, trigram, JSON) and has the fix wins; when none has it, the newest capable one.

``library() -> Library``  the chosen library (name, module, version, fix, how chosen)
``dbapi()``               its DB-API module (``connect``, ``Error``, ``OperationalError``…)
``connect(database, **kwargs)``  a raw connection from it
``check_capabilities(conn=None)``  raise ``SQLiteLibraryError`` naming the library when
                          FTS5, the trigram tokenizer or JSON functions are missing
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from typing import NamedTuple
from types import ModuleType

log = logging.getLogger("hermes_store.backends.sqlite")

#: picks the library: "pysqlite3" or "sqlite3"; unset = automatic
ENV = "HERMES_STATE_SQLITE_MODULE"
#: the first SQLite release with the WAL-reset fix
WAL_RESET_FIX = (3, 51, 3)
#: what to install on an affected library (the environment marker in pyproject.toml
#: gives it to platforms with a wheel)
INSTALL_HINT = "pip install 'pysqlite3>=0.6.1'"
#: name -> the module that holds its DB-API
_MODULES = {"pysqlite3": "pysqlite3.dbapi2", "sqlite3": "sqlite3"}
_AUTO_ORDER = ("pysqlite3", "sqlite3")


class Library(NamedTuple):
    """A SQLite DB-API module and the SQLite it links."""

    name: str
    module: ModuleType
    version: tuple[int, ...]
    #: "environment" (``HERMES_STATE_SQLITE_MODULE``), "preferred" (``prefer``) or
    #: "automatic"
    chosen_by: str
    #: what the head schema needs and this library lacks ("" when it has everything)
    missing: str = ""

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def has_wal_reset_fix(self) -> bool:
        return tuple(self.version[:3]) >= WAL_RESET_FIX

    def advice(self) -> str | None:
        """What to do on an affected library (None on a fixed one)."""
        if self.has_wal_reset_fix:
            return None
        fixed = ".".join(map(str, WAL_RESET_FIX))
        return (f"SQLite {self.version_text} (through {self.name}) has the WAL-reset bug "
                f"(fixed in {fixed}): {INSTALL_HINT}, or a Python linked with SQLite "
                f"{fixed} or newer; until then the store keeps WAL (see docs/operations.md)")

    def describe(self) -> str:
        """``pysqlite3 (SQLite 3.53.4, has the WAL-reset fix)``"""
        state = "has the WAL-reset fix" if self.has_wal_reset_fix else "affected by the WAL-reset bug"
        return f"{self.name} (SQLite {self.version_text}, {state})"

    def summary(self) -> str:
        """One line for ``status``: what :meth:`describe` says, and what to install."""
        text = self.describe()
        return text if self.has_wal_reset_fix else f"{text[:-1]}: {INSTALL_HINT})"

    def as_dict(self) -> dict:
        return {"name": self.name, "sqlite_version": self.version_text,
                "wal_reset_fix": self.has_wal_reset_fix, "chosen_by": self.chosen_by,
                "advice": self.advice(), "summary": self.summary()}


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


def _library(name: str, module: ModuleType, chosen_by: str) -> Library:
    return Library(name, module, tuple(module.sqlite_version_info), chosen_by, _missing(module))


#: ``prefer``'s (name, why), consulted when ``HERMES_STATE_SQLITE_MODULE`` is unset
_preferred: tuple[str, str] | None = None


def prefer(name: str, why: str) -> None:
    """Run this process on ``name`` unless ``HERMES_STATE_SQLITE_MODULE`` names one: for a
    process whose own code opens the store's files with that library (two libraries in
    one process drop each other's locks on a shared file). Call it before the store is
    first used; later, a different choice already made is only logged."""
    global _preferred
    if name not in _MODULES:
        raise ValueError(f"no SQLite library named {name!r}: use {' or '.join(_MODULES)}")
    _preferred = (name, why)
    if library.cache_info().currsize and not os.environ.get(ENV, "").strip():
        chosen = library()
        if chosen.name != name:
            log.warning("hermes_store already runs on %s in this process; %s was asked for "
                        "too late (%s)", chosen.name, name, why)


@functools.lru_cache(maxsize=None)
def library() -> Library:
    """The library this process runs on, chosen once (see the module docstring)."""
    from ...errors import SQLiteLibraryError

    wanted = os.environ.get(ENV, "").strip()
    chosen_by = "environment"
    if not wanted and _preferred is not None:
        wanted, chosen_by = _preferred[0], "preferred"
    if wanted:
        if wanted not in _MODULES:
            raise SQLiteLibraryError(
                f"{ENV}={wanted!r} names no SQLite library hermes_store knows: use "
                f"{' or '.join(_MODULES)}, or unset it"
            )
        module = _import(wanted)
        if module is None:
            raise SQLiteLibraryError(
                f"{ENV}={wanted} but {wanted} cannot be imported here: {INSTALL_HINT}, or unset {ENV}"
            )
        return _library(wanted, module, chosen_by)
    found = []
    for name in _AUTO_ORDER:  # lazily: the standard library's is not imported needlessly
        module = _import(name)
        if module is None:
            continue
        lib = _library(name, module, "automatic")
        if not lib.missing and lib.has_wal_reset_fix:
            return lib
        found.append(lib)
    if not found:  # pragma: no cover - the standard library always has one
        raise SQLiteLibraryError(f"no SQLite library can be imported: {INSTALL_HINT}")
    capable = [lib for lib in found if not lib.missing] or found
    return max(capable, key=lambda lib: lib.version)  # ties: the earlier (pysqlite3)


def dbapi() -> ModuleType:
    """The DB-API module every SQLite connection of the package comes from."""
    return library().module


class _ChosenModule:
    """``sqlite3`` for a module's own use, resolved on first use (so importing the
    package never chooses, nor fails on a bad ``HERMES_STATE_SQLITE_MODULE``): every
    attribute is the chosen library's (``connect``, ``Error``, ``Row``…)."""

    __slots__ = ()

    def __getattr__(self, name: str):
        return getattr(dbapi(), name)

    def __repr__(self) -> str:
        return "<the SQLite DB-API module hermes_store runs on>"


#: ``from .library import SQLITE as sqlite3``: the chosen DB-API module, looked up lazily
SQLITE = _ChosenModule()


def connect(database, **kwargs):
    """A raw connection from the chosen library (``sqlite3.connect``'s arguments)."""
    return dbapi().connect(database, **kwargs)


@functools.lru_cache(maxsize=None)
def warn_if_affected() -> None:
    """Log once per process when the library has the WAL-reset bug (the store still
    runs, in WAL: see docs/operations.md, "Which SQLite")."""
    advice = library().advice()
    if advice:
        log.warning("%s", advice)


def check_capabilities() -> Library:
    """The chosen library, or ``SQLiteLibraryError`` naming it and what it lacks."""
    from ...errors import SQLiteLibraryError

    lib = library()
    if lib.missing:
        raise SQLiteLibraryError(
            f"the SQLite library {lib.describe()} lacks {lib.missing}, which the store's "
            f"full-text search needs: {INSTALL_HINT} (or use a Python whose sqlite3 has "
            "FTS5 with the trigram tokenizer)"
        )
    return lib


def _is_fts_problem(line: str) -> bool:
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
    structural = [r for r in rows if not _is_fts_problem(r)]
    fts = [r for r in rows if _is_fts_problem(r)]
    return structural, fts
