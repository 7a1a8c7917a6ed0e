"""PostgreSQL connections: the engine factory, the NUL-safe text codec, error
translation and the migration lock (decisions D11–D13).

Everything here is specific to PostgreSQL and psycopg 3, and is imported only when a
PostgreSQL URL is used (a default install never imports psycopg).

``create_engine(target, …) -> Engine``
    A pooled engine (sizes configurable) whose connections carry the text codec below
    and ``application_name=hermes_store``, and are checked at checkout
    (:func:`_check_on_checkout`): a session the server ended is replaced, and a
    connection idle for longer than ``PING_AFTER_IDLE`` is pinged first.
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
import select
import time
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
        # called once per text value read: one Python frame (psycopg's own TextLoader
        # is Python too; calling it through super() cost a second one)
        class NulSafe(base):
            def load(self, data):
                if not self._encoding:  # SQL_ASCII: bytes (check_server refuses it)
                    return super().load(data)
                text = str(data, self._encoding)
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

#: Whether a store keeps one connection per thread (``engine.HeldConnections``) on
#: PostgreSQL as it does on SQLite. It does not: see docs/postgres.md, "Connections".
HOLD_CONNECTIONS = False

#: URL query keys that size the pool: taken out of the URL (psycopg would refuse them)
#: and handed to SQLAlchemy's pool, so a ``--db URL`` can size it too
POOL_QUERY_KEYS = ("pool_size", "max_overflow", "pool_timeout")
DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10
#: execution option read by the begin hook (the same name and values as engine.py's:
#: "IMMEDIATE" a write unit, "DEFERRED" a read snapshot, None no transaction)
BEGIN_MODE = "hermes_begin"


def pool_settings(target: Target, **given) -> tuple[Target, dict]:
    """The target without the pool keys of its URL query, and the pool's keyword
    arguments: an explicit argument wins over the URL, the URL over the defaults."""
    query = dict(target.url.query)
    settings: dict = {"pool_size": DEFAULT_POOL_SIZE, "max_overflow": DEFAULT_MAX_OVERFLOW}
    for key in POOL_QUERY_KEYS:
        if key in query:
            raw = query.pop(key)
            try:
                settings[key] = float(raw) if key == "pool_timeout" else int(raw)
            except (TypeError, ValueError):
                raise errors.DatabaseURLError(
                    f"{target.display}: {key}={raw!r} in the URL is not a number"
                ) from None
    settings.update({k: v for k, v in given.items() if v is not None})
    if len(query) != len(target.url.query):
        target = Target(target.backend, target.url.set(query=query), target.path, target.source)
    return target, settings


def create_engine(
    target: Target,
    *,
    pool_size: int | None = None,
    max_overflow: int | None = None,
    pool_timeout: float | None = None,
    pool_pre_ping: bool = False,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    poolclass=None,
    lock_timeout: float | None = None,
    read_only: bool = False,
) -> Engine:
    """A pooled engine for a PostgreSQL target (``DriverMissingError`` without psycopg).

    Pool sizes come from the arguments, else the URL's query (``?pool_size=10``), else
    5 + 10 overflow. ``lock_timeout`` (seconds) bounds every wait for a row or advisory
    lock: the wait ends with SQLSTATE 55P03, which the write-unit runner retries like
    SQLite's busy timeout. ``read_only`` makes every transaction of every connection
    read-only on the server (``default_transaction_read_only``), so a write that gets
    past the store's own check still fails.

    ``pool_pre_ping=True`` adds SQLAlchemy's ping (a round trip) to every checkout;
    by default the checkout check (:func:`_check_on_checkout`) pings only connections
    that sat idle for ``PING_AFTER_IDLE`` seconds.
    """
    if not target.is_postgresql:
        raise ValueError(f"{target.display} is not a PostgreSQL database")
    require_driver(target)
    target, pool = pool_settings(target, pool_size=pool_size, max_overflow=max_overflow,
                                 pool_timeout=pool_timeout)
    connect_args = {}
    if "connect_timeout" not in target.url.query:
        connect_args["connect_timeout"] = connect_timeout
    if "application_name" not in target.url.query:
        connect_args["application_name"] = APPLICATION_NAME
    # Text is UTF-8 both ways, whatever the server's default (a SQL_ASCII database would
    # otherwise hand back bytes; check_server then refuses it with a clear message).
    connect_args["client_encoding"] = "utf8"
    # Session settings travel in the startup packet: no round trip per new connection.
    settings = []
    if lock_timeout is not None:
        settings.append(f"-c lock_timeout={max(1, int(lock_timeout * 1000))}")
    if read_only:
        settings.append("-c default_transaction_read_only=on")
    if settings:
        given = target.url.query.get("options")
        connect_args["options"] = " ".join(([given] if given else []) + settings)
    kwargs = {"poolclass": poolclass} if poolclass is not None else pool
    engine = sa.create_engine(
        target.url, connect_args=connect_args, pool_pre_ping=pool_pre_ping, **kwargs
    )
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "checkout", _check_on_checkout)
    event.listen(engine, "checkin", _on_checkin)
    event.listen(engine, "begin", _begin_hook(read_only))
    return engine


def _on_connect(dbapi_conn, _record) -> None:
    install_text_codec(dbapi_conn)


#: seconds a pooled connection may sit unused before its checkout pings the server
#: (a round trip); one used more recently is only checked for the server's goodbye
PING_AFTER_IDLE = 1.0
#: key of the time a connection was last returned to the pool (its record's ``info``)
_RETURNED_AT = "hermes_store.returned_at"


def _on_checkin(_dbapi_conn, record) -> None:
    record.info[_RETURNED_AT] = time.monotonic()


def _check_on_checkout(dbapi_conn, record, _proxy) -> None:
    """Replace a pooled connection that is no longer usable, before a unit or read
    begins on it (decision D13: reconnect between units, never inside one).

    SQLAlchemy's pre-ping costs a round trip (``SELECT 1``) on every checkout, about as
    much as a small read. Instead: a session the server ended while the connection
    sat in the pool — a restart, ``pg_terminate_backend``, ``idle_session_timeout``,
    a crash — has left its goodbye and the end of the stream in the socket, which
    :func:`_server_goodbye` sees without a round trip; only a connection idle for
    ``PING_AFTER_IDLE`` seconds or more (what a silently broken network path needs:
    NAT and proxy idle timeouts are minutes) is pinged as well. Raising
    ``DisconnectionError`` makes the pool replace the connection and check again.
    """
    returned_at = record.info.get(_RETURNED_AT)
    if returned_at is None:
        return  # a new connection: just made by the pool
    why = _server_goodbye(dbapi_conn.pgconn)
    if why is None and time.monotonic() - returned_at >= PING_AFTER_IDLE:
        why = _ping(dbapi_conn)
    if why is not None:
        raise sa.exc.DisconnectionError(f"the server ended the session: {why}")


def _ping(dbapi_conn) -> str | None:
    """``SELECT 1`` outside any transaction; why it failed, or None."""
    import psycopg

    autocommit = dbapi_conn.autocommit
    try:
        dbapi_conn.autocommit = True
        dbapi_conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:  # the connection is gone
        return str(exc) or type(exc).__name__
    finally:
        if not dbapi_conn.closed:
            dbapi_conn.autocommit = autocommit
    return None


def _begin_hook(read_only_store: bool):
    """The transaction mode per ``hermes_begin`` (decision D13), set on the psycopg
    connection just before it sends its implicit BEGIN (attributes only, no round trip):

    * ``"IMMEDIATE"`` (a write unit): READ COMMITTED, read-write. Rows a statement changes
      are locked until COMMIT; what a unit reads then writes is kept consistent by the
      unit lock (:func:`lock_unit`) rather than by a stricter level, so appends to one
      session queue on its row instead of failing with serialization errors;
    * ``"DEFERRED"`` (a read snapshot): REPEATABLE READ, READ ONLY — one snapshot for
      every statement of the block (READ COMMITTED would take one per statement);
    * ``None``: autocommit, for a single statement (one round trip instead of three)
      and for maintenance that cannot run in a transaction (VACUUM);
    * no option: the server's defaults, unless SQLAlchemy's own ``isolation_level``
      option manages the connection (``migration_lock``'s autocommit).
    """
    from psycopg import IsolationLevel

    read_committed, repeatable_read = IsolationLevel.READ_COMMITTED, IsolationLevel.REPEATABLE_READ
    # None leaves the server default; on a read-only store that is "read only"
    writable = None if read_only_store else False

    def on_begin(conn) -> None:
        options = conn.get_execution_options()
        dbapi_conn = conn.connection.dbapi_connection
        if BEGIN_MODE not in options:
            if "isolation_level" in options:
                return
            mode = "DEFAULT"
        else:
            mode = options[BEGIN_MODE]
        if mode is None:
            if not dbapi_conn.autocommit:
                dbapi_conn.autocommit = True
            return
        if dbapi_conn.autocommit:
            dbapi_conn.autocommit = False
        if mode == "DEFERRED":
            dbapi_conn.isolation_level, dbapi_conn.read_only = repeatable_read, True
        elif mode == "IMMEDIATE":
            dbapi_conn.isolation_level, dbapi_conn.read_only = read_committed, writable
        else:
            dbapi_conn.isolation_level, dbapi_conn.read_only = None, writable

    return on_begin


#: key of the transaction-level advisory lock of write units (the first 8 bytes of
#: sha256("hermes_store.write_unit"), as a signed bigint); see :func:`lock_unit`
UNIT_LOCK_KEY = -0x3A9B_5C0E_1D27_64F3
# the key is part of the text: no parameter to bind, the same statement every time
_LOCK_EXCLUSIVE = f"SELECT pg_advisory_xact_lock({UNIT_LOCK_KEY})"
_LOCK_SHARED = f"SELECT pg_advisory_xact_lock_shared({UNIT_LOCK_KEY})"


def lock_unit(conn: sa.Connection, *, exclusive: bool) -> None:
    """The first statement of a write unit on PostgreSQL: the store's unit lock,
    held until the unit commits or rolls back.

    A unit takes it exclusively unless it declared itself ``concurrent``: then every
    unit that reads, decides and writes (a title claim, numbering, a cascade delete, an
    upsert that reads first) runs alone, exactly as every unit does on SQLite, while
    the hot units that only change rows through statements that lock them (appending
    messages) share it and run side by side. The lock queue is fair: a waiting
    exclusive unit is not starved by a stream of shared ones. Sent through the driver
    door (``engine.driver_execute``): it is on every write unit's path.
    """
    from .engine import driver_execute, uses_driver

    statement = _LOCK_EXCLUSIVE if exclusive else _LOCK_SHARED
    if uses_driver(conn.dialect):
        driver_execute(conn, statement, None)
    else:
        conn.exec_driver_sql(statement)


def session_ended(conn: sa.Connection) -> sa.exc.DBAPIError | None:
    """Whether the server has already ended the session of ``conn`` — sent its last
    message (a FATAL such as 57P01 at a restart or ``pg_terminate_backend``) and closed
    the socket — while the unit was idle between statements; asked just before COMMIT.

    Such a transaction was rolled back before COMMIT was sent, so the unit may be re-run
    like one whose connection broke mid-way: the error returned (``connection_invalidated``,
    the connection invalidated so the pool drops it) says so. Without this check the
    failure would first show at COMMIT and be reported as an unknown outcome. A session
    ended after the check, while COMMIT is on its way, still is one. One ``select()`` on
    the socket, no round trip; None when the server has said nothing.
    """
    why = _server_goodbye(conn.connection.dbapi_connection.pgconn)
    if why is None:
        return None  # the usual case: the server is waiting for us
    import psycopg

    orig = psycopg.OperationalError(
        f"the server closed the connection before COMMIT was sent: {why}")
    conn.invalidate()
    return sa.exc.OperationalError("COMMIT", None, orig, connection_invalidated=True)


def _server_goodbye(pgconn) -> str | None:
    """What the server said when it ended the session of an idle connection (a FATAL
    such as 57P01, then the end of the stream), or None while it is waiting for us.
    One ``select()`` on the socket, no round trip."""
    import psycopg

    try:
        # idle, the server speaks first only to say goodbye (a FATAL, then the end of
        # the stream) or with an asynchronous message, which libpq keeps; what is left
        # readable once that is read is the end of the stream
        for _ in range(3):
            readable, _, _ = select.select([pgconn.socket], [], [], 0)
            if not readable:
                return None
            pgconn.consume_input()  # raises at the end of the stream
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                break
        else:
            return None  # still talking: let the next statement find out
        why = pgconn.error_message.decode(errors="replace") or "connection bad"
    except (OSError, ValueError, psycopg.Error) as exc:
        why = str(exc) or type(exc).__name__
    return " ".join(str(why).split())


def stamped_at_head(engine: Engine, head: str) -> bool:
    """True when the database's ``alembic_version`` holds the head and
    ``schema_version`` its number: the usual open, answered in two statements without
    Alembic. Anything else (no tables, another revision) is False, for
    ``migrate_pg`` to judge; connection errors propagate."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{BEGIN_MODE: None})
        try:
            stamps = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
            versions = conn.exec_driver_sql("SELECT version FROM schema_version").all()
        except sa.exc.ProgrammingError:  # a table is missing: not a store at head
            conn.rollback()
            return False
    return [tuple(r) for r in stamps] == [(head,)] and \
        [tuple(r) for r in versions] == [(int(head),)]


def vacuum(engine: Engine, tables) -> None:
    """PostgreSQL's counterpart of SQLite's ``VACUUM``: ``VACUUM (ANALYZE)`` of the
    store's tables (dead rows become reusable space, the planner's statistics are
    refreshed). It runs outside a transaction and does not block readers or writers;
    autovacuum does the same on its own schedule."""
    names = ", ".join(tables)
    with engine.connect() as conn:
        conn.execution_options(**{BEGIN_MODE: None}).exec_driver_sql(f"VACUUM (ANALYZE) {names}")


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


#: SQLSTATEs after which a write unit is re-run whole (decision D13): serialization
#: failure, deadlock, and a lock wait that ran past ``lock_timeout`` (SQLite's busy)
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


def is_psycopg_error(exc: BaseException) -> bool:
    return (type(_driver_error(exc)).__module__ or "").startswith("psycopg")


def sqlstate_of(exc: BaseException) -> str:
    return getattr(_driver_error(exc), "sqlstate", None) or ""


def is_transient(exc: BaseException) -> bool:
    """A failure that re-running the whole unit can cure (the unit was rolled back)."""
    return sqlstate_of(exc) in TRANSIENT_SQLSTATES


def is_connection_lost(exc: BaseException) -> bool:
    """The connection broke or could not be made (server restarted, network): the
    transaction on it, if any, is gone, and a fresh connection may work."""
    if getattr(exc, "connection_invalidated", False):
        return True
    orig = _driver_error(exc)
    if not is_psycopg_error(orig):
        return False
    sqlstate = sqlstate_of(orig)
    if sqlstate:
        return sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")
    return type(orig).__name__ == "OperationalError"


def translate_error(exc: BaseException, target: object) -> errors.HermesStoreError | None:
    """Map a psycopg (or SQLAlchemy-wrapped) error to the package's, or None.
    ``target`` names the database in messages (a ``Target`` prints masked)."""
    orig = _driver_error(exc)
    module = type(orig).__module__ or ""
    if not module.startswith("psycopg"):
        return None
    text = " ".join(str(orig).split())
    sqlstate = getattr(orig, "sqlstate", None) or ""
    where = str(target)
    if sqlstate == "25006":
        return errors.StoreReadOnlyError(where)
    if sqlstate == "53100":
        return errors.StoreFullError(
            f"{where}: the server's disk is full ({text}); the write was rolled back and "
            "nothing was stored. Free space on the server and retry."
        )
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
    if sqlstate == "42501":
        user = getattr(getattr(target, "url", None), "username", None)
        role = f"the role {user}" if user else "the role"
        return errors.DatabaseAccessError(
            f"{where}: {role} lacks a privilege this needs ({text}). Creating and upgrading "
            "the schema and index upkeep (db upgrade, maintenance rebuild-fts/optimize/"
            "vacuum) need the database's owner (CREATE DATABASE … OWNER ROLE); a role that "
            "only reads and writes sessions needs SELECT, INSERT, UPDATE, DELETE on the "
            "tables and USAGE, SELECT, UPDATE on the sequences (docs/postgres.md)"
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
    "TRANSIENT_SQLSTATES",
    "UNIT_LOCK_KEY",
    "check_server",
    "create_engine",
    "decode_text",
    "encode_text",
    "install_text_codec",
    "is_connection_lost",
    "is_transient",
    "lock_unit",
    "migration_lock",
    "pg_errors",
    "pool_settings",
    "session_ended",
    "stamped_at_head",
    "translate_error",
    "vacuum",
]
