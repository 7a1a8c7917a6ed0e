"""Which database: a SQLite file path or a SQLAlchemy URL, resolved once (decision D11).

Every entry point (``SessionDB``, ``hermes-store --db``, ``alembic -x db=``,
``hermes_store.migrate``) hands what it was given to :func:`resolve`:

* a path (``str`` or ``os.PathLike``) → that SQLite file;
* a URL (``scheme://…``, or a :class:`sqlalchemy.engine.URL`) → SQLite
  (``sqlite:///PATH``) or PostgreSQL (``postgresql+psycopg://user:pass@host/db``;
  ``postgresql://`` and ``postgres://`` mean the same, psycopg 3 being the one driver);
* nothing → ``$HERMES_STATE_DATABASE_URL`` when set (it must be a URL), else
  ``$HERMES_HOME/state.db``, else ``~/.hermes/state.db`` — read at call time.

A URL is never taken for a path (``postgresql+psycopg://…`` once became a directory
named ``postgresql+psycopg:``), and a URL that cannot be used is an error, never a
silent fall back to SQLite. Errors (``hermes_store.errors``) name the URL with its
password masked and say what to do: :class:`~hermes_store.errors.DatabaseURLError`,
:class:`~hermes_store.errors.UnsupportedBackendError`,
:class:`~hermes_store.errors.DriverMissingError` (from the target's backend,
``Backend.require_driver``, where a tool opens it).

Nothing here connects or imports a driver: resolving is pure, so a default (SQLite-only)
install never imports psycopg.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple, Union

import sqlalchemy as sa
from sqlalchemy.engine import URL

from .errors import DatabaseURLError, UnsupportedBackendError
from .paths import default_db_path, expand_home
from .patterns import LazyPattern

#: names a URL when no path or URL is given (the name upstream's PR #88889 uses)
URL_ENV = "HERMES_STATE_DATABASE_URL"

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
#: the one PostgreSQL driver (psycopg 3), and the extra that installs it
PG_DRIVER = "psycopg"
PG_DRIVERNAME = f"{POSTGRESQL}+{PG_DRIVER}"
PG_EXTRA_HINT = "pip install 'hermes_store[postgres]'"
_SUPPORTED = (
    "hermes_store supports SQLite files (a path, or sqlite:///PATH) and PostgreSQL "
    f"({PG_DRIVERNAME}://USER:PASSWORD@HOST:PORT/DATABASE)"
)

#: what makes a string a URL rather than a path: ``scheme://``
_URL_SCHEME = LazyPattern(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
#: a path component that is a URL's scheme: what ``Path("postgresql+psycopg://h/db")``
#: keeps of a URL (the "//" collapses), e.g. after a CLI parsed ``--db`` as a path
_SCHEME_COMPONENT = LazyPattern(
    r"^(postgres|postgresql|sqlite|mysql|mariadb|oracle|mssql|cockroachdb)(\+\w+)?:$", re.I
)
#: the password part of something URL-shaped that SQLAlchemy could not parse
_PASSWORD = LazyPattern(r"(:/+[^/:@?#]*:)[^@/?#]*(@)")

Given = Union[str, os.PathLike, URL, "Target", None]


class Target(NamedTuple):
    """A resolved database: ``backend`` names its engine (``hermes_store.backends``):
``"sqlite"`` (``path`` set) or ``"postgresql"``.

    ``url`` is the SQLAlchemy URL to connect with (its password is real: never print
    it; ``str(target)`` and ``display`` mask it). ``source`` says where it came from:
    ``"argument"``, ``"HERMES_STATE_DATABASE_URL"`` or ``"default"``.
    """

    backend: str
    url: URL
    path: Path | None = None
    source: str = "argument"

    @property
    def is_sqlite(self) -> bool:
        """For callers of the package; the package itself asks the backend it resolved
        when it opened the target (``backends.base.get(target.backend)``)."""
        return self.backend == SQLITE

    @property
    def is_postgresql(self) -> bool:
        """For callers of the package; the package itself asks the backend it resolved
        when it opened the target (``backends.base.get(target.backend)``)."""
        return self.backend == POSTGRESQL

    @property
    def is_file(self) -> bool:
        """A store that is one file at a path (a SQLite file), rather than a database
        on a server."""
        return self.path is not None

    @property
    def is_server(self) -> bool:
        """A database on a server (not a file at a path)."""
        return self.path is None

    @property
    def display(self) -> str:
        """How messages name it: the file path, or the URL with ``***`` for a password."""
        return str(self.path) if self.path is not None else mask(self.url)

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"Target({self.backend}, {self.display!r}, source={self.source!r})"


def looks_like_url(text: str) -> bool:
    """True for ``scheme://…``: such a string is a URL, never a file name."""
    return bool(_URL_SCHEME.match(text))


