"""psycopg's errors as the package's, and which failures a write unit re-runs (D11, D13).

``translate_error(exc, target)`` / ``pg_errors(target)``: driver errors → the package's
errors (``hermes_store.errors``), which name the URL (password masked) and say what to
do: unreachable server, refused login, missing database, lost connection, a privilege
the role lacks; a misspelled URL option, TLS the server does not offer, and a connection
pooler's refusals, each naming the setting to change (decision D16). ``is_transient`` (serialization failure, deadlock, lock timeout) and
``is_connection_lost`` decide what ``units.WriteUnits`` re-runs.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import sqlalchemy as sa

from ... import errors
from ...location import Target

# Connection errors carry no SQLSTATE in psycopg (libpq reports them as text), so the
# server's and libpq's (English) texts decide; anything else at connect is "unreachable".
_MISSING_DATABASE = re.compile(r'database "[^"]*" does not exist')
_ACCESS_DENIED = re.compile(
    r"password authentication failed|role \"[^\"]*\" does not exist|no pg_hba\.conf entry"
    r"|permission denied|authentication failed|password",
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
    if type(orig).__name__ != "OperationalError":
        return False
    # a refusal that no fresh connection cures (a wrong password, a missing database, a
    # URL option, TLS, a pooler's parameter) is reported at once, not ridden out
    text = " ".join(str(orig).split())
    return not any(p.search(text) for p in _REFUSALS)


_BAD_OPTION = re.compile(r'invalid connection option "([^"]*)"')
_TLS_REFUSED = re.compile(r"server does not support SSL, but SSL was required", re.IGNORECASE)
_STARTUP_PARAMETER = re.compile(r"unsupported startup parameter: (\S+)")
_PREPARED_MIXED = re.compile(r'prepared statement "_pg3_[^"]*" (does not exist|already exists)'
                             r'|bind message supplies \d+ parameters, but prepared statement "_pg3_')
#: PgBouncer's own refusals (its texts), and the setting each one names
_POOLER_REFUSALS = (
    (re.compile(r"no more connections allowed \(max_client_conn\)"),
     "the connection pooler has no room for another client (its max_client_conn); raise "
     "max_client_conn, or lower the pool sizes of the processes sharing it"),
    (re.compile(r"pgbouncer cannot connect to server|server login has been failing"),
     "the connection pooler cannot reach or log in to the server behind it; check the "
     "host, port and credentials of this database in the pooler's [databases] section "
     "and that the server is running"),
    (re.compile(r"query_wait_timeout"),
     "the connection pooler found no free server connection in time (its "
     "query_wait_timeout); raise its default_pool_size or max_db_connections, or lower "
     "the number of clients"),
    (re.compile(r"no such database: "),
     "the connection pooler does not know this database; add it to the pooler's "
     "[databases] section (or a `*` fallback entry)"),
)


#: connect-time refusals that are not an outage (``is_connection_lost`` says no)
_REFUSALS = (_MISSING_DATABASE, _ACCESS_DENIED, _BAD_OPTION, _TLS_REFUSED,
             _STARTUP_PARAMETER, re.compile(r"no such database: "))


def _url_option_error(name: str, where: str) -> errors.DatabaseURLError:
    """A misspelled or unknown libpq option in the URL's query (``?sslmod=require``)."""
    import difflib

    from psycopg import pq

    known = [d.keyword.decode() for d in pq.Conninfo.get_defaults()]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return errors.DatabaseURLError(
        f"{where}: the URL's query names {name!r}, which is not a PostgreSQL connection "
        f"option{hint} (libpq's options: sslmode, connect_timeout, host, application_name, "
        "…; hermes_store's own: pool_size, max_overflow, pool_timeout, prepare_threshold)"
    )


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
    bad_option = _BAD_OPTION.search(text)
    if bad_option:
        return _url_option_error(bad_option.group(1), where)
    if _TLS_REFUSED.search(text):
        return errors.UnsupportedServerError(
            f"{where}: the server does not accept TLS (SSL) connections, and the URL's "
            f"sslmode requires one ({text}); turn on ssl in the server's (or pooler's) "
            "configuration, or use sslmode=prefer or disable where the network is trusted"
        )
    parameter = _STARTUP_PARAMETER.search(text)
    if parameter:
        name = parameter.group(1)
        return errors.UnsupportedServerError(
            f"{where}: a connection pooler in front of the server refused the startup "
            f"parameter {name!r} ({text}). It comes from the URL ({name}=…), not from "
            "hermes_store: remove it from the URL, or list it in the pooler's "
            "ignore_startup_parameters (PgBouncer), which drops what it sets"
        )
    for pattern, hint in _POOLER_REFUSALS:
        if pattern.search(text):
            kind = (errors.StoreNotFoundError if "no such database" in pattern.pattern
                    else errors.ServerUnreachableError)
            return kind(f"{where}: {hint} ({text})")
    if _PREPARED_MIXED.search(text):
        return errors.UnsupportedServerError(
            f"{where}: a connection pooler mixed prepared statements between clients "
            f"({text}); add prepare_threshold=none to the URL's query (docs/postgres.md, "
            "connection poolers)"
        )
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
        return _privilege_error(text, target, where)
    if sqlstate == "53300":
        return errors.ServerUnreachableError(
            f"{where}: the server has no free connection slot ({text}); lower the pool "
            "sizes of the processes sharing it or raise max_connections"
        )
    return None


#: what a 42501 names: "permission denied for table x", "must be owner of index y"
_DENIED_ON = re.compile(
    r"permission denied for (table|sequence|view|function|relation|database|schema) "
    r"(\"[^\"]+\"|\S+)|must be owner of (?:\w+ )*?(table|index|relation|sequence|schema|"
    r"database|extension|function) (\"[^\"]+\"|\S+)")


def _privilege_error(text: str, target: object, where: str) -> errors.DatabaseAccessError:
    """SQLSTATE 42501, saying what was refused and what to do about it, not the whole
    recipe of grants (the operator may have given most of it): a table or sequence the
    role may not use is the owner's to grant (``db grant``, which covers the tables
    created later too); creating, changing or rebuilding the schema is the owner's."""
    url = getattr(target, "url", None)
    user = getattr(url, "username", None)
    role = f"the role {user}" if user else "the role"
    found = _DENIED_ON.search(text)
    kind = (found.group(1) or found.group(3)) if found else None
    name = ((found.group(2) or found.group(4)) or "").strip('"') if found else ""
    owner_only = kind in ("schema", "database", "index", "extension") or (
        found is not None and found.group(3) is not None)
    if found is not None and not owner_only:
        return errors.DatabaseAccessError(
            f"{where}: {role} lacks a privilege on {kind} {name} ({text}). The database's "
            f"owner gives a role that reads and writes sessions all it needs, on every "
            f"table now and on those created later: `hermes-store db grant "
            f"{user or 'ROLE'}` (with this --db); `maintenance doctor` lists what a role "
            f"lacks")
    return errors.DatabaseAccessError(
        f"{where}: {role} lacks a privilege this needs ({text}). Creating and upgrading "
        "the schema (db upgrade, the Telegram topic opt-in) and index upkeep (maintenance "
        "rebuild-fts/optimize/vacuum) are the database's owner's (CREATE DATABASE … OWNER "
        "ROLE): run them as the owner; Hermes itself may run as a role given `db grant`")


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


__all__ = ["TRANSIENT_SQLSTATES", "is_connection_lost", "is_psycopg_error", "is_transient",
           "pg_errors", "sqlstate_of", "translate_error"]
