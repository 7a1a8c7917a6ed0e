"""Watches the node at a store's ``-shm`` path for opens (Linux inotify), as another
process (issue 31, row 5: a read-only store's disk I/O error).

    shm_watch.py SHM_PATH clear|count

The test puts something at SHM_PATH that SQLite cannot use as its shared-memory file
(a FIFO: its ``ftruncate`` fails, and SQLite reports ``SQLITE_IOERR_SHMOPEN``, "disk
I/O error"). Every attempt SQLite makes to map the shared memory opens SHM_PATH once,
so the opens this process sees are the attempts of the store.

``clear``: prints ``watching``, waits for the first open, removes the node (the cause
goes away: the next attempt creates a proper ``-shm``) and prints ``{"opens": 1,
"cleared": true}`` (``{"opens": 0, "cleared": false}`` after 30 s without an open).
``count``: prints ``watching``, counts the opens until its standard input closes, then
prints ``{"opens": n}``; the node stays.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import struct
import sys

IN_OPEN = 0x20
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (a name of len bytes follows)


def _watch(path: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN) < 0:
        raise OSError(ctypes.get_errno(), f"inotify cannot watch {path}")
    return fd


def _opens(fd: int) -> int:
    seen = 0
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return 0
    offset = 0
    while offset < len(data):
        _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        offset += _EVENT.size + length
        seen += bool(mask & IN_OPEN)
    return seen


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    fd = _watch(path)
    print("watching", flush=True)
    opens = 0
    if mode == "clear":
        ready, _, _ = select.select([fd], [], [], 30)
        opens = _opens(fd) if ready else 0
        if opens:
            os.unlink(path)
        print(json.dumps({"opens": opens, "cleared": bool(opens)}), flush=True)
        return
    while True:
        ready, _, _ = select.select([fd, sys.stdin], [], [])
        if fd in ready:
            opens += _opens(fd)
        if sys.stdin in ready and not sys.stdin.readline():
            opens += _opens(fd)
            break
    print(json.dumps({"opens": opens}), flush=True)


if __name__ == "__main__":
    main()
