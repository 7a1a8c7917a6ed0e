"""psycopg's errors as the package's, and which failures a write unit re-runs (D11, D13).

``translate_error(exc, target)`` / ``pg_errors(target)``: driver errors → the package's
errors (``hermes_store.errors``), which name the URL (password masked) and say what to
do: unreachable server, refused login, missing database, lost connection, a privilege
the role lacks. ``is_transient`` (serialization failure, deadlock, lock timeout) and
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


__all__ = ["TRANSIENT_SQLSTATES", "is_connection_lost", "is_psycopg_error", "is_transient",
           "pg_errors", "sqlstate_of", "translate_error"]