def mask(url: str | URL) -> str:
    """The URL as text with its password replaced by ``***`` (also for unparsable text)."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    return _PASSWORD.sub(r"\1***\2", url)


def resolve(given: Given = None) -> Target:
    """The database that ``given`` names (see module docstring)."""
    if isinstance(given, Target):
        return given
    if given is None:
        env = os.environ.get(URL_ENV, "").strip()
        if env:
            if not looks_like_url(env):
                raise DatabaseURLError(
                    f"{URL_ENV}={mask(env)!s} is not a URL; set it to sqlite:////PATH/state.db "
                    f"or {PG_DRIVERNAME}://USER:PASSWORD@HOST/DATABASE, or unset it to use "
                    f"{default_db_path()}"
                )
            return _from_url(env, source=URL_ENV)
        return _sqlite(default_db_path(), source="default")
    if isinstance(given, URL):
        return _from_url(given, source="argument")
    if isinstance(given, os.PathLike):
        return _sqlite(Path(given), source="argument")
    if isinstance(given, str):
        if looks_like_url(given):
            return _from_url(given, source="argument")
        if not given.strip():
            raise DatabaseURLError("an empty string is neither a database path nor a URL")
        return _sqlite(Path(given), source="argument")
    raise TypeError(f"a database is a path or a URL, not {type(given).__name__}")


def _sqlite(path: Path, *, source: str) -> Target:
    path = expand_home(path).absolute()  # only ~ and ~/ mean home (paths.expand_home)
    if any(_SCHEME_COMPONENT.match(part) for part in path.parts):
        raise DatabaseURLError(
            f"{mask(str(path))} looks like a database URL that was turned into a file path "
            "(a directory named after a URL scheme would be created); pass the URL as "
            "text, e.g. postgresql+psycopg://USER:PASSWORD@HOST/DATABASE"
        )
    return Target(SQLITE, URL.create("sqlite+pysqlite", database=str(path)), path, source)


def _from_url(text: str | URL, *, source: str) -> Target:
    shown = mask(text)
    try:
        url = text if isinstance(text, URL) else sa.engine.make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise DatabaseURLError(
            f"{shown} is not a valid database URL ({_without_url(exc, text)}); {_SUPPORTED}"
        ) from None
    backend, _, driver = url.drivername.partition("+")
    if backend == SQLITE:
        if driver not in ("", "pysqlite"):
            raise UnsupportedBackendError(
                f"{shown}: the SQLite driver {driver!r} is not supported; use sqlite:///PATH"
            )
        if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
            raise DatabaseURLError(
                f"{shown} names no database file (an in-memory or URI-form SQLite database "
                "cannot hold a store); use sqlite:///PATH or a plain path"
            )
        if url.query or (isinstance(text, str) and "?" in text):
            # sqlite:////x/c?d/state.db is the file /x/c (SQLAlchemy drops a query item
            # without "="): never guess what was meant
            raise DatabaseURLError(
                f"{shown}: in a URL, '?' ends the file name and starts a query, so this names "
                f"the file {url.database}; write '?' in a file name as %3F, or pass the plain "
                "path instead of a URL"
            )
        return _sqlite(Path(url.database), source=source)
    if backend in (POSTGRESQL, "postgres"):
        if driver not in ("", PG_DRIVER):
            raise UnsupportedBackendError(
                f"{shown}: the PostgreSQL driver {driver!r} is not supported; hermes_store uses "
                f"psycopg 3: write the URL as {PG_DRIVERNAME}://… ({PG_EXTRA_HINT})"
            )
        if not url.database:
            raise DatabaseURLError(
                f"{shown} names no database; add it to the URL's path: "
                f"{PG_DRIVERNAME}://USER:PASSWORD@HOST:PORT/DATABASE"
            )
        return Target(POSTGRESQL, url.set(drivername=PG_DRIVERNAME), None, source)
    raise UnsupportedBackendError(f"{shown}: the database {backend!r} is not supported; {_SUPPORTED}")


def _without_url(exc: Exception, text: str | URL) -> str:
    """SQLAlchemy's message, minus any copy of the (unmasked) URL it quotes."""
    message = str(exc)
    if isinstance(text, str) and text in message:
        message = message.replace(text, mask(text))
    return message


def upgrade_hint(target: Target) -> str:
    """The commands that bring ``target`` to head (for 'below head' errors)."""
    arg = target.display if target.is_file else f"'{target.display}'"
    where = "" if target.source != "argument" else f" --db {arg}"
    alembic_x = "" if target.source != "argument" else f" -x db={arg}"
    masked = " (put the real password where the URL shows ***)" if (
        not target.is_file and target.url.password and target.source == "argument") else ""
    return (f"run `hermes-store{where} db upgrade` (or `alembic{alembic_x} upgrade head`)"
            f"{masked}")


__all__ = [
    "PG_DRIVERNAME",
    "PG_EXTRA_HINT",
    "POSTGRESQL",
    "SQLITE",
    "Target",
    "URL_ENV",
    "looks_like_url",
    "mask",
    "resolve",
    "upgrade_hint",
]
