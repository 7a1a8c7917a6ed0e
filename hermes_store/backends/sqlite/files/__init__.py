"""The operations a file store has and a server does not (``Backend.files``): a
consistent online backup, salvage of a damaged file, healing duplicated FTS schema rows,
switching the journal mode offline, and what SQLite says of a file's health — including
``findings``: the SQLite library and the journal mode against the filesystem. The CLI's
``db backup``, ``recover``, ``maintenance repair``/``journal-mode`` and ``doctor`` use
them through the backend."""

from __future__ import annotations


class SQLiteFiles:
    """``Backend.files`` of the SQLite backend."""

    def probe(self, path) -> None:
        """Raise the package's error when ``path`` cannot be opened as a store (not a
        database, damaged, too new…), reading it through SQLite only."""
        from .probe import probe_database

        probe_database(path)

    def diagnose(self, path):
        """What ``repair`` would do for ``path`` (``repair.Diagnosis``: ``healable``…)."""
        from .repair import diagnose

        return diagnose(path)

    def make_durable(self, conn) -> None:
        """On macOS, give a plain ``sqlite3`` connection (the agent's own databases) the
        durability pragmas the store's connections get (``engine.durability_pragmas``:
        FULL sync, full fsync); elsewhere leave it as it is, as upstream's helper did."""
        from ..engine import durability_pragmas, full_fsync_pragmas

        if full_fsync_pragmas():
            for pragma in durability_pragmas():
                conn.execute(pragma)

    def choose_journal_mode(self, mode: str, *, source: str = "journal_mode") -> None:
        """Every store this process opens from now on takes journal mode ``mode``
        ("wal" or "delete"; ``HERMES_STATE_JOURNAL_MODE``); a bad value is refused."""
        import os

        from .journal import ENV, normalize

        os.environ[ENV] = normalize(mode, source=source)

    def set_aside_blank(self, path):
        """Set aside a file that holds nothing SQLite can read (empty or zeroed, with its
        sidecars: ``blank.py``) and put a fresh empty file in its place; where it went,
        or None when the file is neither."""
        from .blank import set_aside_blank

        return set_aside_blank(path)

    def backup(self, source, dest, **options):
        from .backup import backup

        return backup(source, dest, **options)

    def recover(self, source, output, **options):
        from .recovery import recover

        return recover(source, output, **options)

    def repair(self, path, **options):
        from .repair import repair

        return repair(path, **options)

    def repair_attempt(self, path):
        """A context for one repair attempt of ``path`` within its bounds (one per
        process, three per file: ``repair_limits.attempt``); ``RepairRefusedError``
        beyond them."""
        from .repair_limits import attempt

        return attempt(path)

    def backup_before_repair(self, path):
        """The consistent backup (``backup``) a repair of ``path`` takes first: none when
        one of the same content is kept, refused without room on the volume, the newest
        three kept (``repair_limits``). Returns its path."""
        from .backup import backup
        from .repair_limits import backup_before_repair

        def copy(dest):
            backup(path, dest)
            return [dest]

        return backup_before_repair(path, copy, kind="repair-backup")[0]

    def keep_damaged_copy(self, path):
        """Byte copies of ``path`` and its sidecars (a child process copies), for a file
        no repair can read, bounded as ``backup_before_repair``; returns the copy's path."""
        from .repair import _backup

        return _backup(path, kind="damaged-copy")[0]

    def health(self, path, *, quick: bool = False):
        from .backup import file_health

        return file_health(path, quick=quick)

    def journal_mode(self, path):
        from .backup import journal_mode

        return journal_mode(path)

    def set_journal_mode(self, path, mode: str) -> tuple[str, str]:
        """(before, after); refused while another connection has the file open."""
        from .journal import convert

        return convert(path, mode)

    def findings(self, path, journal_mode: str | None) -> list[tuple[str, str, str]]:
        """``doctor``'s (check, status, detail) for the library and the journal mode."""
        return [_library_finding(), _journal_finding(path, journal_mode)]


def _library_finding() -> tuple[str, str, str]:
    """Which SQLite library runs the store here, how it was chosen, and how the
    WAL-reset race is closed on it; the opt-in library's hazard in words."""
    from ..library import DEFAULT, HAZARD, library

    lib = library()
    detail = lib.summary()
    if lib.name != DEFAULT:
        detail += f". {HAZARD}: keep it to a process that opens state.db only through the store"
    return ("sqlite", "ok", detail)


def _journal_finding(path, mode: str | None) -> tuple[str, str, str]:
    """The file's journal mode against what its filesystem (or an explicit setting)
    calls for: WAL on a VM share or a network mount is a problem, with the fix."""
    from . import journal

    mode = (mode or "").lower()
    plan = journal.plan(path)
    fs = plan.filesystem
    where = f"on {fs.describe()}"
    fix = plan.conversion_hint(path)
    if mode == "wal" and not fs.wal_safe:
        if plan.mode == "wal":  # asked for explicitly: the operator's call
            return ("journal_mode", "warning",
                    f"wal {where}, as {journal.ENV}=wal asks; {fs.why_not_wal()}")
        return ("journal_mode", "problem", f"wal {where}: {fs.why_not_wal()}, so concurrent "
                f"writers can corrupt it. Fix: {fix} (or move state.db to a local disk or a "
                "named volume)")
    if mode == "wal" and plan.mode == "delete":
        return ("journal_mode", "warning", f"wal {where}, but delete is asked for "
                f"({journal.ENV}); an open never switches a WAL file: {fix}")
    if mode == "wal":
        return ("journal_mode", "ok", f"wal {where}")
    if mode == "delete" and plan.mode == "delete":
        why = fs.why_not_wal() if not plan.explicit else f"asked for by {journal.ENV}"
        return ("journal_mode", "ok", f"delete {where} ({why})")
    return ("journal_mode", "warning", f"journal_mode={mode or 'unknown'} {where} (WAL "
            "expected here: the next store opened on it switches it to WAL)")


FILES = SQLiteFiles()

__all__ = ["FILES", "SQLiteFiles"]
