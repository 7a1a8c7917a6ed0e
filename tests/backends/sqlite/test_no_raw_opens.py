"""The store never opens its live database, ``-wal``, ``-shm`` or ``-journal`` with
Python's own file calls while a connection to it is open (issue 30, part 3; D19).

Closing any descriptor of a file drops every POSIX lock this process holds on it,
SQLite's included (sqlite.org/howtocorrupt.html §2.2): a Python ``open()`` + ``close()``
of ``state.db`` beside a live connection silently unlocks it. Permission fixes go through
``chmod(2)`` on the path, header probes through SQLite, identity checks through ``stat``.

The watch is an audit hook (``sys.addaudithook``): the ``open`` event covers
``builtins.open``, ``io.open`` and ``os.open``, and ``sqlite3.connect`` marks SQLite's
first connection. Hooks cannot be removed, so one is installed per process and records
only while a test switches it on. The rule is the simplest correct one: every open of
the four paths between the first SQLite connection of the run and the final close is a
failure (an open of a new file before SQLite first opened it is fine; so is any file
operation on a file no connection has open: a backup copy, a temporary file).

One exception, by design (issue 31, row 4): the read-only descriptor a writable store
keeps of its database file to read the identity stamped in its header
(``backends/sqlite/files/descriptors.py`` ``hold``: one per file and process, never
closed while any other descriptor of this process has the file open, so it drops no
lock). A read-only open there is not an offence; any other open is.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_store import SessionDB
from hermes_store.cli import app

_WATCH: dict = {"on": False, "paths": set(), "events": []}
#: where the one allowed open happens (``_where()``'s form: file, line, function)
_KEPT_DESCRIPTOR = re.compile(r"descriptors\.py:\d+ hold$")
_INSTALLED: list[bool] = []


def _where() -> str:
    """The innermost hermes_store frame of the current stack (else the outermost caller)."""
    frames = traceback.extract_stack()[:-2]
    ours = [f for f in frames if f"{os.sep}hermes_store{os.sep}" in f.filename]
    frame = (ours or frames)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"


def _hook(event: str, args: tuple) -> None:
    if not _WATCH["on"]:
        return
    if event == "sqlite3.connect":
        _WATCH["events"].append(("connect", str(args[0]) if args else "", ""))
    elif event == "open":
        path = args[0]
        if isinstance(path, int) or path is None:
            return
        try:
            text = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if text in _WATCH["paths"]:
            where = _where()
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else None
            if _KEPT_DESCRIPTOR.match(where) and flags is not None \
                    and not flags & (os.O_WRONLY | os.O_RDWR):
                return  # the kept header descriptor (module docstring)
            _WATCH["events"].append(("open", text, where))


def _install() -> None:
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED.append(True)


class Watch:
    def __init__(self, db: Path) -> None:
        self.db = db
        _install()
        _WATCH["paths"] = {os.path.abspath(f"{db}{s}") for s in ("", "-wal", "-shm", "-journal")}
        _WATCH["events"] = []

    def __enter__(self) -> "Watch":
        _WATCH["on"] = True
        return self

    def __exit__(self, *exc) -> None:
        _WATCH["on"] = False

    def mark_connected(self) -> None:
        """The store is open (for a library that raises no ``sqlite3.connect`` event)."""
        _WATCH["events"].append(("connect", "<store open>", ""))

    def offenders(self) -> list[tuple[str, str]]:
        events = _WATCH["events"]
        first = next((i for i, e in enumerate(events) if e[0] == "connect"), len(events))
        return [(Path(path).name, where) for kind, path, where in events[first:]
                if kind == "open"]


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args],
                                env={"COLUMNS": "200", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HERMES_STATE_DATABASE_URL", raising=False)


def test_the_main_paths_never_open_the_live_files(tmp_path):
    db_path = tmp_path / "state.db"
    with Watch(db_path) as watch:
        # a new file
        db = SessionDB(db_path)
        watch.mark_connected()
        try:
            db.create_session("s1", "cli", model="m")
            db.append_message("s1", "user", "hello world")
            db.append_message("s1", "assistant", "hi there")
            db.replace_messages("s1", [{"role": "user", "content": "hello again world"},
                                       {"role": "assistant", "content": "fine"}])
            assert db.get_session("s1")["model"] == "m"
            assert len(db.get_messages("s1")) == 2
            assert db.list_sessions_rich(limit=5)[0]["id"] == "s1"
            assert db.search_messages("world")

            # the CLI in this process, beside the open store
            backup = tmp_path / "backup.db"
            result = cli("--db", db_path, "db", "backup", backup)
            assert result.exit_code == 0, result.output
            result = cli("--db", db_path, "recover", "--output", tmp_path / "recovered.db")
            assert result.exit_code == 0, result.output
            for command in (["status"], ["maintenance", "doctor"],
                            ["maintenance", "doctor", "--quick"], ["maintenance", "doctor", "--fix"],
                            ["maintenance", "repair"],
                            ["maintenance", "optimize"], ["maintenance", "rebuild-fts"],
                            ["maintenance", "vacuum"], ["db", "current"], ["db", "check"],
                            ["db", "upgrade"], ["search", "world"], ["sessions", "list"],
                            ["sessions", "show", "s1"], ["sessions", "stats"]):
                result = cli("--db", db_path, "--json", *command)
                assert result.exit_code in (0, 1), (command, result.output)
                json.loads(result.stdout)
            db.optimize_fts()
            db.vacuum()
        finally:
            db.close()

        # an existing file, read-only and writable, and reopen()
        ro = SessionDB(db_path, read_only=True)
        try:
            assert ro.get_session("s1") is not None
        finally:
            ro.close()
        db = SessionDB(db_path)
        try:
            db.append_message("s1", "user", "after reopen")
            db.reopen()
            assert db.get_messages("s1")[-1]["content"] == "after reopen"
        finally:
            db.close()
    offenders = watch.offenders()
    assert not offenders, "Python opened live store files:\n" + "\n".join(
        f"  {name}  at {where}" for name, where in offenders)


def test_the_watch_sees_an_open(tmp_path):
    """The hook itself works: a raw open of the live file is caught."""
    db_path = tmp_path / "state.db"
    with Watch(db_path) as watch:
        db = SessionDB(db_path)
        watch.mark_connected()
        try:
            with open(db_path, "rb") as fh:
                fh.read(16)
        finally:
            db.close()
    assert [name for name, _ in watch.offenders()] == ["state.db"]
