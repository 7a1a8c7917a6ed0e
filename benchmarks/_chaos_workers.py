#!/usr/bin/env python3
"""The processes of the chaos run (``chaos.py``): writers, readers and the siblings that
damage the file. Each prints JSON lines on stdout, one ``os.write`` per record (a single
write to a pipe is whole or absent, and what reached the pipe survives a ``kill -9`` of
the writer): a record is the harness's only knowledge of what happened.

    _chaos_workers.py writer DB SLOT INCARNATION SEED DEADLINE
    _chaos_workers.py reader DB SLOT SEED DEADLINE
    _chaos_workers.py sidecar DB     # a sibling's close that unlinks -wal/-shm
    _chaos_workers.py fts DB VARIANT # FTS5 pages damaged through plain sqlite3

``DEADLINE`` is a ``time.monotonic()`` value (one clock for every process on Linux).

A writer loops ``create_session`` / ``append_message`` (tool-call turns among them) /
``replace_messages`` through its own ``SessionDB`` and reports each call that returned
(``ack``) and each that raised (``fail``: the exception's class and SQLite's result
code); a
``replace_messages`` is announced (``intent``) before the call, since it deletes what the
session held. Busy and full-disk errors are retried on the same store; any other error
makes it open a new ``SessionDB`` (``reopen``); when that store refuses too, the process
exits with ``RESTART`` so the harness starts a new one, as an agent restart would. On
SIGUSR1 a thread of the writer opens and closes ``state.db`` with Python's own file
calls (the D19 hazard: the process's POSIX locks on the file are dropped).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time

#: exit code of a writer whose reopened store still refused: start a new process
RESTART = 3
#: seconds a writer waits between calls (leaves the readers and the injector a share
#: of the cores, and bounds how fast the file grows)
PAUSE = 0.005
WORDS = ("docker build cache layer compose volume network python parser token session "
         "message search index query trigram migration schema upgrade rollback function "
         "argument result error retry lock writer reader page checkpoint vacuum").split()


def emit(**record) -> None:
    record["t"] = time.monotonic()
    os.write(1, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def error_class(exc: BaseException) -> str:
    """The class name; qualified by its module unless it is one of the store's own."""
    cls = type(exc)
    if cls.__module__.startswith("hermes_store"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def sqlite_code(exc: BaseException | None) -> str | None:
    """SQLite's result code behind an error ("SQLITE_CORRUPT_VTAB"…), looked for on the
    error, the driver error it wraps and the error it was raised from."""
    while exc is not None:
        for candidate in (exc, getattr(exc, "orig", None)):
            code = getattr(candidate, "sqlite_errorname", None)
            if code:
                return code
        exc = exc.__cause__
    return None


def failed(role: str, op: str, exc: BaseException, **extra) -> None:
    emit(ev="fail", role=role, op=op, cls=error_class(exc), code=sqlite_code(exc),
         msg=str(exc)[:300], **extra)


# --------------------------------------------------------------------------- writer

def _raw_closer(path: str) -> None:
    """Wait for SIGUSR1; then open and close ``path`` with Python's file calls."""
    while True:
        signal.sigwait({signal.SIGUSR1})
        with open(path, "rb") as fh:
            fh.read(100)
        emit(ev="rawclose")


class Writer:
    def __init__(self, path: str, slot: int, incarnation: int, seed: int, deadline: float):
        self.path, self.deadline = path, deadline
        self.prefix = f"w{slot}i{incarnation}"
        self.rng = random.Random(seed * 1000 + slot * 100 + incarnation)
        self.seq = 0
        self.db = None
        self.session: str | None = None
        self.session_len = 0
        #: the markers of the call in flight (a failure names them: the oracle checks
        #: that a refused call wrote nothing)
        self.pending: list[str] = []
        self.call = ""

    def marker(self) -> str:
        self.seq += 1
        return f"{self.prefix}n{self.seq}"

    def text(self, marker: str) -> str:
        words = self.rng.choices(WORDS, k=self.rng.randint(4, 60))
        return f"{marker} " + " ".join(words)

    def open(self) -> bool:
        from hermes_store import SessionDB

        while time.monotonic() < self.deadline:
            try:
                self.db = SessionDB(self.path)
                emit(ev="open")
                return True
            except Exception as exc:  # noqa: BLE001 - reported, then retried
                failed("writer", "open", exc)
                time.sleep(0.2)
        return False

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            try:
                db.close()
            except Exception as exc:  # noqa: BLE001
                failed("writer", "close", exc)

    def step(self) -> None:
        """One call; raises what the store raised."""
        if self.session is None or self.session_len >= 30:
            sid = self.marker().replace("n", "s", 1)
            self.call, self.pending = "create_session", [sid]
            self.db.create_session(sid, "cli", model="chaos")
            emit(ev="ack", op="create", sid=sid)
            self.session, self.session_len = sid, 0
            return
        sid, roll = self.session, self.rng.random()
        if roll < 0.04 and self.session_len > 2:
            messages, markers = [], []
            for role in ("user", "assistant"):
                marker = self.marker()
                markers.append(marker)
                messages.append({"role": role, "content": self.text(marker)})
            self.call, self.pending = "replace_messages", markers
            emit(ev="intent", op="replace", sid=sid, ms=markers)
            self.db.replace_messages(sid, messages)
            emit(ev="ack", op="replace", sid=sid, ms=markers)
            self.session_len = len(messages)
            return
        marker = self.marker()
        if roll < 0.30:  # an assistant turn with a tool call, then the tool's answer
            call = {"id": f"c_{marker}", "type": "function",
                    "function": {"name": "terminal", "arguments": '{"cmd": "ls"}'}}
            self.call, self.pending = "append_message", [marker]
            mid = self.db.append_message(sid, "assistant", self.text(marker), tool_calls=[call])
            emit(ev="ack", op="append", sid=sid, id=mid, m=marker)
            marker = self.marker()
            self.call, self.pending = "append_message", [marker]
            mid = self.db.append_message(sid, "tool", self.text(marker), tool_name="terminal",
                                         tool_call_id=call["id"])
        else:
            self.call, self.pending = "append_message", [marker]
            mid = self.db.append_message(sid, "user", self.text(marker))
        emit(ev="ack", op="append", sid=sid, id=mid, m=marker)
        self.session_len += 1

    def run(self) -> int:
        # ridden out on the same store (the lock frees, the disk frees), retried until
        # they pass: a store that stays stuck after its disk was freed shows
        from hermes_store.errors import StoreBusyError, StoreFullError

        if not self.open():
            return 0
        reopened = False
        while time.monotonic() < self.deadline:
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - the harness counts it by class
                failed("writer", self.call, exc, ms=self.pending)
                if isinstance(exc, (StoreBusyError, StoreFullError)):
                    time.sleep(0.05)
                    continue
                if reopened:
                    emit(ev="restart", cause=error_class(exc))
                    self.close()
                    return RESTART
                emit(ev="reopen", cause=error_class(exc))
                self.close()
                if not self.open():
                    return 0
                reopened = True
                continue
            reopened = False
            time.sleep(PAUSE)
        self.close()
        emit(ev="done")
        return 0


def writer_main(path: str, slot: str, incarnation: str, seed: str, deadline: str) -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # every thread inherits it
    threading.Thread(target=_raw_closer, args=(path,), daemon=True).start()
    return Writer(path, int(slot), int(incarnation), int(seed), float(deadline)).run()


# --------------------------------------------------------------------------- reader

def reader_main(path: str, slot: str, seed: str, deadline: str) -> int:
    """Opens a store (read-only and writable in turn), makes 15 reads, closes it; over
    and over until ``deadline``. Reports failures as they happen and counts at the end."""
    from hermes_store import SessionDB

    rng, end = random.Random(int(seed) * 7 + int(slot)), float(deadline)
    done: dict[str, int] = {}
    rounds = 0
    while time.monotonic() < end:
        read_only = rounds % 2 == 0
        rounds += 1
        try:
            db = SessionDB(path, read_only=read_only)
        except Exception as exc:  # noqa: BLE001
            failed("reader", "open", exc)
            time.sleep(0.2)
            continue
        sessions: list[str] = []
        for _ in range(15):
            op = rng.choice(("search_messages", "get_messages", "list_sessions_rich"))
            try:
                if op == "search_messages":
                    db.search_messages(rng.choice(WORDS), limit=10)
                elif op == "get_messages" and sessions:
                    db.get_messages(rng.choice(sessions))
                else:
                    op = "list_sessions_rich"
                    sessions = [s["id"] for s in db.list_sessions_rich(limit=20)]
                done[op] = done.get(op, 0) + 1
            except Exception as exc:  # noqa: BLE001
                failed("reader", op, exc)
            time.sleep(0.02)
        try:
            db.close()
        except Exception as exc:  # noqa: BLE001
            failed("reader", "close", exc)
    emit(ev="done", reads=done)
    return 0


# --------------------------------------------------------------------------- siblings

def _plain(path: str):
    import sqlite3  # the sibling is another program: plain sqlite3, never the store

    return sqlite3.connect(path, timeout=30, isolation_level=None)


def sidecar_main(path: str) -> int:
    """What SQLite's close does in a sibling that believes it is the last connection
    (its EXCLUSIVE lock succeeded because the others' POSIX locks were lost, #125184):
    everything in the WAL is checkpointed, then ``-wal`` and ``-shm`` are unlinked, while
    no writer can commit. Imitated with two plain connections: one holds the writer
    lock (``BEGIN IMMEDIATE``), the other checkpoints; a TRUNCATE checkpoint cannot reset
    the log under that lock, but it copies every frame no reader still needs, so the
    unlink happens only when all of them are in the database (log == checkpointed)."""
    lock, checkpointer = _plain(path), _plain(path)
    checkpointer.execute("PRAGMA busy_timeout=0")
    try:
        for attempt in range(50):
            lock.execute("BEGIN IMMEDIATE")
            _busy, log, done = checkpointer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if log == done:
                unlinked = []
                for suffix in ("-wal", "-shm"):
                    try:
                        os.unlink(path + suffix)
                        unlinked.append(suffix)
                    except FileNotFoundError:
                        pass
                emit(ev="sidecar", frames=log, unlinked=unlinked, attempts=attempt + 1)
                lock.execute("ROLLBACK")
                return 0
            lock.execute("ROLLBACK")  # a reader still needs frames: let it finish
            time.sleep(0.02)
        emit(ev="skipped", reason=f"the WAL was never wholly checkpointed (log {log}, "
                                  f"checkpointed {done}) in 50 attempts")
        return 0
    finally:
        checkpointer.close()
        lock.close()


#: FTS5 damage, each through plain SQL on the index's shadow table (id 10 is the
#: structure record; ids above it are the segments' leaf pages)
FTS_DAMAGE = {
    "structure": "UPDATE messages_fts_data SET block = X'0000' WHERE id = 10",
    "leaves": "DELETE FROM messages_fts_data WHERE id > 10",
    "trigram-structure": "UPDATE messages_fts_trigram_data SET block = X'00000000' WHERE id = 10",
    "trigram-leaves": "UPDATE messages_fts_trigram_data SET block = randomblob(length(block)) "
                      "WHERE id > 10",
}


def fts_main(path: str, variant: str) -> int:
    conn = _plain(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        changed = conn.execute(FTS_DAMAGE[variant]).rowcount
        conn.execute("COMMIT")
    finally:
        conn.close()
    emit(ev="fts", variant=variant, rows=changed)
    return 0


MAINS = {"writer": writer_main, "reader": reader_main, "sidecar": sidecar_main, "fts": fts_main}

if __name__ == "__main__":
    sys.exit(MAINS[sys.argv[1]](*sys.argv[2:]))
