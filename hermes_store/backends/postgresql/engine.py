"""PostgreSQL engines: the pool, the checkout check, the begin hook (decisions D11–D13).

Everything here is specific to PostgreSQL and psycopg 3, and is imported only when a
PostgreSQL URL is used (a default install never imports psycopg).

``create_engine(target, …) -> Engine``
    A pooled engine (sizes configurable) whose connections carry the NUL-safe text codec
    (``codec.py``) and ``application_name=hermes_store``, and are checked at checkout
    (:func:`_check_on_checkout`): a session the server ended is replaced, and a
    connection idle for longer than ``PING_AFTER_IDLE`` is pinged first.
``session_ended(conn)``
    Asked just before COMMIT: whether the server already ended the session (a restart),
    without a round trip.
"""

from __future__ import annotations

import select
import time

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from ... import errors
from ...connections import BEGIN_MODE
from ...location import PG_EXTRA_HINT, Target
from .codec import install_text_codec

APPLICATION_NAME = "hermes_store"
DEFAULT_CONNECT_TIMEOUT = 10


def require_driver(target: Target) -> None:
    """Raise :class:`DriverMissingError` when psycopg cannot be imported (called before
    anything connects to PostgreSQL)."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise errors.DriverMissingError(
            f"{target.display}: the PostgreSQL driver (psycopg 3) is not installed ({exc}); "
            f"install it with {PG_EXTRA_HINT}"
        ) from None


#: URL query keys that size the pool: taken out of the URL (psycopg would refuse them)
#: and handed to SQLAlchemy's pool, so a ``--db URL`` can size it too
POOL_QUERY_KEYS = ("pool_size", "max_overflow", "pool_timeout")
DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10


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
    if target.backend != "postgresql":
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


__all__ = ["APPLICATION_NAME", "DEFAULT_POOL_SIZE", "DEFAULT_MAX_OVERFLOW",
           "PING_AFTER_IDLE", "POOL_QUERY_KEYS", "create_engine", "pool_settings",
           "require_driver", "session_ended"]
