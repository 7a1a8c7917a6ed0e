"""Salvage of a damaged ``state.db`` (``hermes-store recover``); the backup is ``backup.py``.

``recover(source, output)`` — salvage the rows of a damaged file into a fresh file at
head. What it does, in order:

1. Refuses an output path that exists (or has sidecars) or that is the source.
2. Fingerprints the source and its sidecars, then copies them into a private work
   directory *before SQLite opens anything*: the damaged file is never opened, let alone
   written (its header may say WAL, and even a read-only open of a WAL file can touch the
   ``-shm``). The fingerprint is checked again at the end. A child process reads and
   copies the files (``fileops``): the source may be live in this process (a store
   open on it), and closing a descriptor of it here would drop that store's locks.
3. Creates the output at head with ``migrate.upgrade`` (with an identity of its own,
   ``stamp.py``, never the source's) and drops its FTS layer so the copy does not index
   row by row.
4. Copies every row-bearing table it can read: each head table present in the source,
   plus any other ordinary table (with the source's own DDL). Reads walk the table
   b-tree by rowid (``NOT INDEXED``, so damaged indexes do not matter), and a range that
   fails is bisected down to single rowids, so one bad page loses only its own rows.
   Text that is not valid UTF-8 is kept with replacement characters.
5. Repairs references the lost rows broke (messages whose session is gone get a
   placeholder session, ``source='recovered'``; dangling parent / prompt links are
   cleared), regenerates the FTS indexes from ``messages``, and verifies the output:
   ``integrity_check``, ``foreign_key_check``, FTS integrity, row counts.
6. Writes the output under a temporary name and renames it into place only when
   verified. The result is never installed over the source.

This module works on SQLite files as files (pages, rowids, pragmas), so it speaks
SQLite directly; everything about rows and schema comes from ``hermes_store.schema``.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ....errors import NotADatabaseError
from .backup import SIDECARS, RecoveryError
from .backup import integrity as _integrity
#: the package's SQLite library (library.py), never `import sqlite3`: one copy of SQLite
#: per process
from ..library import SQLITE as sqlite3
from .ops import copy_in_child, digests_in_child
from .stamp import IDENTITY_KEY
from .uri import absolute, file_uri

#: rows per read while the table reads cleanly
CHUNK = 1000
#: ``state_meta`` keys the FTS layer owns: regenerated, never copied
_GENERATED_META_PREFIXES = ("fts_",)
#: ``state_meta`` keys of the file itself: the output has its own (``stamp.py``: its
#: identity, so the output restored over the live store is seen as another file)
_OWN_META_KEYS = (IDENTITY_KEY,)
#: when the end of a damaged table cannot be read, look this far past the last good rowid
_BLIND_SPAN = 1_000_000
#: ... but stop after this many windows in a row where nothing could be read
_BLIND_DEAD_WINDOWS = 3

ProgressCallback = Callable[[str, int, int], None]


@dataclass
class TableResult:
    """Per table: rows read from the source, rows written to the output, and rowid ranges
    that could not be read (``lost_estimate`` assumes every rowid in them was a row,
    an upper bound for AUTOINCREMENT-style dense ids)."""

    name: str
    found: int = 0
    copied: int = 0
    rejected: int = 0
    lost_ranges: list[tuple[int, int]] = field(default_factory=list)
    unreadable: str | None = None

    @property
    def lost_estimate(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.lost_ranges)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["lost_ranges"] = [list(r) for r in self.lost_ranges]
        d["lost_estimate"] = self.lost_estimate
        return d


@dataclass
class RecoveryReport:
    source: str
    output: str
    source_integrity: list[str] = field(default_factory=list)
    tables: list[TableResult] = field(default_factory=list)
    placeholder_sessions: int = 0
    detached_links: int = 0
    dropped_orphans: dict[str, int] = field(default_factory=dict)
    fts_rebuilt: list[str] = field(default_factory=list)
    verification: dict = field(default_factory=dict)
    source_unchanged: bool = True
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every row of every table was read and written."""
        return all(not t.lost_ranges and not t.unreadable and not t.rejected for t in self.tables)

    @property
    def verified(self) -> bool:
        return bool(self.verification) and all(v == "ok" for v in self.verification.values())

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "output": self.output,
            "complete": self.complete,
            "verified": self.verified,
            "source_unchanged": self.source_unchanged,
            "source_integrity": self.source_integrity,
            "tables": [t.as_dict() for t in self.tables],
            "placeholder_sessions": self.placeholder_sessions,
            "detached_links": self.detached_links,
            "dropped_orphans": self.dropped_orphans,
            "fts_rebuilt": self.fts_rebuilt,
            "verification": self.verification,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------- backup

