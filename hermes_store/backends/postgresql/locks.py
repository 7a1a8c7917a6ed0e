"""PostgreSQL's locks: the write units' advisory locks and the migration lock (D12, D13,
D16).

``lock_unit(conn, locks, held)`` is the first statement of every write unit: the store's
transaction-level advisory lock (shared, or exclusive for a unit that runs alone) and
one per name the unit decides on (a session, a title …: ``hermes_store.unit_locks``);
the same call takes what a running unit finds it needs later. ``lock_migrations(conn)``
is the first statement of a migration run's one transaction, so two deploys cannot
migrate one database at once. Every lock here is the transaction's, never the
session's, so each holds through a transaction pooler too (decision D16).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Iterator

import sqlalchemy as sa

from ...connections import BEGIN_MODE
from ...driver import driver_execute, uses_driver
from ...unit_locks import HeldLocks, Locks

#: key of the advisory lock that serializes migrations of one database
#: (the first 8 bytes of sha256("hermes_store.migrate"), as a signed bigint)
MIGRATION_LOCK_KEY = 0x71C0_72E3_634B_4E80


#: key of the transaction-level advisory lock of the whole store (the first 8 bytes of
#: sha256("hermes_store.write_unit"), as a signed bigint); see :func:`lock_unit`
UNIT_LOCK_KEY = -0x3A9B_5C0E_1D27_64F3


def lock_key(kind: str, name: str) -> int:
    """The advisory lock key of one named lock (``hermes_store.unit_locks``): the first
    8 bytes of BLAKE2b over ``hermes_store.<kind>``, NUL and the name, as a signed
    bigint. Fixed for good (every process of every release must derive the same key);
    two names whose keys collide only make their units queue."""
    digest = hashlib.blake2b(
        f"hermes_store.{kind}\x00{name}".encode("utf-8", "surrogatepass"), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


# the store's key is part of the text: no parameter to bind
_ALONE = f"pg_advisory_xact_lock({UNIT_LOCK_KEY})"
_STORE_SHARED = f"pg_advisory_xact_lock_shared({UNIT_LOCK_KEY})"
#: the transaction's id, assigned now (the unit writes anyway): what ``outcome`` asks
#: the server about when the connection is lost while COMMIT is on its way
_XID = "txid_current()"
#: statement texts by shape ("t" with the transaction id or "-", then "a" alone, or
#: "+" the store shared first or "-" held already, then one "x"/"s" per key): a handful
#: in use, each prepared once by psycopg
_STATEMENTS: dict[str, str] = {}


def _statement(shape: str) -> str:
    text = _STATEMENTS.get(shape)
    if text is None:
        calls = [_XID] if shape[0] == "t" else []
        if shape[1] == "a":
            calls.append(_ALONE)
        elif shape[1] == "+":
            calls.append(_STORE_SHARED)
        for i, mode in enumerate(shape[2:]):
            function = "pg_advisory_xact_lock" if mode == "x" else "pg_advisory_xact_lock_shared"
            calls.append(f"{function}(%(k{i})s::bigint)")
        text = _STATEMENTS[shape] = "SELECT " + ", ".join(calls)
    return text


def lock_unit(conn: sa.Connection, wanted: Locks, held: HeldLocks, *,
              with_xid: bool = False) -> int | None:
    """Take what ``wanted`` names and ``held`` does not hold yet, in one statement, until
    the unit's transaction ends (decision D16; ``unit_locks`` says what the names are).

    The store's lock comes first: exclusive for a unit that runs alone (``STORE``),
    shared for every other unit, so a unit that must run alone waits for the units in
    flight and the units after it wait behind it (PostgreSQL's lock queue is fair).
    Then one lock per name, exclusive or shared, in ascending key order, so that two
    units taking the same names in one statement cannot deadlock. Sent through the
    driver door: it is on every write unit's path.

    ``with_xid`` (a unit's first statement): the same statement also assigns the
    transaction its id and returns it (``outcome``), at no extra round trip."""
    missing = held.missing(wanted)
    if missing is None and not with_xid:
        return None
    keys: list[tuple[int, str]] = []
    if missing is None:
        shape = "-"
    elif missing.alone:
        shape = "a"
    else:
        keys = sorted([(lock_key(*name), "x") for name in missing.exclusive]
                      + [(lock_key(*name), "s") for name in missing.shared])
        shape = ("-" if held.store_shared else "+") + "".join(mode for _, mode in keys)
    statement = _statement(("t" if with_xid else "-") + shape)
    params = {f"k{i}": key for i, (key, _) in enumerate(keys)} or None
    if uses_driver(conn.dialect):
        result = driver_execute(conn, statement, params)
    else:
        result = conn.exec_driver_sql(statement, params or {})
    if missing is not None:
        held.add(missing)
    return int(result.fetchone()[0]) if with_xid else None


def lock_migrations(conn: sa.Connection, key: int = MIGRATION_LOCK_KEY) -> None:
    """Take ``pg_advisory_xact_lock(key)`` as the first statement of a migration run's
    transaction, held until it commits or rolls back.

    Alembic picks the steps to run from the version it reads first, so two deploys
    migrating at once would both run the same step; the second waits here instead, then
    (READ COMMITTED: each statement sees what committed before it) finds the work done.
    A lock of the transaction, not of the session: behind a transaction pooler the
    session is whichever server connection the pooler lends, and a session lock would
    stay with that connection after the run, held by nobody (decision D16). If the
    process dies the server rolls the transaction back and the lock goes with it.
    """
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": key})


#: key of the advisory lock that gives auto-maintenance to one process at a time (the
#: first 8 bytes of sha256("hermes_store.maintenance"), as a signed bigint)
MAINTENANCE_LOCK_KEY = -0x2514_B0B6_F196_7F08


@contextlib.contextmanager
def maintenance_turn(engine: sa.Engine) -> Iterator[bool]:
    """Auto-maintenance's turn (issue 31, row 9): True inside when this process has it,
    False at once when another has (``pg_try_advisory_xact_lock``, never waited for).

    The lock belongs to a transaction kept open on a connection of its own for the
    turn, so it holds through a transaction pooler (decision D16) and goes with the
    connection when the process dies. READ COMMITTED, with no write: between
    statements it holds no snapshot and no transaction id, so it keeps nothing from
    the VACUUM that the turn may run on other connections.
    """
    with engine.connect() as conn:
        conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
        with conn.begin() as transaction:
            held = bool(conn.exec_driver_sql(
                "SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": MAINTENANCE_LOCK_KEY}
            ).scalar())
            try:
                yield held
            finally:
                transaction.rollback()  # and the lock with it


__all__ = ["MAINTENANCE_LOCK_KEY", "MIGRATION_LOCK_KEY", "UNIT_LOCK_KEY", "lock_key",
           "lock_migrations", "lock_unit", "maintenance_turn"]
