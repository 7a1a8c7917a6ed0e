"""Heal one kind of damage: full-text entries duplicated in ``sqlite_master``.

Upstream PR #43149: a file whose schema table holds a second row for an FTS object (two
``CREATE VIRTUAL TABLE messages_fts`` rows) fails on every statement with "malformed
database schema (messages_fts) - table messages_fts already exists" — SQLite parses the
whole schema before running anything — so users saw no sessions although every row was
intact. That one pattern is healed; every other kind of damage is refused, untouched,
with the ``recover`` hint.

The pattern, exactly (``diagnose``): with ``writable_schema`` SQLite can read the schema
table; some (type, name) occurs more than once; every such name belongs to the full-text
layer (``messages_fts…``); and each extra row is identical to the first one (type, name,
table, root page, SQL), so removing it changes nothing but the duplicate.

Healing (``repair``), never while another process may be writing:

1. take the migration lock (``fileops.migration_lock``): no migration or other repair of
   this file runs meanwhile;
2. take SQLite's EXCLUSIVE lock on one connection (``locking_mode=EXCLUSIVE`` +
   ``BEGIN EXCLUSIVE``). It is refused while any other connection — another process, or
   another of this one — has the file open (in WAL mode every open connection holds a
   shared lock on it): ``StoreInUseError``, nothing written;
3. with the lock held, copy the file and its ``-wal``/``-shm`` to
   ``<name>.schema-backup-<UTC time>`` (+ ``-wal``/``-shm``), 0600. A child process
   copies: closing a descriptor of the file in this process would drop SQLite's lock.
   The copy is skipped when a backup of the same content is kept, and refused when the
   volume lacks room; the attempt itself is bounded (``repair_limits``: one per
   process, three per file);
4. delete the duplicate rows (``writable_schema``) and bump the schema cookie, in one
   transaction;
5. verify on a fresh connection: the schema loads and ``PRAGMA integrity_check`` says
   ok. Otherwise ``DatabaseDamagedError`` names the backup: nothing is restored silently.

``SessionDB`` calls ``probe_or_heal`` where it used to probe the file, so an open heals
the pattern itself; ``hermes-store maintenance repair`` runs ``repair``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ....errors import (
    RECOVER_HINT,
    REPAIR_HINT,
    DatabaseDamagedError,
    NotADatabaseError,
    StoreInUseError,
)
from ....policy import DEFAULT_BUSY_TIMEOUT
from ..errors import is_busy_error
from .ops import copy_in_child
from .repair_limits import attempt, backup_before_repair
from .probe import probe_database
from .identity import FileWatch
from ..library import SQLITE as sqlite3
from ..library import integrity_problems
from .uri import absolute, file_uri

log = logging.getLogger(__name__)

#: the name prefix every full-text object has had, in every layout
_FTS_PREFIX = "messages_fts"


@dataclass
class SchemaEntry:
    rowid: int
    type: str
    name: str
    table: str | None


@dataclass
class Diagnosis:
    """What the schema table holds (read-only; nothing is written)."""

    path: Path
    loads: bool  # does SQLite parse the schema without writable_schema?
    duplicates: list[SchemaEntry]  # the rows beyond the first of each (type, name)
    problem: str | None  # why it is not the healable pattern (None when it is, or healthy)

    @property
    def healthy(self) -> bool:
        return self.loads and not self.duplicates

    @property
    def healable(self) -> bool:
        return bool(self.duplicates) and self.problem is None


@dataclass
class RepairReport:
    path: str
    state: str  # "healthy" (nothing to do) or "healed"
    backup: list[str] = field(default_factory=list)
    removed: list[SchemaEntry] = field(default_factory=list)
    integrity: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return data


# --------------------------------------------------------------------------- diagnosis

def _is_fts(name: str) -> bool:
    if name.startswith(_FTS_PREFIX):
        return True
    from ..fts.ddl import is_fts_object

    return is_fts_object(name)


def _schema_loads(path: Path) -> str | None:
    """None when SQLite parses the schema, else its message."""
    conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True, timeout=DEFAULT_BUSY_TIMEOUT)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return None
    except sqlite3.DatabaseError as exc:
        if is_busy_error(exc):
            return None  # locked, not damaged
        return str(exc)
    finally:
        conn.close()


def _duplicates(rows: list[tuple]) -> tuple[list[SchemaEntry], str | None]:
    """Extra rows of each duplicated (type, name), and why they are not healable."""
    first: dict[tuple, tuple] = {}
    extra: list[SchemaEntry] = []
    problem = None
    for rowid, type_, name, tbl_name, rootpage, sql in sorted(rows):
        key = (type_, name)
        if key not in first:
            first[key] = (tbl_name, rootpage, sql)
            continue
        extra.append(SchemaEntry(rowid, type_, name, tbl_name))
        if not _is_fts(name):
            problem = problem or f"duplicated schema entry for {type_} {name}, which is not part of the full-text index"
        elif first[key] != (tbl_name, rootpage, sql):
            problem = problem or f"the duplicated entries for {type_} {name} differ from each other"
    return extra, problem


def diagnose(path: str | os.PathLike) -> Diagnosis:
    """Read the schema table (through ``writable_schema``, which tolerates a schema that
    does not parse) and say whether the file has exactly the healable pattern."""
    p = absolute(path)
    failure = _schema_loads(p)
    conn = sqlite3.connect(file_uri(p, mode="ro"), uri=True, timeout=DEFAULT_BUSY_TIMEOUT)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        rows = conn.execute(
            "SELECT rowid, type, name, tbl_name, rootpage, sql FROM sqlite_master"
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        return Diagnosis(p, False, [], f"the schema table cannot be read ({exc})")
    finally:
        conn.close()
    extra, problem = _duplicates(rows)
    if failure is not None and not extra:
        problem = f"the schema does not load ({failure}) and holds no duplicated entry"
    return Diagnosis(p, failure is None, extra, problem)


def _is_duplicate_schema_error(exc: BaseException) -> bool:
    text = str(exc.__cause__ or exc).lower()
    return "malformed database schema" in text and "already exists" in text


# --------------------------------------------------------------------------- the open path

def probe_or_heal(path: str | os.PathLike, *, read_only: bool) -> RepairReport | None:
    """``files.probe_database``, healing the one pattern above on a writable open.

    Returns the report when it healed, None when the file was fine. Every other failure
    is raised as the probe raised it (nothing written); a read-only open never heals:
    it refuses with the command that does.
    """
    try:
        probe_database(path)
        return None
    except DatabaseDamagedError as exc:
        if not _is_duplicate_schema_error(exc) or not diagnose(path).healable:
            raise
        if read_only:
            raise DatabaseDamagedError(
                f"{path} has duplicated full-text entries in its schema ({exc.__cause__}); "
                f"it is opened read-only, so it was not healed: {REPAIR_HINT}"
            ) from exc
    report = repair(path)  # (another process may have healed it meanwhile: "healthy")
    if report.state == "healed":
        # An open healed the file on its own: say so where operators look.
        log.warning(
            "%s: removed %d duplicated full-text schema entr%s (upstream #43149); the file "
            "as it was is kept at %s", path, len(report.removed),
            "y" if len(report.removed) == 1 else "ies", report.backup[0],
        )
    probe_database(path)
    return report


# --------------------------------------------------------------------------- repair

def repair(path: str | os.PathLike, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> RepairReport:
    """Heal duplicated full-text schema entries (see the module docstring).

    Returns ``state="healthy"`` when the schema loads and holds no duplicate. Raises
    ``DatabaseDamagedError`` (file untouched) for any other damage,
    ``StoreInUseError`` when another connection has the file open, and
    ``DatabaseDamagedError`` naming the backup when the healed file fails verification.
    """
    from .ops import migration_lock

    started = time.monotonic()
    p = absolute(path)
    with migration_lock(p):
        diagnosis = diagnose(p)
        if diagnosis.healthy:
            return RepairReport(str(p), "healthy", seconds=time.monotonic() - started)
        if not diagnosis.healable:
            _refuse(p, diagnosis)
        with attempt(p):  # bounded: attempts, backups, room (``repair_limits``)
            backup, removed = _heal_exclusively(p, busy_timeout)
            _verify(p, backup)
    return RepairReport(str(p), "healed", [str(b) for b in backup], removed, "ok",
                        time.monotonic() - started)


def _refuse(p: Path, diagnosis: Diagnosis) -> None:
    if "not a database" in (diagnosis.problem or ""):
        raise NotADatabaseError(f"{p} is not a SQLite database ({diagnosis.problem}); {RECOVER_HINT}")
    raise DatabaseDamagedError(
        f"{p} is damaged in a way `maintenance repair` does not heal ({diagnosis.problem}); "
        f"it was left untouched. {RECOVER_HINT}"
    )


def _heal_exclusively(p: Path, busy_timeout: float) -> tuple[list[Path], list[SchemaEntry]]:
    # The file diagnosed; a rename over it meanwhile must not get the old one "healed"
    # (upstream #89332 repaired the wrong file): checked under the lock, and again
    # before the first write.
    watch = FileWatch(p)
    conn = sqlite3.connect(p, isolation_level=None, timeout=busy_timeout)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        try:
            conn.execute("BEGIN EXCLUSIVE")
            rows = conn.execute(
                "SELECT rowid, type, name, tbl_name, rootpage, sql FROM sqlite_master"
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if is_busy_error(exc):
                raise StoreInUseError(
                    f"{p} has duplicated full-text entries in its schema, but another "
                    "connection has the file open, so it was not healed (a repair must "
                    "never race a writer). Stop Hermes (gateway, cron, other sessions) and "
                    f"run `hermes-store maintenance repair --db {p}`."
                ) from exc
            raise
        # Decide again under the lock: the file may have changed since the diagnosis.
        removed, problem = _duplicates(rows)
        if problem or not removed:
            conn.execute("ROLLBACK")
            _refuse(p, Diagnosis(p, False, removed, problem or "no duplicated entry any more"))
        _still_the_file(conn, watch)
        backup = _backup(p)
        _still_the_file(conn, watch)
        for entry in removed:
            conn.execute("DELETE FROM sqlite_master WHERE rowid = ?", (entry.rowid,))
        cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
        # Other connections re-read the schema when the cookie moves.
        conn.execute(f"PRAGMA schema_version={int(cookie) + 1}")
        conn.execute("COMMIT")
        return backup, removed
    finally:
        conn.close()


def _still_the_file(conn, watch: FileWatch) -> None:
    if watch.replaced():
        conn.execute("ROLLBACK")
        watch.check()  # StoreReplacedError naming the path


def _backup(p: Path, kind: str = "schema-backup") -> list[Path]:
    """Byte copies of the file and its sidecars, made by a child process (this one holds
    the exclusive lock, which closing any descriptor of the file here would drop); the
    kept one when a backup of the same content exists (``repair_limits``)."""
    return backup_before_repair(p, lambda base: _copy(p, base), kind=kind)


def _copy(p: Path, base: Path) -> list[Path]:
    pairs = [(p, base)] + [
        (Path(f"{p}{s}"), Path(f"{base}{s}")) for s in ("-wal", "-shm") if Path(f"{p}{s}").exists()
    ]
    done = copy_in_child(pairs)  # byte for byte, owner-only, never over a file
    if done.returncode != 0:
        for _src, dst in pairs:
            dst.unlink(missing_ok=True)
        from ....errors import HermesStoreError

        raise HermesStoreError(
            f"could not copy {p} before healing it, so it was left untouched: "
            f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
        )
    return [dst for _src, dst in pairs]


def _verify(p: Path, backup: list[Path]) -> None:
    conn = sqlite3.connect(p, isolation_level=None, timeout=DEFAULT_BUSY_TIMEOUT)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        problems, _fts = integrity_problems(conn, "integrity_check")
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    finally:
        conn.close()
    if problems:
        raise DatabaseDamagedError(
            f"{p}: the duplicated full-text schema entries were removed, but the file is still "
            f"damaged ({'; '.join(problems[:3])}). The file as it was before is kept at "
            f"{backup[0]}; {RECOVER_HINT}"
        )