# --------------------------------------------------------------------------- files

def _fingerprint(path: Path) -> tuple:
    """Size, mtime and SHA-256 of the file and each sidecar (None where absent), read by
    a child process: the file may be live in this one (``fileops``)."""
    candidates = [path] + [Path(f"{path}{s}") for s in SIDECARS]
    try:
        found = digests_in_child(candidates)
    except OSError as exc:
        raise RecoveryError(f"cannot read {path}: {exc}") from exc
    return tuple((c.name, *f) if f is not None else (c.name, None)
                 for c, f in zip(candidates, found))


def _check_paths(source: Path, output: Path) -> None:
    if not source.is_file():
        raise RecoveryError(f"{source} does not exist or is not a file: nothing to recover")
    if output.exists() or any(Path(f"{output}{s}").exists() for s in SIDECARS):
        raise RecoveryError(
            f"{output} already exists: recovery never overwrites a file; choose a new --output path"
        )
    if output.resolve() == source.resolve():
        raise RecoveryError("the output must be a new file, not the damaged source itself")
    if not output.parent.is_dir():
        raise RecoveryError(f"{output.parent} is not a directory: create it first")


def _copy_bundle(source: Path, work: Path) -> Path:
    """The file and its -wal/-journal copied into ``work`` by a child process: closing a
    descriptor of a file this process has open through SQLite would drop its locks."""
    copy = work / "source.db"
    # -shm is rebuilt from the WAL by SQLite; copying a live one would be stale anyway.
    pairs = [(source, copy)] + [(Path(f"{source}{s}"), Path(f"{copy}{s}"))
                                for s in ("-wal", "-journal") if Path(f"{source}{s}").exists()]
    done = copy_in_child(pairs)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()
        raise RecoveryError(f"cannot copy {source} aside to recover it: "
                            f"{tail[-1] if tail else done.returncode}")
    return copy


# --------------------------------------------------------------------------- reading

def _open_copy(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True, isolation_level=None)
    # Intact text is valid UTF-8 and decodes unchanged; garbage must not stop the copy.
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise NotADatabaseError(
            f"{path.name}: SQLite cannot read the file's schema ({exc}); the header or the "
            "schema page is destroyed, so no table can be located. Restore a backup."
        ) from exc
    return conn


def _source_tables(src: sqlite3.Connection) -> dict[str, str]:
    """Ordinary tables of the source: name -> CREATE sql."""
    rows = src.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
    ).fetchall()
    return {
        name: sql
        for name, sql in rows
        if not name.startswith("sqlite_") and not sql.upper().startswith("CREATE VIRTUAL")
    }


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _has_rowid(sql: str) -> bool:
    return "WITHOUT ROWID" not in " ".join(sql.upper().split())


def _read_range(src, table: str, cols: str, lo: int, hi: int) -> list[tuple]:
    if lo == hi:
        # one rowid is looked up, not scanned: a range scan steps on to the next row to
        # see where the range ends, and fails on a damaged page after a good last row
        return src.execute(f'SELECT rowid, {cols} FROM "{table}" NOT INDEXED WHERE rowid = ?',
                           (lo,)).fetchall()
    return src.execute(
        f'SELECT rowid, {cols} FROM "{table}" NOT INDEXED WHERE rowid BETWEEN ? AND ? ORDER BY rowid',
        (lo, hi),
    ).fetchall()


def _salvage(src, table: str, cols: str, lo: int, hi: int, result: TableResult) -> Iterator[list[tuple]]:
    """Rows of [lo, hi], bisecting around unreadable pages; lost ranges go to ``result``."""
    try:
        rows = _read_range(src, table, cols, lo, hi)
    except sqlite3.DatabaseError:
        if lo == hi:
            if result.lost_ranges and result.lost_ranges[-1][1] == lo - 1:
                result.lost_ranges[-1] = (result.lost_ranges[-1][0], lo)
            else:
                result.lost_ranges.append((lo, lo))
            return
        mid = (lo + hi) // 2
        yield from _salvage(src, table, cols, lo, mid, result)
        yield from _salvage(src, table, cols, mid + 1, hi, result)
        return
    if rows:
        yield rows


