"""How far a repair of a file may go (issue 31, row 7; upstream #86747, #69603, #87409).

Upstream's agent repaired a damaged file at every start and took a full backup before
each attempt; the repair kept failing, and one user had 105 attempts and 89 GB of
copies. Every repair here — ``maintenance repair``, the open that heals duplicated
schema rows (``repair.py``), the agent shim's full-text rebuild (``agent/health.py``) —
runs inside these bounds:

* **attempts** (:func:`attempt`): one per file per process, and :data:`MAX_ATTEMPTS`
  per file across restarts, counted in a ledger beside it (``<db>.repair-ledger.json``,
  JSON, 0600) under the file's fingerprint: its size, mtime and a digest of its
  100-byte header, read by a child process (decision D19). What the attempt itself
  changes stays on the same count (the entry follows the file's new fingerprint); a
  file changed by anything else (new writes, a restore) is another file, with a budget
  of its own. An attempt counts from its start, so one killed midway counted; one that
  its surroundings refused (another process has the file open, no room for the backup)
  does not count.
* **backups** (:func:`backup_before_repair`): a repair copies the file first, unless a
  backup of the same content is kept already: sha256 of the file and its ``-wal``, read
  by a child process (the ``-shm`` is left out: SQLite rebuilds it from the log, and it
  changes at every open). Only the newest :data:`KEEP_BACKUPS` backups the ledger
  recorded are kept; older ones are deleted (never a file the ledger did not make).
* **room** (:func:`require_room`): no copy unless the volume keeps
  ``max(MIN_HEADROOM, HEADROOM_SHARE of the volume)`` free after it; otherwise the
  refusal names the bytes needed and the bytes free.

A refusal is ``RepairRefusedError`` (a ``DatabaseDamagedError``: the file is damaged,
and it was left as it was), naming the way out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from ....errors import RECOVER_HINT, RepairRefusedError, StoreBusyError, StoreFullError
from .ops import digests_in_child, head_in_child, ledger_lock
from .uri import absolute

#: repair attempts of one file (one fingerprint) across processes and restarts
MAX_ATTEMPTS = 3
#: backups the ledger keeps; the older ones are deleted
KEEP_BACKUPS = 3
#: free space a copy must leave on its volume: the larger of these two
MIN_HEADROOM = 256 * 1024 * 1024
HEADROOM_SHARE = 0.02
#: fingerprints the ledger remembers (the oldest are forgotten first)
LEDGER_FILES = 16
#: failures of the surroundings, not of the repair: they do not count as attempts
_NOT_AN_ATTEMPT = (StoreBusyError, StoreFullError, RepairRefusedError)

_TRIED: set[str] = set()  # files this process has attempted to repair
_ACTIVE: set[str] = set()  # ... and is repairing now (a nested repair is the same one)
_LOCK = threading.Lock()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# --------------------------------------------------------------------------- room

def volume_space(directory: Path) -> tuple[int, int]:
    """(bytes free to this user, bytes in all) of the volume holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def room_needed(copy_bytes: int, volume_bytes: int) -> int:
    """Free bytes a copy of ``copy_bytes`` needs on a volume of ``volume_bytes``."""
    return copy_bytes + max(MIN_HEADROOM, int(volume_bytes * HEADROOM_SHARE))


def require_room(path: Path, copy_bytes: int) -> None:
    """Raise ``RepairRefusedError`` naming the figures unless the volume of ``path``
    keeps enough free space after a copy of ``copy_bytes``."""
    free, total = volume_space(path.parent)
    needed = room_needed(copy_bytes, total)
    if free >= needed:
        return
    raise RepairRefusedError(
        f"{path} was not repaired: the backup a repair takes first needs {needed} bytes "
        f"free on its volume ({_mib(copy_bytes)} for the copy and {_mib(needed - copy_bytes)} "
        f"left free after it), and {free} bytes free ({_mib(free)}) are there. Nothing was "
        "copied or changed. Free some space and try again, or salvage its rows onto "
        f"another volume: {RECOVER_HINT.replace('NEW.db', '/other/volume/NEW.db')}"
    )


# --------------------------------------------------------------------------- the ledger

def ledger_path(path: Path) -> Path:
    return Path(f"{path}.repair-ledger.json")


def _read(path: Path) -> dict:
    try:
        data = json.loads(ledger_path(path).read_text())
    except (OSError, ValueError):
        data = {}  # none yet, or unreadable (a crash while writing it): start over
    if not isinstance(data, dict):
        data = {}
    data.setdefault("files", {})
    data.setdefault("backups", [])
    return data


