"""The chaos run's verdict (``chaos.py``): every write a writer reported as acknowledged,
looked up in the file with plain ``sqlite3`` (never through the store), then in what
the store set aside beside it; and the file's integrity.

Each writer owns its sessions, and each message it writes starts with a marker unique
to the run (``w<slot>i<incarnation>n<seq>``), so a row is matched to the call that wrote
it. A ``replace_messages`` deletes what its session held: the acknowledged writes before
the last replace the file holds are *superseded*, not lost. That replace is found by its
markers, since a replace that raised (or whose writer was killed before it reported)
may or may not have committed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from hermes_store.backends.sqlite.library import dbapi, integrity_problems

sqlite3 = dbapi()  # the store's SQLite library: one copy of SQLite per process

SQLITE_HEADER = b"SQLite format 3\x00"
WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")


@dataclass
class Step:
    """One call of a writer on one of its sessions."""

    op: str  # create | append | replace
    acked: bool
    markers: tuple[str, ...] = ()
    message_id: int | None = None
    #: when the writer reported the call as returned (``time.monotonic()``)
    t: float | None = None


@dataclass
class Ledger:
    """What the writers reported, per session, in the order they called."""

    sessions: dict[str, list[Step]] = field(default_factory=dict)
    #: markers of calls that raised (the store said it wrote nothing)
    refused: set[str] = field(default_factory=set)

    def add(self, rec: dict) -> None:
        ev, op = rec.get("ev"), rec.get("op")
        if ev == "fail" and rec.get("role") == "writer":
            self.refused.update(rec.get("ms") or ())
            return
        if ev not in ("ack", "intent"):
            return
        steps = self.sessions.setdefault(rec["sid"], [])
        if op == "replace":
            if ev == "intent":
                steps.append(Step("replace", False, tuple(rec["ms"])))
            else:  # the intent just before it, same process
                steps[-1].acked, steps[-1].t = True, rec["t"]
        elif op == "append":
            steps.append(Step("append", True, (rec["m"],), rec["id"], rec["t"]))
        elif op == "create":
            steps.append(Step("create", True, (rec["sid"],), t=rec["t"]))

    def acknowledged(self) -> int:
        return sum(s.acked for steps in self.sessions.values() for s in steps)


@dataclass
class Image:
    """The rows of one database image: message id -> (session, marker), session ids."""

    messages: dict[int, tuple[str, str]]
    sessions: set[str]
    markers: dict[str, set[str]]  # session -> markers of its rows

    @classmethod
    def read(cls, path: Path) -> "Image":
        conn = sqlite3.connect(str(path), timeout=30)
        try:
            messages = {mid: (sid, (content or "").split(" ", 1)[0]) for mid, sid, content in
                        conn.execute("SELECT id, session_id, content FROM messages")}
            sessions = {r[0] for r in conn.execute("SELECT id FROM sessions")}
        finally:
            conn.close()
        markers: dict[str, set[str]] = {}
        for sid, marker in messages.values():
            markers.setdefault(sid, set()).add(marker)
        return cls(messages, sessions, markers)

    def has(self, sid: str, step: Step) -> bool:
        if step.op == "create":
            return sid in self.sessions
        if step.op == "append":
            return self.messages.get(step.message_id) == (sid, step.markers[0])
        return set(step.markers) <= self.markers.get(sid, set())


def judge(ledger: Ledger, image: Image) -> dict:
    """Acknowledged writes present, superseded and missing (with what is missing)."""
    present = superseded = 0
    missing: list[tuple[str, Step]] = []
    for sid, steps in ledger.sessions.items():
        held = image.markers.get(sid, set())
        # the replace the file holds: only the last committed one can have rows there
        last = max((i for i, s in enumerate(steps) if s.op == "replace"
                    and held.intersection(s.markers)), default=-1)
        for i, step in enumerate(steps):
            if not step.acked:
                continue
            if step.op != "create" and i < last:
                superseded += 1
            elif image.has(sid, step):
                present += 1
            else:
                missing.append((sid, step))
    written_anyway = sorted(m for m in ledger.refused
                            if any(m in held for held in image.markers.values())
                            or m in image.sessions)
    return {"present": present, "superseded": superseded, "missing": missing,
            "refused_but_written": written_anyway}


def describe(sid: str, step: Step) -> str:
    if step.op == "append":
        return f"append_message id={step.message_id} {step.markers[0]} (session {sid})"
    if step.op == "replace":
        return f"replace_messages {'/'.join(step.markers)} (session {sid})"
    return f"create_session {sid}"


# --------------------------------------------------------------------------- set aside

def _kind(path: Path) -> str:
    try:
        with path.open("rb") as fh:  # a set-aside file: no connection has it open
            head = fh.read(16)
    except OSError:
        return "unreadable"
    if head == SQLITE_HEADER:
        return "database"
    if head[:4] in WAL_MAGIC:
        return "wal"
    return "other"


def set_aside_images(places: list[Path], live: Path, ignore: set[str], work: Path,
                     *, read: bool) -> Iterator[dict]:
    """Every file the store left beside ``live`` (``places``: its directory, and where
    the run moved such files), one record at a time; with ``read`` each database image
    is read from copies in ``work``: a copy of a database, or a WAL it preserved over its
    own database image when it kept one, else over a copy of the live file."""
    entries = []
    for place in places:
        for entry in sorted(place.iterdir()) if place.is_dir() else ():
            if entry.name in ignore:
                continue
            files = sorted(p for p in entry.rglob("*") if p.is_file()) if entry.is_dir() else [entry]
            entries += [(f, _kind(f), place) for f in files]
    names = {f for f, _, _ in entries}
    for n, (path, kind, place) in enumerate(entries):
        record = {"file": str(path.relative_to(place.parent)), "kind": kind,
                  "bytes": path.stat().st_size}
        paired = kind == "database" and Path(f"{path}-wal") in names  # read with its WAL
        if read and kind in ("database", "wal") and not paired:
            copy = work / f"image{n}.db"
            own = Path(str(path)[:-4]) if kind == "wal" and str(path).endswith("-wal") else None
            if kind == "database":
                shutil.copyfile(path, copy)
            elif own in names:
                shutil.copyfile(own, copy)
                record["read_over"] = own.name
            else:
                _backup(live, copy)
                record["read_over"] = "a copy of the live file"
            if kind == "wal":
                shutil.copyfile(path, f"{copy}-wal")
            try:
                record["image"] = Image.read(copy)
            except sqlite3.Error as exc:
                record["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                for leftover in work.glob(f"image{n}.db*"):
                    leftover.unlink()
        yield record


def _backup(source: Path, target: Path) -> None:
    src, dst = sqlite3.connect(str(source), timeout=30), sqlite3.connect(str(target))
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


# --------------------------------------------------------------------------- the file

def integrity(path: Path) -> dict:
    """``PRAGMA integrity_check`` through plain sqlite3: structural and FTS lines apart."""
    try:
        conn = sqlite3.connect(str(path), timeout=30)
        try:
            structural, fts = integrity_problems(conn, "integrity_check", 100)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": not structural, "structural": structural, "fts_lines": fts}


def counter_mismatches(path: Path) -> list[str]:
    """Sessions whose ``message_count`` disagrees with their rows."""
    conn = sqlite3.connect(str(path), timeout=30)
    try:
        return [f"{sid}: message_count={n}, rows {real}" for sid, n, real in conn.execute(
            "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m "
            "WHERE m.session_id = s.id) AS real FROM sessions s WHERE s.message_count != real")]
    finally:
        conn.close()


def open_once(path: Path) -> dict:
    """Open a ``SessionDB`` once (it rebuilds a stale full-text index), ask it for the
    FTS integrity check, close it."""
    from hermes_store import SessionDB

    try:
        with SessionDB(path) as db:
            problems = db.fts_integrity_check()
    except Exception as exc:  # noqa: BLE001 - reported
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"ok": problems == [], "fts_problems": problems[:20]}


def read_or_recover(path: Path, work: Path) -> tuple[Image | None, str | None]:
    """The file's rows; when plain sqlite3 cannot read them, what ``hermes-store recover``
    salvages (and the reason it was needed)."""
    try:
        return Image.read(path), None
    except sqlite3.Error as exc:
        reason = f"{type(exc).__name__}: {exc}"
    out = work / "recovered.db"
    done = subprocess.run([sys.executable, "-m", "hermes_store", "--db", str(path), "recover",
                           "--output", str(out)], capture_output=True, text=True, timeout=600)
    if not out.exists():
        said = " ".join((done.stderr or done.stdout).split())[-300:]
        return None, f"unreadable ({reason}); `hermes-store recover` exit {done.returncode}: {said}"
    try:
        return Image.read(out), f"read through `hermes-store recover` ({reason})"
    except sqlite3.Error as exc:
        return None, f"unreadable ({reason}); recover's output: {type(exc).__name__}: {exc}"


def verify(path: Path, ledger: Ledger, ignore: set[str], moved_to: list[Path]) -> dict:
    """The whole verdict on ``path`` after the run (see the module docstring);
    ``moved_to``: where the run moved what the store had set aside beside it."""
    with tempfile.TemporaryDirectory(prefix="chaos-verify-") as tmp:
        work = Path(tmp)
        as_left = integrity(path)
        image, how = read_or_recover(path, work)
        verdict = judge(ledger, image) if image else {
            "present": 0, "superseded": 0, "refused_but_written": [],
            "missing": [(sid, s) for sid, steps in ledger.sessions.items() for s in steps
                        if s.acked]}
        places = [path.parent, *moved_to]
        held: dict[int, list[str]] = {}  # index in missing -> set-aside files holding it
        aside = []
        for record in set_aside_images(places, path, ignore | {path.name}, work,
                                       read=bool(verdict["missing"])):
            kept = record.pop("image", None)
            for n, (sid, step) in enumerate(verdict["missing"]):
                if kept is not None and kept.has(sid, step):
                    held.setdefault(n, []).append(record["file"])
            aside.append(record)
        only_aside, lost = [], []
        for n, (sid, step) in enumerate(verdict["missing"]):
            (only_aside if n in held else lost).append(
                {"write": describe(sid, step), "t": step.t, "only_in": held.get(n, [])})
        opened = open_once(path)
        after = integrity(path)
        reread, _ = read_or_recover(path, work)
        lost_at_open = []
        if image and reread:
            lost_at_open = [describe(sid, s) for sid, steps in ledger.sessions.items()
                            for s in steps if s.acked and image.has(sid, s)
                            and not reread.has(sid, s)]
        counters = counter_mismatches(path) if after.get("ok") else []
    return {
        "acknowledged": ledger.acknowledged(),
        "present": verdict["present"],
        "superseded": verdict["superseded"],
        "missing_from_file": len(verdict["missing"]),
        "only_in_set_aside": only_aside,
        "lost": lost,
        "lost_at_final_open": lost_at_open,
        "refused_but_written": verdict["refused_but_written"][:50],
        "read": how or "plain sqlite3",
        "set_aside": aside,
        "integrity_as_left": as_left,
        "store_open": opened,
        "integrity_after_open": after,
        "counter_mismatches": counters[:20],
    }