def _max_rowid(src, table: str) -> int | None:
    try:
        return src.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
    except sqlite3.DatabaseError:
        pass
    try:
        row = src.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        return row[0] if row else None
    except sqlite3.DatabaseError:
        return None


def _iter_rows(src, table: str, columns: list[str], result: TableResult) -> Iterator[list[tuple]]:
    """Batches of (rowid, *columns) rows: a fast keyset scan until a read fails, then
    window-by-window salvage of the rest."""
    cols = ", ".join(f'"{c}"' for c in columns)
    last = None
    while True:
        try:
            if last is None:
                query = f'SELECT rowid, {cols} FROM "{table}" NOT INDEXED ORDER BY rowid LIMIT ?'
                rows = src.execute(query, (CHUNK,)).fetchall()
            else:
                query = (
                    f'SELECT rowid, {cols} FROM "{table}" NOT INDEXED WHERE rowid > ? '
                    "ORDER BY rowid LIMIT ?"
                )
                rows = src.execute(query, (last, CHUNK)).fetchall()
        except sqlite3.DatabaseError:
            break
        if not rows:
            return
        yield rows
        last = rows[-1][0]

    # The scan hit damage after `last`: read fixed rowid windows, bisecting failures.
    start = (last + 1) if last is not None else _min_rowid_guess(src, table)
    end = _max_rowid(src, table)
    blind = end is None or end < start
    if not _any_readable(src, table, start, end):
        # Every probe fails: the table's root page is gone, and with it every row.
        result.unreadable = "the table's root page is damaged: no row could be reached"
        if not blind:
            result.lost_ranges.append((start, end))
        return
    if blind:
        end = start + _BLIND_SPAN
    lo, dead = start, 0
    while lo <= end:
        # Jump over empty stretches when the b-tree lets us.
        try:
            nxt = src.execute(
                f'SELECT min(rowid) FROM "{table}" NOT INDEXED WHERE rowid >= ?', (lo,)
            ).fetchone()[0]
            if nxt is None:
                return
            lo = max(lo, nxt)
        except sqlite3.DatabaseError:
            pass
        hi = min(lo + CHUNK - 1, end)
        got = 0
        for batch in _salvage(src, table, cols, lo, hi, result):
            got += len(batch)
            yield batch
        dead = dead + 1 if got == 0 else 0
        if blind and dead >= _BLIND_DEAD_WINDOWS:
            result.unreadable = (
                f"the end of the table could not be read; gave up {dead} unreadable windows "
                f"after rowid {lo - 1 - (dead - 1) * CHUNK}"
            )
            return
        lo = hi + 1


