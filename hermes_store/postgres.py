"""PostgreSQL connections: the engine factory, the NUL-safe text codec, error
translation and the migration lock (decisions D11–D13).

Everything here is specific to PostgreSQL and psycopg 3, and is imported only when a
PostgreSQL URL is used (a default install never imports psycopg).

``create_engine(target, …) -> Engine``
    A pooled engine (``pool_pre_ping``, sizes configurable) whose connections carry
    the text codec below and ``application_name=hermes_store``.
``encode_text(s)`` / ``decode_text(s)``
    The NUL encoding (below), exposed for tools that bypass the driver (``psql``).
``translate_error(exc, target)`` / ``pg_errors(target)``
    Driver errors → the package's errors, which name the URL (password masked) and say
    what to do: unreachable server, refused login, missing database, lost connection.
``migration_lock(engine)``
    ``pg_advisory_lock`` held by a connection of its own for the duration of a
    migration run, so two deploys cannot migrate the same database at once.
``check_server(conn, target)``
    Refuse a server the store cannot run on (PostgreSQL < 15, a non-UTF8 database,
    no ``pg_trgm``), with what to do.

The NUL encoding. PostgreSQL ``text`` cannot hold U+0000, which SQLite stores without
fuss (and the messages concern writes ``"\\x00json:" + JSON`` for multimodal content).
Every Python ``str`` sent to PostgreSQL goes through one reversible substitution, and
every ``text``/``varchar`` value read back goes through its inverse:

    U+0001 → U+0001 U+0001        U+0000 → U+0001 U+0002

A string without U+0000 and U+0001 — nearly all — is sent and read unchanged (one
``in`` test each way). The substitution is applied per character, so it keeps
equality, ``LIKE`` patterns and substring search over ordinary text exact. It lives at
the driver's type level (psycopg dumpers and loaders, installed on each connection by
the engine's connect hook) rather than in SQLAlchemy column types, so that it covers
every path a string can take — Core statements, ``exec_driver_sql``, the prebuilt
statements and ``COPY`` — and SQLite connections never see it (no cost, bytes
untouched). A tool that reads the database without hermes_store sees the escaped
form; :func:`decode_text` undoes it.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from . import errors
from .location import Target, require_driver

#: the oldest server supported (D11: PostgreSQL 15 or newer)
MIN_SERVER_VERSION = 150000
#: extensions the head schema needs (shipped in postgresql-contrib)
REQUIRED_EXTENSIONS = ("pg_trgm",)
#: key of the session-level advisory lock that serializes migrations of one database
#: (the first 8 bytes of sha256("hermes_store.migrate"), as a signed bigint)
MIGRATION_LOCK_KEY = 0x71C0_72E3_634B_4E80
APPLICATION_NAME = "hermes_store"
DEFAULT_CONNECT_TIMEOUT = 10

# --------------------------------------------------------------------------- NUL codec

_ESCAPE = "\x01"
_ESCAPED = re.compile("\x01([\x01\x02])")


def encode_text(value: str) -> str:
    """``value`` as stored on PostgreSQL (see module docstring)."""
    if "\x00" not in value and _ESCAPE not in value:
        return value
    return value.replace(_ESCAPE, "\x01\x01").replace("\x00", "\x01\x02")


def _unescape(match: re.Match) -> str:
    return _ESCAPE if match.group(1) == _ESCAPE else "\x00"


def decode_text(value: str) -> str:
    """The inverse of :func:`encode_text` (a lone U+0001, which it never writes, stays)."""
    if _ESCAPE not in value:
        return value
    return _ESCAPED.sub(_unescape, value)


def _codec_adapters():
    """psycopg dumper/loader classes applying the codec (built on first use: psycopg
    is imported only when PostgreSQL is)."""
    from psycopg.types import string as pg_string

    def dumper(base):
        class NulSafe(base):
            def dump(self, obj):
                return super().dump(encode_text(obj))

        NulSafe.__name__ = f"NulSafe{base.__name__}"
        return NulSafe

    def loader(base):
        class NulSafe(base):
            def load(self, data):
                text = super().load(data)
                return decode_text(text) if _ESCAPE in text else text

        NulSafe.__name__ = f"NulSafe{base.__name__}"
        return NulSafe

    # Registration order matters: per format, the last dumper registered for ``str`` is
    # the default; psycopg's own order ends with the text-format "unknown" dumper.
    dumpers = [dumper(getattr(pg_string, name)) for name in (
        "StrBinaryDumperVarchar", "StrBinaryDumper",
        "StrDumperVarchar", "StrDumper", "StrDumperUnknown",
    )]
    text_loader = loader(pg_string.TextLoader)
    binary_loader = loader(pg_string.TextBinaryLoader)
    return dumpers, text_loader, binary_loader


_adapters = None


def install_text_codec(dbapi_conn) -> None:
    """Make one psycopg connection apply the NUL codec to every string."""
    global _adapters
    if _adapters is None:
        _adapters = _codec_adapters()
    dumpers, text_loader, binary_loader = _adapters
    adapters = dbapi_conn.adapters
    for dumper in dumpers:
        adapters.register_dumper(str, dumper)
    for type_name in ("text", "varchar"):
        adapters.register_loader(type_name, text_loader)
        adapters.register_loader(type_name, binary_loader)


# --------------------------------------------------------------------------- engine


def create_engine(
    target: Target,
    *,
    pool_size: int = 5,
    max_overflow: int = 10,
    pool_pre_ping: bool = True,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    poolclass=None,
) -> Engine:
    """A pooled engine for a PostgreSQL target (``DriverMissingError`` without psycopg)."""
    if not target.is_postgresql:
        raise ValueError(f"{target.display} is not a PostgreSQL database")
    require_driver(target)
    connect_args = {}
    if "connect_timeout" not in target.url.query:
        connect_args["connect_timeout"] = connect_timeout
    if "application_name" not in target.url.query:
        connect_args["application_name"] = APPLICATION_NAME
    # Text is UTF-8 both ways, whatever the server's default (a SQL_ASCII database would
    # otherwise hand back bytes; check_server then refuses it with a clear message).
    connect_args["client_encoding"] = "utf8"
    kwargs = {"poolclass": poolclass} if poolclass is not None else {
        "pool_size": pool_size, "max_overflow": max_overflow,
    }
    engine = sa.create_engine(
        target.url, connect_args=connect_args, pool_pre_ping=pool_pre_ping, **kwargs
    )
    event.listen(engine, "connect", _on_connect)
    return engine


def _on_connect(dbapi_conn, _record) -> None:
    install_text_codec(dbapi_conn)


# --------------------------------------------------------------------------- errors

# Connection errors carry no SQLSTATE in psycopg (libpq reports them as text), so the
# server's and libpq's (English) texts decide; anything else at connect is "unreachable".
_MISSING_DATABASE = re.compile(r'database "[^"]*" does not exist')
_ACCESS_DENIED = re.compile(
    r"password authentication failed|role \"[^\"]*\" does not exist|no pg_hba\.conf entry"
    r"|permission denied|authentication failed|password|SSL .*required",
    re.IGNORECASE,
)
_CONNECTION_LOST = re.compile(
    r"server closed the connection|terminating connection|connection (is )?(bad|closed|lost)"
    r"|consuming input failed|could not receive data|server conn crashed",
    re.IGNORECASE,
)


def _driver_error(exc: BaseException) -> BaseException:
    return getattr(exc, "orig", None) or exc


def translate_error(exc: BaseException, target: Target) -> errors.HermesStoreError | None:
    """Map a psycopg (or SQLAlchemy-wrapped) error to the package's, or None."""
    orig = _driver_error(exc)
    module = type(orig).__module__ or ""
    if not module.startswith("psycopg"):
        return None
    text = " ".join(str(orig).split())
    sqlstate = getattr(orig, "sqlstate", None) or ""
    where = target.display
    if _MISSING_DATABASE.search(text) or sqlstate == "3D000":
        return errors.StoreNotFoundError(
            f"{where}: the database does not exist on that server ({text}); create it "
            "(`createdb NAME`, or CREATE DATABASE NAME), then run `hermes-store db upgrade` "
            "to create the schema"
        )
    if sqlstate.startswith("28") or (
        not sqlstate and "connection failed" in text and _ACCESS_DENIED.search(text)
    ):
        return errors.DatabaseAccessError(
            f"{where}: the server refused the login ({text}); check the user name and "
            "password in the URL and the server's pg_hba.conf"
        )
    if sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03") or (
        not sqlstate and (_CONNECTION_LOST.search(text) or "connection" in text.lower()
                          or "resolve host" in text)
    ):
        return errors.ServerUnreachableError(
            f"cannot reach the PostgreSQL server of {where} ({text}); check that the server "
            "is running and that host, port and network in the URL are right"
        )
    if sqlstate == "53300":
        return errors.ServerUnreachableError(
            f"{where}: the server has no free connection slot ({text}); lower the pool "
            "sizes of the processes sharing it or raise max_connections"
        )
    return None


