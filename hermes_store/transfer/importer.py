"""Writing an import in batches of whole sessions (``import_file``)."""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .. import schema
from ..backends.base import backend_of
from ..connections import writer
from ..errors import StoreBusyError
from ..paths import expand_home
from ..repository.importing import NO_LIMITS, ImportChecker, SessionWriter
from ..unit_locks import STORE, HeldLocks
from .files import ImportReport, detect_format, FileEntry, file_events, FileMessage, FileSession, validate_entry
from ..errors import ImportFileError
from .formats import IMPORT_BATCH, INSERT_CHUNK, OpenedTarget


def import_file(
    db: Any,
    path: str | os.PathLike,
    *,
    batch_size: int = IMPORT_BATCH,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import an export file into a store at head (Engine, SessionDB, path or URL).

    Validates the whole file first; then inserts whole sessions in transactions of about
    ``batch_size`` messages. ``progress(done_messages, total_messages)`` is called as it
    goes. Returns an ``ImportReport``.
    """
    path = expand_home(path)
    if not path.is_file():
        raise ImportFileError(f"{path} does not exist or is not a file")
    fmt = detect_format(path)
    total_messages, checked = validate_entry(file_events(path, fmt), path)

    report = ImportReport(format=fmt)
    opened = OpenedTarget(db, read_only=False)
    try:
        events = iter(checked) if checked is not None else file_events(path, fmt)
        _Importer(opened.engine, report, batch_size, progress, total_messages).run(events)
    finally:
        opened.close()
    return report


_HEAD_SESSION_COLUMNS = {c.name for c in schema.sessions.columns}
_HEAD_MESSAGE_COLUMNS = {c.name for c in schema.messages.columns}
_HEAD_USAGE_COLUMNS = {c.name for c in schema.session_model_usage.columns}
#: keys upstream's listing adds to a session dict; not columns, not worth reporting
_DERIVED_SESSION_KEYS = {"last_active", "preview", "_lineage_root_id", "messages"}


class _Importer:
    """Drives an import through ``SessionWriter`` (the code ``import_sessions`` runs),
    committing whole sessions in batches of about ``batch_size`` messages."""

    def __init__(self, engine: Engine, report: ImportReport, batch_size: int, progress, total: int):
        self.engine = writer(engine)
        self.backend = backend_of(engine)
        self.label = self.backend.label(engine)
        # A batch reads (ids, titles) then writes: like every such write unit it runs
        # alone (decision D13): under the unit lock where the engine has one, as BEGIN
        # IMMEDIATE makes it run alone on SQLite.
        self.report = report
        self.batch_size = max(1, batch_size)
        self.progress = progress or (lambda done, total: None)
        self.total = total
        self.done = 0
        self.ignored: set[str] = set()
        self.sessions = SessionWriter()
        self.entries = ImportChecker(NO_LIMITS)  # the same checks as the validation pass
        self.current: str | None = None  # the session being imported (for errors)
        self.committed = 0  # sessions added and committed

    def run(self, events: Iterator[FileSession | FileMessage | FileEntry]) -> None:
        try:
            self._run(events)
        except sa.exc.DBAPIError as exc:
            mapped = self.backend.translate_error(exc, self.label)
            if mapped is None and self.backend.is_transient(exc):  # a lock timeout
                mapped = StoreBusyError(self.label, 1, exc.orig)
            if mapped is not None:
                raise mapped from exc
            raise ImportFileError(
                f"import stopped at session {self.current!r}: the store refused a row "
                f"({exc.orig}). The {self.committed} session(s) committed before it stay; fix "
                "the file and import it again (sessions already present are skipped)."
            ) from exc
        finally:
            self._report()

    def _report(self) -> None:
        tally = self.sessions.tally
        self.report.sessions_added = len(tally.imported_ids)
        self.report.sessions_skipped = len(tally.skipped_ids)
        self.report.added_ids = list(tally.imported_ids)
        self.report.skipped_ids = list(tally.skipped_ids)
        self.report.messages_added = tally.messages_added
        self.report.messages_skipped = tally.messages_skipped
        self.report.detached = tally.detached
        self.report.renumbered = tally.renumbered
        self.report.retitled = tally.retitled
        self.report.ignored_fields = sorted(self.ignored)

    def _run(self, events: Iterator[FileSession | FileMessage | FileEntry]) -> None:
        conn: Connection | None = None
        tx = None
        in_batch = 0
        skipping = False
        buffer: list[dict] = []
        try:
            for event in events:
                if isinstance(event, FileMessage):
                    if skipping:
                        self.sessions.tally.messages_skipped += 1
                    else:
                        buffer.append(self._message_values(event.row))
                        in_batch += 1
                        if len(buffer) >= INSERT_CHUNK:
                            self.sessions.add_messages(conn, buffer)
                            buffer = []
                    self._tick(1)
                    continue
                # a new session: the previous one is complete, the batch may commit
                if conn is not None:
                    self.sessions.add_messages(conn, buffer)
                    buffer = []
                    if in_batch >= self.batch_size:
                        self.sessions.link_parents(conn, final=False)
                        tx.commit()
                        self.committed = len(self.sessions.tally.imported_ids)
                        conn.close()
                        conn = None
                        in_batch = 0
                if conn is None:
                    conn = self.engine.connect()
                    tx = conn.begin()
                    if self.backend.locks_units:  # a batch runs alone, as import_sessions
                        self.backend.lock_unit(conn, STORE, HeldLocks())
                if isinstance(event, FileEntry):
                    prepared = event.checked or self.entries.check(event.index, event.raw)
                    self.current = prepared.session_id
                    if self.sessions.add_prepared(conn, prepared):
                        in_batch += len(prepared.messages)
                    self._tick(len(prepared.messages))
                    skipping = False
                else:
                    self.current = event.row["id"]
                    skipping = not self._add_native(conn, event)
            if conn is not None:
                self.sessions.add_messages(conn, buffer)
                self.sessions.link_parents(conn, final=True)
                tx.commit()
                self.committed = len(self.sessions.tally.imported_ids)
        finally:
            if conn is not None:
                conn.close()
        self.progress(self.done, self.total)

    def _tick(self, messages: int) -> None:
        before, self.done = self.done, self.done + messages
        if before // INSERT_CHUNK != self.done // INSERT_CHUNK:
            self.progress(self.done, self.total)

    def _add_native(self, conn: Connection, event: FileSession) -> bool:
        values = {}
        for key, value in event.row.items():
            if key in _HEAD_SESSION_COLUMNS:
                values[key] = value
            elif key not in _DERIVED_SESSION_KEYS:
                self.ignored.add(f"sessions.{key}")
        if values.get("started_at") is None:
            values["started_at"] = _dt.datetime.now().timestamp()
        usage = [
            {k: v for k, v in row.items() if k in _HEAD_USAGE_COLUMNS} for row in event.model_usage
        ]
        return self.sessions.add_session(
            conn, values, prompt_row=event.system_prompt, usage=usage,
            parent=values.get("parent_session_id"),
        )

    def _message_values(self, row: dict) -> dict:
        values = {}
        for key, value in row.items():
            if key in _HEAD_MESSAGE_COLUMNS:
                values[key] = value
            else:
                self.ignored.add(f"messages.{key}")
        values["session_id"] = self.current  # messages follow their session
        if values.get("timestamp") is None:
            values["timestamp"] = _dt.datetime.now().timestamp()
        return values