def _any_readable(src, table: str, start: int, end: int | None) -> bool:
    probes = [start] + ([(start + end) // 2, end] if end is not None and end > start else [start + (1 << 20), 1 << 40])
    for rowid in probes:
        try:
            src.execute(f'SELECT rowid FROM "{table}" NOT INDEXED WHERE rowid >= ? LIMIT 1', (rowid,)).fetchall()
            return True
        except sqlite3.DatabaseError:
            continue
    return False


def _min_rowid_guess(src, table: str) -> int:
    try:
        value = src.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
        return value if value is not None else 1
    except sqlite3.DatabaseError:
        return 1  # SQLite hands out rowids from 1 up


# --------------------------------------------------------------------------- recover

def recover(
    source: str | os.PathLike,
    output: str | os.PathLike,
    *,
    work_dir: str | os.PathLike | None = None,
    progress: ProgressCallback | None = None,
) -> RecoveryReport:
    """Copy every readable row of ``source`` into a new head file ``output``.

    ``progress(table, done_tables, total_tables)`` after each table. Raises
    ``RecoveryError`` for bad paths, ``NotADatabaseError`` when nothing can be located.
    The source is never opened by SQLite, only copied.
    """
    from ..migrate.commands import upgrade_file

    started = time.monotonic()
    source = absolute(source)
    output = absolute(output)
    _check_paths(source, output)
    before = _fingerprint(source)
    report = RecoveryReport(source=str(source), output=str(output))

    with tempfile.TemporaryDirectory(prefix="hermes-recover-", dir=work_dir) as tmp:
        work = Path(tmp)
        src_path = _copy_bundle(source, work)
        src = _open_copy(src_path)
        try:
            report.source_integrity = _integrity(src)
            staging = work / "output.db"
            upgrade_file(staging)
            _copy_all(src, staging, report, progress)
        finally:
            src.close()
        _finish(staging, report)
        report.source_unchanged = _fingerprint(source) == before
        if not report.verified:
            raise RecoveryError(
                f"the recovered file failed verification ({report.verification}); nothing "
                f"was written to {output}"
            )
        _install(staging, output)
    report.seconds = time.monotonic() - started
    return report


def _install(staging: Path, output: Path) -> None:
    """Copy the verified file next to ``output`` with the backup API (WAL frames
    included), then rename it into place so a half-written output never exists."""
    tmp = output.with_name(output.name + ".recovering")
    for leftover in [tmp] + [Path(f"{tmp}{s}") for s in SIDECARS]:
        leftover.unlink(missing_ok=True)
    src = sqlite3.connect(staging)
    dst = sqlite3.connect(tmp)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=WAL")  # the mode a head file runs in
    finally:
        dst.close()
        src.close()
    os.chmod(tmp, 0o600)
    for suffix in SIDECARS:
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    os.replace(tmp, output)


def _dest(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")  # parents may be among the lost rows
    return conn


def _copy_all(src: sqlite3.Connection, staging: Path, report: RecoveryReport, progress) -> None:
    from ....schema import metadata
    from ..fts import ddl as fts_ddl

    try:
        found = _source_tables(src)
    except sqlite3.DatabaseError as exc:
        raise NotADatabaseError(f"cannot list the tables of the source: {exc}") from exc
    head_order = [t.name for t in metadata.sorted_tables]
    names = [n for n in head_order if n in found and n != "schema_version"]
    # alembic_version: the output is stamped by its own upgrade
    extras = sorted(
        n for n in found
        if n not in head_order and n != "alembic_version" and not fts_ddl.is_fts_object(n)
    )

    dst = _dest(staging)
    try:
        _run_fts(staging, fts_ddl.drop_fts)
        for done, name in enumerate(names + extras, start=1):
            if name in extras:
                dst.execute(found[name])
            result = TableResult(name)
            report.tables.append(result)
            _copy_table(src, dst, name, found[name], result)
            if progress is not None:
                progress(name, done, len(names) + len(extras))
        _repair_references(dst, report)
        _recreate_indexes(src, dst, extras, report)
    finally:
        dst.close()


def _recreate_indexes(src, dst, tables: list[str], report: RecoveryReport) -> None:
    """The source's own indexes of tables copied with the source's DDL (head tables get
    theirs from the fresh file): a UNIQUE index is a rule of the data, not an extra."""
    results = {t.name: t for t in report.tables}
    for table in tables:
        try:
            indexes = src.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                "AND sql IS NOT NULL", (table,),
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            results[table].unreadable = f"its indexes could not be read: {exc}"
            continue
        for name, sql in indexes:
            try:
                dst.execute(sql)
            except sqlite3.DatabaseError as exc:
                results[table].unreadable = f"index {name} could not be re-created: {exc}"


def _copy_table(src, dst, name: str, sql: str, result: TableResult) -> None:
    src_cols = _columns(src, name)
    dst_cols = set(_columns(dst, name))
    columns = [c for c in src_cols if c in dst_cols]
    if not columns:
        result.unreadable = "no column in common with the head table"
        return
    placeholders = ", ".join("?" for _ in columns)
    insert = f'INSERT OR IGNORE INTO "{name}" ({", ".join(chr(34) + c + chr(34) for c in columns)}) VALUES ({placeholders})'
    skip = name == "state_meta" and "key" in columns
    key_at = columns.index("key") if skip else -1

    if not _has_rowid(sql):
        batches: Iterator[list[tuple]] = _read_whole(src, name, columns, result)
    else:
        batches = _iter_rows(src, name, columns, result)
    dst.execute("BEGIN")
    try:
        for batch in batches:
            values = [row[1:] for row in batch]
            if skip:
                values = [v for v in values if not str(v[key_at]).startswith(_GENERATED_META_PREFIXES)
                          and v[key_at] not in _OWN_META_KEYS]
            result.found += len(values)
            # rowcount counts the statement's own rows (total_changes would add the
            # display-order triggers' updates)
            written = max(dst.executemany(insert, values).rowcount, 0) if values else 0
            result.copied += written
            result.rejected += len(values) - written
        dst.execute("COMMIT")
    except BaseException:
        dst.execute("ROLLBACK")
        raise


def _read_whole(src, name: str, columns: list[str], result: TableResult) -> Iterator[list[tuple]]:
    cols = ", ".join(f'"{c}"' for c in columns)
    try:
        rows = src.execute(f'SELECT NULL, {cols} FROM "{name}"').fetchall()
    except sqlite3.DatabaseError as exc:
        result.unreadable = f"WITHOUT ROWID table could not be read: {exc}"
        return
    yield rows


def _repair_references(dst: sqlite3.Connection, report: RecoveryReport) -> None:
    """Make the output consistent where lost rows left references dangling."""
    dst.execute("BEGIN")
    try:
        orphans = dst.execute(
            "SELECT m.session_id, min(m.timestamp), count(*) FROM messages m "
            "LEFT JOIN sessions s ON s.id = m.session_id WHERE s.id IS NULL GROUP BY m.session_id"
        ).fetchall()
        for session_id, first_ts, count in orphans:
            dst.execute(
                "INSERT INTO sessions (id, source, started_at, message_count, title) "
                "VALUES (?, 'recovered', ?, ?, NULL)",
                (session_id, first_ts if first_ts is not None else time.time(), count),
            )
        report.placeholder_sessions = len(orphans)
        cur = dst.execute(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IS NOT NULL "
            "AND parent_session_id NOT IN (SELECT id FROM sessions)"
        )
        detached = cur.rowcount
        if "system_prompt_hash" in _columns(dst, "sessions"):
            cur = dst.execute(
                "UPDATE sessions SET system_prompt_hash = NULL WHERE system_prompt_hash IS NOT NULL "
                "AND system_prompt_hash NOT IN (SELECT hash FROM system_prompts)"
            )
            detached += cur.rowcount
        report.detached_links = detached
        # Anything else still dangling (e.g. usage rows of a lost session) cannot be
        # re-attached meaningfully: drop it and say so.
        for table, rowid, _parent, _fk in dst.execute("PRAGMA foreign_key_check").fetchall():
            dst.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))
            report.dropped_orphans[table] = report.dropped_orphans.get(table, 0) + 1
        dst.execute("COMMIT")
    except BaseException:
        dst.execute("ROLLBACK")
        raise
    for result in report.tables:
        dropped = report.dropped_orphans.get(result.name, 0)
        result.copied -= dropped


def _run_fts(path: Path, fn, **kwargs):
    from ....connections import writer
    from ..engine import create_engine

    engine = create_engine(path, foreign_keys=False)
    try:
        with writer(engine).begin() as conn:
            return fn(conn, **kwargs)
    finally:
        engine.dispose()


def _finish(staging: Path, report: RecoveryReport) -> None:
    from ..fts import ddl as fts_ddl
    from ..fts import maintenance

    report.fts_rebuilt = _run_fts(staging, fts_ddl.create_fts, fill=True)
    conn = sqlite3.connect(staging, isolation_level=None)
    try:
        checks = {}
        damage = _integrity(conn)
        checks["integrity_check"] = "ok" if not damage else "; ".join(damage)
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        checks["foreign_key_check"] = "ok" if not fk else f"{len(fk)} dangling references"
        mismatched = []
        for t in report.tables:
            if t.name == "state_meta":
                continue  # the fresh file has keys of its own
            expected = t.copied + (report.placeholder_sessions if t.name == "sessions" else 0)
            actual = conn.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0]
            if actual != expected:
                mismatched.append(f"{t.name}: expected {expected}, file has {actual}")
        checks["row_counts"] = "ok" if not mismatched else "; ".join(mismatched)
    finally:
        conn.close()
    problems = _run_fts(staging, maintenance.integrity_check)
    checks["fts"] = "ok" if not problems else "; ".join(problems)
    report.verification = checks
