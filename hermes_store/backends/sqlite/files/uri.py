"""A SQLite file's name as SQLAlchemy and SQLite take it: the one place it is built.

Every path a filesystem allows is a store at exactly that path. A URL or a URI written
by pasting a path into text is not: SQLAlchemy's URL parser reads ``?`` as the start of
a query (``sqlite:////x/c?d/state.db`` is the file ``/x/c``), and SQLite's URI
filenames (sqlite.org/uri.html) end the path at ``?`` or ``#`` and decode ``%XX``. So:

``sqlite_url(path, read_only=False) -> sqlalchemy.engine.URL``
    Built with ``URL.create`` from parts, never by parsing text. A writable open names
    the file as a plain filename (SQLite takes it literally); a read-only open needs
    SQLite's ``mode=ro``, only available in URI form: ``database`` is then
    :func:`file_uri` of the path and the query ``{"mode": "ro", "uri": "true"}``, which
    SQLAlchemy's pysqlite dialect turns into ``sqlite3.connect("file:///…?mode=ro",
    uri=True)`` (it appends the URI parameters to ``database`` as they are: no second
    encoding of the path).
``file_uri(path, **params) -> str``
    ``file:///<path, percent-encoded>?<params>`` for ``sqlite3.connect(…, uri=True)``:
    every byte of the path but ``/`` and the unreserved characters is escaped
    (``?``, ``#``, ``%``, ``&``, ``=``, ``;``, spaces, quotes, non-ASCII…), taken from the
    file name's bytes as the filesystem stores them.
``path_of(url)``
    The path a URL built here names (for messages).
``absolute(path)``, ``expand_home(path)``
    The path every entry point resolves a given path to: home expanded by the rule
    below, then made absolute (symlinks are not resolved).

A leading ``~``: only ``~`` alone and a ``~/`` prefix mean the current user's home
directory (a documented convenience). Any other leading ``~`` — ``~weird/state.db``,
``~nosuchuser/x``, ``~root/state.db`` — is a literal name relative to the working
directory, never expanded (``hermes_store.paths.expand_home``).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes, urlencode

from sqlalchemy.engine import URL

from ....paths import expand_home

#: the SQLAlchemy dialect and driver of every SQLite URL (the DB-API module itself is
#: the package's SQLite library, handed to ``create_engine`` as ``module``)
DRIVERNAME = "sqlite+pysqlite"
_PREFIX = "file://"


def absolute(path: str | os.PathLike) -> Path:
    """``path`` with the home rule applied, made absolute."""
    return expand_home(path).absolute()


def file_uri(path: str | os.PathLike, **params: str) -> str:
    """SQLite's URI filename for ``path`` (see the module docstring), with ``params``
    (``mode="ro"``…) as its query."""
    p = absolute(path).as_posix()
    if not p.startswith("/"):  # a Windows drive: file:///C:/…
        p = "/" + p
    # An empty authority (file:///…): a path that starts with // stays a path.
    uri = _PREFIX + quote(os.fsencode(p), safe="/")
    if params:
        uri += "?" + urlencode(params)
    return uri


def sqlite_url(path: str | os.PathLike, *, read_only: bool = False) -> URL:
    """The SQLAlchemy URL of the file at ``path`` (see the module docstring)."""
    if read_only:
        return URL.create(DRIVERNAME, database=file_uri(path),
                          query={"mode": "ro", "uri": "true"})
    return URL.create(DRIVERNAME, database=str(absolute(path)))


def path_of(url: URL) -> str:
    """The file a URL of :func:`sqlite_url` names, as a path (``database`` as given for
    any other)."""
    database = url.database or ""
    if not database.startswith(_PREFIX):
        return database
    return os.fsdecode(unquote_to_bytes(database[len(_PREFIX):].split("?", 1)[0]))


__all__ = ["DRIVERNAME", "absolute", "expand_home", "file_uri", "path_of", "sqlite_url"]
