"""What a file holds, read without writing to it; the lock that serializes migrations.

``inspect_file(path)`` classifies a file (missing, empty, under Alembic, written by
upstream Hermes) and refuses what must not be touched — not SQLite, damaged, from a
newer version — with an error that says what to do, leaving it byte for byte as it was.
``verify_sound`` runs ``quick_check`` before a migration rewrites a file (the lock
that makes two processes migrating one file take turns is ``fileops.migration_lock``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from alembic.script import ScriptDirectory

from .... import errors
from ....migrate.scripts import scripts
from ....revisions import is_newer, upstream_version
from ...facets import StoreState
from ..errors import sqlite_errors
from ..files.uri import file_uri
from ..library import SQLITE as sqlite3  # the package's library, never `import sqlite3`
from ..library import integrity_problems


def classify(run: Callable[[str], list[tuple]], scripts: ScriptDirectory, where: object):
    """Shared by the path probe and the in-transaction check: (kind, revision, version)."""
    head = scripts.get_current_head()
    newest = upstream_version(head)  # the upstream schema version head leaves
    tables = {
        name
        for (name,) in run("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    }
    version = None
    if "schema_version" in tables:
        rows = run("SELECT version FROM schema_version LIMIT 1")
        if rows:
            version = rows[0][0]
            if not isinstance(version, int) or version < 1:
                raise errors.DatabaseDamagedError(
                    f"{where}: schema_version holds {version!r}, which is not a schema "
                    f"version; {errors.RECOVER_HINT}"
                )
            if version > newest:
                raise too_new(where, f"schema version {version}", newest)
    rows = run("SELECT version_num FROM alembic_version") if "alembic_version" in tables else []
    tables.discard("alembic_version")  # with no row left it just means "at base"
    if rows:
        if len(rows) != 1:
            raise errors.DatabaseDamagedError(
                f"{where}: alembic_version holds {len(rows)} rows instead of one; "
                f"{errors.RECOVER_HINT}"
            )
        revision = rows[0][0]
        try:
            scripts.get_revision(revision)
        except Exception:
            if is_newer(revision, head):
                raise too_new(where, f"revision {revision}", newest) from None
            raise errors.SchemaError(
                f"{where}: stamped with revision {revision!r}, which this package does not "
                "know; it was migrated by a different tool"
            ) from None
        if version is not None and version < (upstream_version(revision) or 0):
            # upstream's version table says the data steps after `version` have not run
            # on these rows: the file is at that version, and an upgrade replays the
            # revisions above it (adopt.py)
            return "alembic", f"{version:04d}", version
        return "alembic", revision, version
    if version is not None:
        return "upstream", f"{version:04d}", version
    if "sessions" in tables:  # upstream v1 kept no version row
        return "upstream", "0001", None
    if not tables:
        return "empty", None, None
    raise errors.NotADatabaseError(
        f"{where} is a SQLite database but not a Hermes state.db (tables: "
        f"{', '.join(sorted(tables)[:5])}…); point hermes_store at the right file"
    )


def too_new(where: object, found: str, newest: int) -> errors.SchemaTooNewError:
    return errors.SchemaTooNewError(
        f"{where} has {found}, newer than this hermes_store understands (up to schema "
        f"version {newest}); it was written by a newer Hermes — upgrade hermes_store. "
        "The file was not changed."
    )


def inspect_file(path: str | os.PathLike) -> StoreState:
    """Probe a file without writing to it (not even its journal mode).

    Raises NotADatabaseError, DatabaseDamagedError, SchemaTooNewError,
    StoreBusyError or DatabaseAccessError; never changes the file.
    """
    p = Path(path)
    if not p.exists():
        return StoreState("missing", None, None, p, os.access(_existing_parent(p), os.W_OK))
    if p.is_dir():
        raise errors.NotADatabaseError(f"{p} is a directory, not a database file")
    # Never open() the file ourselves: closing a descriptor drops the POSIX locks every
    # SQLite connection of this process holds on it. SQLite reads the header instead.
    if not os.access(p, os.R_OK):
        raise errors.DatabaseAccessError(
            f"cannot read {p} (permission denied); fix its permissions or run as its owner"
        )
    writable = os.access(p, os.W_OK) and os.access(p.parent, os.W_OK)
    if p.stat().st_size == 0:
        return StoreState("empty", None, None, p, writable)
    with sqlite_errors(p):
        conn = sqlite3.connect(file_uri(p, mode="ro"), uri=True, timeout=1.0)
        try:
            kind, revision, version = classify(
                lambda sql: conn.execute(sql).fetchall(), scripts(), p
            )
        finally:
            conn.close()
    return StoreState(kind, revision, version, p, writable)


def verify_sound(path: str | os.PathLike) -> None:
    """Refuse to migrate a damaged file: ``PRAGMA quick_check`` through a read-only
    connection. A migration rewrites tables and indexes, so running it over damage
    would spread the damage and write to a file that ``recover`` should read."""
    p = Path(path)
    with sqlite_errors(p):
        conn = sqlite3.connect(file_uri(p, mode="ro"), uri=True, timeout=1.0)
        try:
            # full-text index drift is not damage: the migrations rebuild the indexes
            problems, _fts = integrity_problems(conn, "quick_check")
        finally:
            conn.close()
    if problems:
        raise errors.DatabaseDamagedError(
            f"{p} is damaged ({'; '.join(problems[:5])}); it was not migrated. {errors.RECOVER_HINT}"
        )


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


__all__ = ["classify", "inspect_file", "too_new", "verify_sound"]