def _write(path: Path, data: dict) -> None:
    target = ledger_path(path)
    tmp = target.with_name(f".{target.name}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=1, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)


@contextlib.contextmanager
def _ledger(path: Path) -> Iterator[dict]:
    """The ledger of ``path``, read and written back under its lock."""
    with ledger_lock(path):
        data = _read(path)
        yield data
        files = data["files"]
        for stale in sorted(files, key=lambda k: files[k].get("last", ""))[:-LEDGER_FILES]:
            del files[stale]
        if files or data["backups"]:
            _write(path, data)
        else:  # nothing to remember: nothing left beside the store
            ledger_path(path).unlink(missing_ok=True)


def fingerprint(path: Path) -> str:
    """Size, mtime and a digest of the header of the file at ``path`` (the header read by
    a child process: D19)."""
    st = os.stat(path)
    header = hashlib.sha256(head_in_child(path, 100)).hexdigest()[:16]
    return f"{st.st_size}:{st.st_mtime_ns}:{header}"


# --------------------------------------------------------------------------- attempts

class Attempt:
    """One repair attempt (:func:`attempt`): ``failed(reason)`` records a failure the
    repair reports instead of raising."""

    def __init__(self) -> None:
        self.failure: str | None = None

    def failed(self, reason: str) -> None:
        self.failure = reason


@contextlib.contextmanager
def attempt(path: str | os.PathLike) -> Iterator[Attempt]:
    """A repair attempt of the file at ``path`` within its budget (module docstring).

    Raises ``RepairRefusedError`` before anything is done when this process attempted
    the file already, or the ledger holds :data:`MAX_ATTEMPTS` for the file as it is.
    An exception out of the block, or ``Attempt.failed``, records a failure; a
    refusal of the surroundings (busy, full, no room) un-counts the attempt. A repair
    nested in another of the same file in this process is part of it.
    """
    p = absolute(path)
    key = str(p)
    with _LOCK:
        nested = key in _ACTIVE
        if not nested and key in _TRIED:
            raise RepairRefusedError(
                f"{p} was not repaired: this process attempted it once already, and a "
                "repair that failed would fail the same way again (repair attempts are "
                f"refused after one per process). Nothing was copied or changed; {RECOVER_HINT}."
            )
        _TRIED.add(key)
        _ACTIVE.add(key)
    if nested:
        yield Attempt()
        return
    try:
        before = _count(p)
        current = Attempt()
        try:
            yield current
        except _NOT_AN_ATTEMPT:
            _uncount(p, before)
            with _LOCK:
                _TRIED.discard(key)
            raise
        except BaseException as exc:
            _settle(p, before, f"{type(exc).__name__}: {exc}")
            raise
        _settle(p, before, current.failure)
    finally:
        with _LOCK:
            _ACTIVE.discard(key)


def _count(p: Path) -> str:
    key = fingerprint(p)
    with _ledger(p) as data:
        entry = data["files"].setdefault(key, {"attempts": 0})
        if entry["attempts"] >= MAX_ATTEMPTS:
            raise RepairRefusedError(
                f"{p} was not repaired: {entry['attempts']} repair attempts of the file as "
                f"it is now failed already (the last at {entry.get('last', '?')}: "
                f"{entry.get('error') or 'it did not finish'}), and further attempts are "
                f"refused: each would fail the same way. Nothing was copied or changed; "
                f"{RECOVER_HINT} (the count is kept in {ledger_path(p)})."
            )
        entry["attempts"] += 1
        entry["last"] = _now()
        entry.pop("error", None)
    return key


def _uncount(p: Path, key: str) -> None:
    with _ledger(p) as data:
        entry = data["files"].get(key)
        if entry is not None:
            entry["attempts"] -= 1
            if entry["attempts"] <= 0:
                del data["files"][key]


def _settle(p: Path, key: str, failure: str | None) -> None:
    """Record how the attempt ended: a success forgets the file's count; a failure's
    count moves to the fingerprint the file has now (what the attempt changed itself
    does not make it another file)."""
    try:
        after = fingerprint(p)
    except OSError:
        after = key
    with _ledger(p) as data:
        entry = data["files"].pop(key, {"attempts": 1})
        if failure is None:
            return
        entry["error"] = failure[:500]
        data["files"][after] = entry


# --------------------------------------------------------------------------- backups

def backup_before_repair(path: str | os.PathLike, copy: Callable[[Path], list[Path]], *,
                         kind: str) -> list[Path]:
    """The backup a repair of ``path`` takes first: ``copy(dest)`` makes it at
    ``<name>.<kind>-<UTC>`` and returns the files it wrote (the copy and any sidecars).
    When a backup of the same content is kept already, that one is returned and nothing
    is copied. Raises ``RepairRefusedError`` when the volume lacks room (nothing
    copied); keeps the newest :data:`KEEP_BACKUPS`."""
    p = absolute(path)
    sources = [p, Path(f"{p}-wal")]
    digests = digests_in_child(sources)
    content = hashlib.sha256(
        "|".join(d[2] if d else "-" for d in digests).encode()).hexdigest()
    with _ledger(p) as data:
        for kept in data["backups"]:
            if kept.get("content") == content and all(Path(f).exists() for f in kept["files"]):
                return [Path(f) for f in kept["files"]]
        sizes = [os.stat(s).st_size for s in sources + [Path(f"{p}-shm")] if s.exists()]
        require_room(p, sum(sizes))
        files = copy(_unused_name(p, kind))
        data["backups"].append({"files": [str(f) for f in files], "content": content,
                                "made": _now()})
        for old in data["backups"][:-KEEP_BACKUPS]:
            for name in old["files"]:
                Path(name).unlink(missing_ok=True)
        data["backups"] = data["backups"][-KEEP_BACKUPS:]
    return files


def _unused_name(p: Path, kind: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base, n = p.with_name(f"{p.name}.{kind}-{stamp}"), 1
    while any(os.path.lexists(f"{base}{s}") for s in ("", "-wal", "-shm")):
        n += 1
        base = p.with_name(f"{p.name}.{kind}-{stamp}-{n}")
    return base


__all__ = ["Attempt", "HEADROOM_SHARE", "KEEP_BACKUPS", "MAX_ATTEMPTS", "MIN_HEADROOM",
           "attempt", "backup_before_repair", "fingerprint", "ledger_path", "require_room",
           "room_needed", "volume_space"]
