"""The identity stamped in a state.db: which file this is, whatever its inode (issue 31,
row 4; upstream #45383, #89332).

``cp backup.db state.db`` rewrites the file in place: the inode stays, so a check of
(device, inode) passes, and in WAL mode SQLite's page cache does not notice either (it
trusts the ``-shm`` index, not the file). So every file the store creates or adopts
carries a random identity, twice:

* in the header's ``application_id`` field (4 bytes, big-endian, at offset 68), which
  the store's watch reads from the file itself before every write unit
  (``identity.FileWatch``), and
* in ``state_meta`` (key :data:`IDENTITY_KEY`), which says the header value is this
  store's. Another application's ``application_id`` (upstream Hermes' newer code mints
  one per file too, and never overwrites a nonzero one) is never rewritten: it is
  watched as it is. A copy that lost its header (a dump and load) is stamped anew.

Where it is written: a new file in the same transaction as its schema
(``migrate/create.py``); an existing file (upstream's, ``application_id`` 0) at its
first writable open (:func:`ensure`, under ``BEGIN IMMEDIATE``). Copies the store makes
(``db backup``, ``recover --output``, ``db copy``) get an identity of their own
(:func:`restamp`, or a new file's own), so restoring one over a live store is seen; a
copy made by another tool (``cp state.db x``) keeps the identity it copied.

``new_identity() -> int``           random, nonzero, positive
``header_bytes(identity) -> bytes`` what the header holds at offset 68 for it
``ensure(conn) -> int | None``      the header value to watch: the file's identity,
                                    stamped first if it had none, or another
                                    application's; None when a stamp could not be
                                    written now (busy, read-only)
``write(conn, identity)``           inside the caller's write transaction
``restamp(conn) -> int | None``     a copy's new identity (None: foreign, left alone)
"""

from __future__ import annotations

import logging
import secrets

from ....schema import FILE_IDENTITY_KEY
#: the package's SQLite library (library.py): the connections handed in are its own
from ..library import SQLITE as sqlite3

log = logging.getLogger("hermes_store.backends.sqlite")

#: ``state_meta`` key holding the identity (decimal text, as ``application_id`` reads)
IDENTITY_KEY = FILE_IDENTITY_KEY
#: where SQLite keeps ``application_id`` in the database header, and its size
HEADER_OFFSET, HEADER_SIZE = 68, 4


def new_identity() -> int:
    return secrets.randbelow(2**31 - 1) + 1


def header_bytes(identity: int) -> bytes:
    return identity.to_bytes(HEADER_SIZE, "big", signed=True)


def _found(conn) -> tuple[int, str | None]:
    """(application_id, state_meta's identity or None)."""
    header = conn.execute("PRAGMA application_id").fetchone()[0]
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?",
                           (IDENTITY_KEY,)).fetchone()
    except sqlite3.OperationalError:  # no state_meta: not a store's file
        return header, None
    return header, (None if row is None else str(row[0]))


def _ours(header: int, meta: str | None) -> bool | None:
    """True: the header holds this store's identity; None: another application's
    (never rewritten); False: none yet (stamp it)."""
    if header == 0:
        return False
    return True if meta == str(header) else None


def write(conn, identity: int) -> None:
    """Stamp ``identity`` in the header and in ``state_meta``, inside the caller's write
    transaction (both or neither)."""
    conn.execute(f"PRAGMA application_id = {int(identity)}")
    conn.execute("INSERT INTO state_meta (key, value) VALUES (?, ?) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                 (IDENTITY_KEY, str(identity)))


def ensure(conn) -> int | None:
    """The header value to watch in the file behind ``conn`` (a DB-API connection in
    autocommit mode): its identity, stamped first when it has none (decided again under
    ``BEGIN IMMEDIATE``: another process may be stamping it too), or another
    application's ``application_id``, left as it is. None when the stamp cannot be
    written now (busy past the timeout, a read-only file): the file is then not watched
    for an in-place overwrite until a later open stamps it."""
    header, meta = _found(conn)
    if _ours(header, meta) is not False:
        return header
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        log.debug("no identity stamped in the file now (%s); a later open does it", exc)
        return None
    try:
        header, meta = _found(conn)
        if _ours(header, meta) is False:
            header = new_identity()
            write(conn, header)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return header


def restamp(conn) -> int | None:
    """Give the copy behind ``conn`` an identity of its own (a store's file and an
    upstream file alike; another application's ``application_id`` is left alone): one
    write transaction. Returns it, or None when left alone."""
    if _ours(*_found(conn)) is None:
        return None
    identity = new_identity()
    conn.execute("BEGIN IMMEDIATE")
    try:
        write(conn, identity)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return identity


__all__ = ["HEADER_OFFSET", "HEADER_SIZE", "IDENTITY_KEY", "ensure", "header_bytes",
           "new_identity", "restamp", "write"]
