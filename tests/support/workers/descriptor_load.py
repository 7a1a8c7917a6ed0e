"""Many threads reading (and a few writing) through several stores of one process, with
the descriptors the stores hold sampled while they run (issue 31, row 6).

    descriptor_load.py DB THREADS STORES ROUNDS SESSION [--spare N | --starve]

DB is a SQLite file's path or a PostgreSQL URL; SESSION an existing session holding a
message with the word "needle". STORES ``SessionDB``s are opened on DB; THREADS threads
start together (a barrier) and each runs ROUNDS rounds of three reads on every store —
``get_messages`` (a single statement), ``resolve_session_id`` (a read snapshot) and
``search_messages`` — and every tenth thread also appends one message per store in its
first round. No thread ends before all are done, so every connection a thread keeps is
held at the peak. A sampler thread counts, every few milliseconds, the descriptors of
this process that name the store's file or its sidecars (SQLite), or its sockets beyond
those open before the stores (PostgreSQL: its connections to the server).

``--spare N`` lowers this process's soft ``RLIMIT_NOFILE`` first, to the descriptors
already open plus N. ``--starve`` lowers it after the stores opened, to the descriptors
then open: no connection can be made at all.

Prints one JSON line per acknowledged append ``{"id", "session", "content"}``, then
``{"done": true, "errors": [...], "peak": n, "limit": soft RLIMIT_NOFILE}`` (errors:
``"ClassName: message"`` of every exception a thread met).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time

from hermes_store import SessionDB

FD_DIR = "/proc/self/fd"


def _open_descriptors() -> list[str]:
    links = []
    for name in os.listdir(FD_DIR):
        try:
            links.append(os.readlink(f"{FD_DIR}/{name}"))
        except OSError:  # closed meanwhile
            continue
    return links


def _lower_limit(spare: int) -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = len(os.listdir(FD_DIR)) - 1 + spare  # the listing's own descriptor is closed
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def main() -> None:
    target, threads, stores, rounds, session = sys.argv[1:6]
    threads, stores, rounds = int(threads), int(stores), int(rounds)
    options = sys.argv[6:]
    server = "://" in target
    if "--spare" in options:
        _lower_limit(int(options[options.index("--spare") + 1]))
    sockets_before = sum(link.startswith("socket:") for link in _open_descriptors())
    names = {target, f"{target}-wal", f"{target}-shm", f"{target}-journal"}

    def store_descriptors() -> int:
        links = _open_descriptors()
        if server:
            return sum(link.startswith("socket:") for link in links) - sockets_before
        return sum(link in names for link in links)

    dbs = [SessionDB(target) for _ in range(stores)]
    if "--starve" in options:
        with SessionDB(target) as warm:  # the modules the reads load on first use
            warm.get_messages(session), warm.resolve_session_id(session)
            warm.search_messages("needle", limit=5)
        _lower_limit(0)
    errors: list[str] = []
    acknowledged: list[dict] = []
    start = threading.Barrier(threads + 1)
    finish = threading.Barrier(threads + 1)
    done = threading.Event()
    peak = [0]

    def reader(number: int) -> None:
        try:
            start.wait(timeout=60)
            for turn in range(rounds):
                for index, db in enumerate(dbs):
                    db.get_messages(session)
                    db.resolve_session_id(session)
                    db.search_messages("needle", limit=5)
                    if number % 10 == 0 and turn == 0:
                        content = f"thread {number} store {index}"
                        message_id = db.append_message(session, "user", content)
                        acknowledged.append({"id": message_id, "session": session,
                                             "content": content})
        except Exception as exc:  # noqa: BLE001 - reported to the parent test
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            finish.wait(timeout=120)

    def sample() -> None:
        try:
            peak[0] = max(peak[0], store_descriptors())
        except OSError:  # no descriptor left to list them with (a lowered limit)
            pass

    def sampler() -> None:
        while not done.is_set():
            sample()
            time.sleep(0.002)

    workers = [threading.Thread(target=reader, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    watcher = threading.Thread(target=sampler)
    watcher.start()
    start.wait(timeout=60)
    finish.wait(timeout=120)  # every thread is done and still alive: the peak is held
    sample()
    done.set()
    for worker in workers:
        worker.join()
    watcher.join()
    for db in dbs:
        db.close()
    for line in acknowledged:
        print(json.dumps(line))
    print(json.dumps({"done": True, "errors": errors, "peak": peak[0],
                      "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))


if __name__ == "__main__":
    main()
