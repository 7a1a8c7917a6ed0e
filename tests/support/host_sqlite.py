"""``--host-sqlite``: a host's own ``import sqlite3`` writes a store's file between the
store's calls (issue 30, decision D19).

With the option on, ``tests/conftest.py`` calls :func:`install` for every test (unless
it is marked ``no_host_sqlite("why")``): after every public call the test makes on a
``SessionDB`` over a SQLite file — the outermost call on its thread, as it returns or
raises — the standard library's ``sqlite3`` opens that file, runs a real write
transaction that leaves every visible result unchanged (:func:`host_write`), commits and
closes, as an admin script or plugin of the host process would. Stores on PostgreSQL
(``db_path`` None) are left alone, and so is a call made inside the store's own write
unit on that thread (``db._write(fn)`` whose ``fn`` calls the API: the store holds the
file's write lock until the unit ends, so that is not "between" its calls). A host write
that fails, "database is locked" included, fails the test (:class:`HostWriteError`),
naming the call it followed: the store must not keep the write lock between calls. A test
that holds the lock on purpose is marked ``no_host_sqlite("why")``.

The hook wraps, for the length of one test (``monkeypatch``), every public function of
``SessionDB`` (assembled whole first: ``repository.concerns``) and of its subclasses
that exist then (the agent's compat class wraps the guarded methods again); the package
is not changed. The wrapper keeps ``functools.wraps``'s name, signature and the guard's
``_api_guard_of`` marker, so tests that inspect the API see it as before.
"""

from __future__ import annotations

import functools
import inspect
import os
import sqlite3  # the host's: the standard library's, whatever the store runs on
import threading
import urllib.parse

#: the state_meta key the host inserts and deletes in one transaction
PROBE_KEY = "hermes-tests-host-probe"
#: how long the host waits for the file's write lock (a test's own writers may hold it)
BUSY_TIMEOUT = 10.0

#: host writes done in this process (the self-test reads it)
writes = 0
_depth = threading.local()


class HostWriteError(AssertionError):
    """The host's ``sqlite3`` could not write the store's file between two calls."""


def host_write(path: os.PathLike | str) -> bool:
    """Open ``path`` with the standard library's ``sqlite3``, write, commit, close.

    ``BEGIN IMMEDIATE``; insert a ``state_meta`` row and delete it again (``state_meta``
    has no triggers and no test can see a row that never commits; the pages are dirtied
    and written, to the WAL or through the rollback journal); ``COMMIT``. A file
    without ``state_meta`` (an old schema a read-only store left as it was) gets its
    ``user_version`` set to the value it has, which rewrites page 1. The file is never
    created: a path with nothing at it (a store whose file a test deleted) is skipped,
    and False returned."""
    global writes
    path = os.fspath(path)
    if not os.path.exists(path):  # a stat: no descriptor of the file is opened and closed
        return False
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                    "AND name = 'state_meta'").fetchone()
            if has_meta:
                conn.execute("INSERT INTO state_meta(key, value) VALUES (?, 'x')", (PROBE_KEY,))
                conn.execute("DELETE FROM state_meta WHERE key = ?", (PROBE_KEY,))
            else:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    writes += 1
    return True


def _after(store, name: str) -> None:
    path = getattr(store, "db_path", None)
    if path is None:  # PostgreSQL
        return
    units = getattr(store, "_units", None)
    if units is not None and units.active_connection() is not None:
        return  # a call made inside the store's own write unit: not between its calls
    try:
        host_write(path)
    except sqlite3.Error as exc:
        raise HostWriteError(
            f"the host's sqlite3 (SQLite {sqlite3.sqlite_version}) could not write "
            f"{path} after {type(store).__name__}.{name}(): {type(exc).__name__}: {exc}"
        ) from exc


def _probing(method, name: str):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        try:
            result = method(self, *args, **kwargs)
        except BaseException:
            _depth.n = depth
            if depth == 0:
                _after(self, name)
            raise
        _depth.n = depth
        if depth == 0:
            _after(self, name)
        return result

    call._host_sqlite_probe_of = method
    return call


def _classes(root: type) -> list[type]:
    found, todo = [], [root]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.append(cls)
            todo.extend(cls.__subclasses__())
    return found


def install(monkeypatch) -> None:
    """Wrap every public function of ``SessionDB`` and its subclasses (see the module
    docstring) until ``monkeypatch`` undoes it."""
    from hermes_store.store import SessionDB

    SessionDB.assemble()  # every concern a base now, its methods guarded
    for cls in _classes(SessionDB):
        for name, raw in list(vars(cls).items()):
            if name.startswith("_") or not inspect.isfunction(raw) \
                    or hasattr(raw, "_host_sqlite_probe_of"):
                continue
            monkeypatch.setattr(cls, name, _probing(raw, name))


__all__ = ["BUSY_TIMEOUT", "HostWriteError", "PROBE_KEY", "host_write", "install"]