@contextlib.contextmanager
def pg_errors(target: Target) -> Iterator[None]:
    """Re-raise driver errors as the package's errors (see :func:`translate_error`)."""
    try:
        yield
    except (sa.exc.DBAPIError, sa.exc.InterfaceError) as exc:
        mapped = translate_error(exc, target)
        if mapped is None:
            raise
        raise mapped from exc
    except Exception as exc:  # psycopg errors raised outside SQLAlchemy
        mapped = translate_error(exc, target)
        if mapped is None:
            raise
        raise mapped from exc


# --------------------------------------------------------------------------- server


def check_server(conn: sa.Connection, target: Target) -> None:
    """Refuse a server or database the schema cannot live on, saying what to do."""
    version = int(conn.exec_driver_sql("SHOW server_version_num").scalar())
    if version < MIN_SERVER_VERSION:
        shown = conn.exec_driver_sql("SHOW server_version").scalar()
        raise errors.UnsupportedServerError(
            f"{target.display}: PostgreSQL {shown} is too old; hermes_store needs "
            "PostgreSQL 15 or newer"
        )
    encoding = conn.exec_driver_sql("SHOW server_encoding").scalar()
    if encoding != "UTF8":
        raise errors.UnsupportedServerError(
            f"{target.display}: the database's encoding is {encoding}, not UTF8; create it "
            "with CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0"
        )
    available = set(conn.exec_driver_sql(
        "SELECT name FROM pg_available_extensions WHERE name = ANY(%(names)s)",
        {"names": list(REQUIRED_EXTENSIONS)},
    ).scalars())
    missing = [e for e in REQUIRED_EXTENSIONS if e not in available]
    if missing:
        raise errors.UnsupportedServerError(
            f"{target.display}: the server lacks the extension(s) {', '.join(missing)}; "
            "install PostgreSQL's contrib package (Debian/Ubuntu: postgresql-contrib)"
        )


@contextlib.contextmanager
def migration_lock(engine: Engine, key: int = MIGRATION_LOCK_KEY) -> Iterator[None]:
    """Hold ``pg_advisory_lock(key)`` on a connection of its own for the block.

    Alembic picks the steps to run from the version it reads first, so two deploys
    migrating at once would both run the same step; the second waits here instead,
    then finds the work done. The lock belongs to the session: if the process dies,
    the server drops it with the connection.
    """
    with engine.connect() as lock_conn:
        lock_conn = lock_conn.execution_options(isolation_level="AUTOCOMMIT")
        lock_conn.exec_driver_sql("SELECT pg_advisory_lock(%(key)s)", {"key": key})
        try:
            yield
        finally:
            lock_conn.exec_driver_sql("SELECT pg_advisory_unlock(%(key)s)", {"key": key})


__all__ = [
    "MIGRATION_LOCK_KEY",
    "MIN_SERVER_VERSION",
    "check_server",
    "create_engine",
    "decode_text",
    "encode_text",
    "install_text_codec",
    "migration_lock",
    "pg_errors",
    "translate_error",
]
