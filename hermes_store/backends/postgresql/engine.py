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
``behind_pooler(dbapi_conn)``
    Whether a connection reaches the server through a pooler (PgBouncer…): then it
    prepares no statements (decision D16).

Nothing is set on a session (no startup ``options``, no ``SET``): a transaction pooler
refuses the first and lends the second to other clients. What must hold — the lock
wait, a read-only store's access mode, a snapshot's isolation — is in each
transaction's own BEGIN (:func:`write_begin`, :data:`SNAPSHOT_BEGIN`).
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
from .outcome import IDENTITY, IDENTITY_COLUMNS

APPLICATION_NAME = "hermes_store"
DEFAULT_CONNECT_TIMEOUT = 10



#: the PostgreSQL backend, which every engine made here carries (``Backend.carry``: code
#: holding a connection reads it back with ``backends.base.backend_of``); the package hands
#: it over as it loads, before anything can call this module
CARRIED = None

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
    SQLite's busy timeout; it is set per transaction (``SET LOCAL``, :func:`write_begin`),
    as is ``read_only`` — every transaction the store begins is read-only on the server,
    so a write that gets past the store's own check still fails. Nothing is set on the
    session, so both hold behind a transaction pooler (decision D16).
    ``?prepare_threshold=`` in the URL sets psycopg's prepared statements (else
    :func:`behind_pooler` decides per connection).

    ``pool_pre_ping=True`` adds SQLAlchemy's ping (a round trip) to every checkout;
    by default the checkout check (:func:`_check_on_checkout`) pings only connections
    that sat idle for ``PING_AFTER_IDLE`` seconds.
    """
    if target.backend != "postgresql":
        raise ValueError(f"{target.display} is not a PostgreSQL database")
    require_driver(target)
    target, pool = pool_settings(target, pool_size=pool_size, max_overflow=max_overflow,
                                 pool_timeout=pool_timeout)
    target, prepare = prepare_setting(target)
    connect_args = {}
    if "connect_timeout" not in target.url.query:
        connect_args["connect_timeout"] = connect_timeout
    if "application_name" not in target.url.query:
        connect_args["application_name"] = APPLICATION_NAME
    # Text is UTF-8 both ways, whatever the server's default (a SQL_ASCII database would
    # otherwise hand back bytes; check_server then refuses it with a clear message).
    connect_args["client_encoding"] = "utf8"
    # No session settings (startup ``options``, SET): a transaction pooler refuses the
    # first and mixes the second between clients. What must hold is set per transaction
    # by the begin hook (lock_timeout, the access mode).
    kwargs = {"poolclass": poolclass} if poolclass is not None else pool
    engine = sa.create_engine(
        target.url, connect_args=connect_args, pool_pre_ping=pool_pre_ping, **kwargs
    )
    event.listen(engine, "connect", _connect_hook(prepare))
    event.listen(engine, "checkout", _check_on_checkout)
    event.listen(engine, "checkin", _on_checkin)
    event.listen(engine, "begin", _begin_hook(read_only, lock_timeout))
    return CARRIED.carry(engine)


#: URL query key for psycopg's server-side prepared statements: a number of executions
#: after which a statement is prepared, or ``none`` (never). Taken out of the URL (psycopg
#: would get a string: a bare TypeError) and applied to every connection.
PREPARE_QUERY_KEY = "prepare_threshold"
#: no setting in the URL: decided per connection (:func:`behind_pooler`)
DETECT = "detect"


def prepare_setting(target: Target) -> tuple[Target, object]:
    """The target without ``prepare_threshold`` in its query, and the setting: an int,
    None (never prepare) or :data:`DETECT`."""
    query = dict(target.url.query)
    if PREPARE_QUERY_KEY not in query:
        return target, DETECT
    raw = query.pop(PREPARE_QUERY_KEY)
    text = str(raw[-1] if isinstance(raw, tuple) else raw).strip().lower()
    if text in ("none", "off", "no", "false", "never", ""):
        value = None
    else:
        try:
            value = int(text)
        except ValueError:
            raise errors.DatabaseURLError(
                f"{target.display}: prepare_threshold={raw!r} in the URL is neither a number "
                "of executions nor 'none' (never prepare: what a transaction pooler needs)"
            ) from None
        if value < 0:
            raise errors.DatabaseURLError(
                f"{target.display}: prepare_threshold={raw!r} in the URL must be 0 or more, "
                "or 'none'")
    return Target(target.backend, target.url.set(query=query), target.path, target.source), value


def behind_pooler(dbapi_conn) -> bool:
    """Whether a connection reaches the server through a pooler or proxy (PgBouncer,
    a managed service's pooled URL): the backend pid announced at startup (the cancel
    key's, ``BackendKeyData``) is not the pid of the server process that answers. A
    pooler must hand out keys of its own, since the server process behind a client
    changes; a direct connection announces its own. One round trip."""
    return _introduce(dbapi_conn)[0]


def _introduce(dbapi_conn) -> tuple[bool, tuple | None]:
    """At connect, in one round trip: whether the connection is behind a pooler
    (:func:`behind_pooler`) and which server history it reached (``outcome.identify``:
    what tells a lost COMMIT's fate later)."""
    import psycopg

    announced = dbapi_conn.pgconn.backend_pid
    autocommit_was = dbapi_conn.autocommit
    dbapi_conn.autocommit = True
    try:
        try:
            row = dbapi_conn.execute(f"SELECT pg_backend_pid(), {IDENTITY_COLUMNS}",
                                     prepare=False).fetchone()
        except psycopg.errors.InsufficientPrivilege:  # the history stays unknown
            row = dbapi_conn.execute("SELECT pg_backend_pid(), NULL, NULL, NULL",
                                     prepare=False).fetchone()
    finally:
        dbapi_conn.autocommit = autocommit_was
    identity = None if None in row[1:] else (int(row[1]), row[2], row[3])
    return row[0] != announced, identity


#: key of a connection record's ``info``: True when :func:`behind_pooler` said so
POOLED = "hermes_store.behind_pooler"


def _connect_hook(prepare):
    def on_connect(dbapi_conn, record) -> None:
        install_text_codec(dbapi_conn)
        pooled, record.info[IDENTITY] = _introduce(dbapi_conn)
        if prepare is DETECT:
            record.info[POOLED] = pooled
            if pooled:  # a transaction pooler would mix them between clients
                dbapi_conn.prepare_threshold = None
        else:
            dbapi_conn.prepare_threshold = prepare

    return on_connect


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


#: what begins a read snapshot: one snapshot for every statement of the block
SNAPSHOT_BEGIN = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",)


#: kB of a GIN index's pending list (rows indexed but not yet merged into the index)
#: after which the write that grows it past this merges it. Every search reads the whole
#: list: at the server's default (4 MB) that cost ~1.2 ms per search on the trigram index
#: of a 100k-message store (~0.4 ms on the word index); at 1 MB a quarter of it, for no
#: measurable cost per append (docs/performance.md, issue 32)
GIN_PENDING_LIST_KB = 1024


def write_begin(*, read_only: bool, lock_timeout: float | None) -> tuple[str, ...]:
    """The statements that begin a write unit's transaction: its isolation level and access
    mode, ``SET LOCAL lock_timeout`` and (read-write) ``gin_pending_list_limit`` — settings
    of this transaction alone, so they hold behind a transaction pooler, which hands each
    transaction whatever server session is free (decision D16). One simple query: one
    round trip, as psycopg's own BEGIN."""
    mode = "READ ONLY" if read_only else "READ WRITE"
    statements = (f"BEGIN ISOLATION LEVEL READ COMMITTED {mode}",)
    if lock_timeout is not None:
        statements += (f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}",)
    if not read_only:
        statements += (f"SET LOCAL gin_pending_list_limit = {GIN_PENDING_LIST_KB}",)
    return statements


def _begin_hook(read_only_store: bool, lock_timeout: float | None = None):
    """The transaction mode per ``hermes_begin`` (decisions D13, D16):

    * ``"IMMEDIATE"`` (a write unit): READ COMMITTED, read-write (read-only on a
      read-only store), ``lock_timeout`` set for the transaction (:func:`write_begin`).
      Rows a statement changes are locked until COMMIT; what a unit reads then writes is
      kept consistent by the locks of what it decides on (``locks.lock_unit``) rather
      than by a stricter level, so appends to one session queue on its lock instead of
      failing with serialization errors;
    * ``"DEFERRED"`` (a read snapshot): REPEATABLE READ, READ ONLY (:data:`SNAPSHOT_BEGIN`)
      — one snapshot for every statement of the block (READ COMMITTED would take one per
      statement);

    both sent here, at once (one round trip, as psycopg's own BEGIN would be before the
    first statement), on the connection in autocommit mode: psycopg then sends no BEGIN
    of its own, COMMIT and ROLLBACK end the transaction as usual, and a connection that
    is gone shows before the unit or the read has run any of its code;
    * ``None``: autocommit, for a single statement (one round trip instead of three)
      and for maintenance that cannot run in a transaction (VACUUM);
    * no option: the server's default level, read-only on a read-only store, unless
      SQLAlchemy's own ``isolation_level`` option manages the connection.
    """
    begins = {
        "IMMEDIATE": write_begin(read_only=read_only_store, lock_timeout=lock_timeout),
        "DEFERRED": SNAPSHOT_BEGIN,
    }
    read_only_default = bool(read_only_store)

    def on_begin(conn) -> None:
        options = conn.get_execution_options()
        dbapi_conn = conn.connection.dbapi_connection
        if BEGIN_MODE not in options:
            if "isolation_level" in options:
                return
            mode = "DEFAULT"
        else:
            mode = options[BEGIN_MODE]
        begin = begins.get(mode)
        if begin is not None or mode is None:
            if not dbapi_conn.autocommit:
                dbapi_conn.autocommit = True
            if begin is not None:
                _send_begin(conn, dbapi_conn, begin)
            return
        if dbapi_conn.autocommit:
            dbapi_conn.autocommit = False
        dbapi_conn.isolation_level, dbapi_conn.read_only = None, read_only_default

    return on_begin


def _send_begin(conn: sa.Connection, dbapi_conn, statements: tuple[str, ...]) -> None:
    """Send a write unit's or a snapshot's BEGIN and its settings as one simple query
    (several statements: never prepared, whatever the connection's
    ``prepare_threshold``), the way ``engine.driver_execute`` sends a statement: the
    cursor events see it, a driver error is raised as SQLAlchemy's, a lost connection is
    invalidated. A dialect without the driver door sends them through Core instead."""
    from ...driver import uses_driver

    if not uses_driver(conn.dialect):
        for statement in statements:
            conn.exec_driver_sql(statement)
        return
    import psycopg

    text = "; ".join(statements)
    dispatch = conn.dispatch
    cursor = None
    try:
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            cursor = dbapi_conn.cursor()
            for fn in dispatch.before_cursor_execute:
                fn(conn, cursor, text, None, None, False)
            cursor.execute(text, prepare=False)
            for fn in dispatch.after_cursor_execute:
                fn(conn, cursor, text, None, None, False)
        else:
            dbapi_conn.execute(text, prepare=False)
    except psycopg.Error as exc:
        dialect = conn.dialect
        lost = dialect.is_disconnect(exc, dbapi_conn, cursor)
        error = sa.exc.DBAPIError.instance(text, None, exc, psycopg.Error, dialect=dialect,
                                           connection_invalidated=lost)
        if lost:
            conn.invalidate(error)
        raise error from exc


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
           "PING_AFTER_IDLE", "POOL_QUERY_KEYS", "PREPARE_QUERY_KEY", "SNAPSHOT_BEGIN",
           "behind_pooler", "create_engine", "pool_settings", "prepare_setting",
           "require_driver", "session_ended", "write_begin"]
