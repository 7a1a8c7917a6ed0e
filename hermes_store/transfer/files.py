"""Reading an import file (native or upstream format) and validating all of it first."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from ..repository.importing import NO_LIMITS, ImportChecker
from .export import ExportCounts
from ..errors import ImportFileError
from .formats import FORMAT_KEY, FORMAT_VERSION, KEEP_CHECKED_MESSAGES, from_json_value

# --------------------------------------------------------------------------- import

@dataclass
class ImportReport:
    """What an import did. ``detached``: parent links dropped because the parent is in
    neither the store nor the file (or the link would close a cycle); ``renumbered``:
    messages whose id was taken; ``retitled``: sessions whose title another session
    already had (titles are unique), imported as "<title> (imported)", "<title>
    (imported 2)", …"""

    format: str = ""
    sessions_added: int = 0
    sessions_skipped: int = 0
    messages_added: int = 0
    messages_skipped: int = 0
    detached: int = 0
    renumbered: int = 0
    retitled: int = 0
    ignored_fields: list[str] = field(default_factory=list)
    added_ids: list[str] = field(default_factory=list)
    skipped_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class FileSession:
    """A session record of the native format (every column as stored)."""

    line: int
    row: dict
    system_prompt: dict | None
    model_usage: list


@dataclass
class FileMessage:
    line: int
    row: dict


@dataclass
class FileEntry:
    """An upstream-format session (``export_session()``'s dict, messages inside)."""

    where: str  # "<path>:<line>" or "<path>: entry <n>", for error messages
    index: int
    raw: Any
    #: its rows, when the validation pass kept them (``KEEP_CHECKED_MESSAGES``)
    checked: Any = None


def _open_text(path: Path) -> IO[str]:
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise ImportFileError(f"cannot read {path}: {exc.strerror or exc}") from exc


def detect_format(path: Path) -> str:
    """``jsonl`` when the first non-blank line is a whole JSON object and another line
    follows; ``json`` otherwise (a one-line file is the same either way)."""
    with _open_text(path) as fh:
        lines = (line for line in fh if line.strip())
        first = next(lines, None)
        if first is None:
            raise ImportFileError(f"{path} is empty: nothing to import")
        try:
            whole_object = isinstance(json.loads(first), dict)
        except ValueError:
            return "json"
        return "jsonl" if whole_object and next(lines, None) is not None else "json"


def file_events(path: Path, fmt: str) -> Iterator[FileSession | FileMessage | FileEntry]:
    """The records of a file, with where they are for error messages."""
    if fmt == "jsonl":
        yield from _jsonl_events(path)
    else:
        yield from _json_events(path)


def _jsonl_events(path: Path) -> Iterator[FileSession | FileMessage | FileEntry]:
    native = None
    counts = ExportCounts()
    ended = False
    entries = 0
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ImportFileError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ImportFileError(f"{path}:{lineno}: expected a JSON object per line")
            if ended:
                raise ImportFileError(f"{path}:{lineno}: data after the end record")
            if native is None:
                native = FORMAT_KEY in record
                if native:
                    _check_header(record, path)
                    continue
            if native:
                if "session" in record:
                    counts.sessions += 1
                    yield _native_session(record, lineno)
                elif "message" in record:
                    counts.messages += 1
                    yield FileMessage(lineno, _decode_row(_expect_dict(record["message"], lineno, "message")))
                elif "end" in record:
                    if record["end"] != asdict(counts):
                        raise ImportFileError(
                            f"{path}:{lineno}: the end record says {record['end']} but the file "
                            f"holds {asdict(counts)}; the file is damaged"
                        )
                    ended = True
                else:
                    raise ImportFileError(f"{path}:{lineno}: unknown record (keys {sorted(record)})")
            else:
                yield FileEntry(f"{path}:{lineno}", entries, record)
                entries += 1
    if native and not ended:
        raise ImportFileError(
            f"{path}: the end record is missing, so the file is truncated; export it again"
        )


def _json_events(path: Path) -> Iterator[FileSession | FileMessage | FileEntry]:
    # A JSON document is parsed whole; JSONL is the streaming format for big stores.
    with _open_text(path) as fh:
        try:
            doc = json.load(fh)
        except ValueError as exc:
            raise ImportFileError(f"{path}: not valid JSON or JSONL ({exc})") from None
    if isinstance(doc, dict) and FORMAT_KEY in doc:
        _check_header(doc, path)
        entries = doc.get("sessions")
        if not isinstance(entries, list):
            raise ImportFileError(f"{path}: 'sessions' must be a list")
        for index, entry in enumerate(entries):
            entry = _expect_dict(entry, index, "session entry")
            messages = entry.get("messages", [])
            if not isinstance(messages, list):
                raise ImportFileError(f"{path}: sessions[{index}].messages must be a list")
            yield _native_session(entry, index)
            for message in messages:
                yield FileMessage(index, _decode_row(_expect_dict(message, index, "message")))
    elif isinstance(doc, dict):
        yield FileEntry(str(path), 0, doc)
    elif isinstance(doc, list):
        for index, entry in enumerate(doc):
            yield FileEntry(f"{path}: entry {index}", index, entry)
    else:
        raise ImportFileError(f"{path}: expected a JSON object or a list of sessions")


def _check_header(record: dict, path: Path) -> None:
    if record.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ImportFileError(
            f"{path}: export format version {record.get(FORMAT_KEY)!r} is not supported "
            f"(this version reads {FORMAT_VERSION}); upgrade hermes_store"
        )


def _expect_dict(value: Any, where: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ImportFileError(f"record {where}: {what} must be a JSON object")
    return value


def _decode_row(row: dict) -> dict:
    return {k: from_json_value(v) for k, v in row.items()}


def _native_session(record: dict, where: int) -> FileSession:
    row = _decode_row(_expect_dict(record["session"], where, "session"))
    prompt = record.get("system_prompt")
    usage = record.get("model_usage") or []
    if not isinstance(usage, list):
        raise ImportFileError(f"record {where}: model_usage must be a list")
    return FileSession(
        where,
        row,
        _decode_row(_expect_dict(prompt, where, "system_prompt")) if prompt is not None else None,
        [_decode_row(_expect_dict(u, where, "model_usage row")) for u in usage],
    )


#: errors listed in one ImportFileError (the rest are counted)
_MAX_LISTED_ERRORS = 20


def validate_entry(events: Iterable[FileSession | FileMessage | FileEntry],
              path: Path) -> tuple[int, list[FileEntry] | None]:
    """Check every record before anything is written. Returns the number of messages
    and, for a file of upstream-format entries only with at most
    ``KEEP_CHECKED_MESSAGES`` messages, its entries with their checked rows (the
    writes then need not read the file again); ``None`` otherwise.

    Upstream-format entries are checked by ``import_sessions``' own rules
    (``ImportChecker``) without its caps: the import streams and commits in batches.
    """
    seen: set[str] = set()
    current: str | None = None
    n_messages = 0
    checker = ImportChecker(NO_LIMITS)
    entry_errors: list[str] = []
    kept: list[FileEntry] | None = []
    for event in events:
        if isinstance(event, FileEntry):
            result = checker.check(event.index, event.raw)
            if isinstance(result, dict):
                sid = f"session {result['session_id']!r}: " if "session_id" in result else ""
                entry_errors.append(f"{event.where}: {sid}{result['error']}")
            else:
                n_messages += len(result.messages)
                if kept is not None and n_messages <= KEEP_CHECKED_MESSAGES:
                    kept.append(FileEntry(event.where, event.index, None, checked=result))
                else:
                    kept = None
            continue
        kept = None
        where = f"{path}:{event.line}"
        if isinstance(event, FileSession):
            sid = event.row.get("id")
            if not isinstance(sid, str) or not sid.strip():
                raise ImportFileError(f"{where}: a session needs a non-empty string 'id'")
            if sid in seen:
                raise ImportFileError(f"{where}: session {sid!r} appears twice")
            seen.add(sid)
            if not isinstance(event.row.get("source"), str):
                raise ImportFileError(f"{where}: session {sid!r} needs a string 'source'")
            started = event.row.get("started_at")
            if started is not None and not isinstance(started, (int, float)):
                raise ImportFileError(f"{where}: session {sid!r}: started_at must be a number")
            parent = event.row.get("parent_session_id")
            if parent is not None and not isinstance(parent, str):
                raise ImportFileError(f"{where}: session {sid!r}: parent_session_id must be a string")
            current = sid
        else:
            if current is None:
                raise ImportFileError(f"{where}: a message comes before any session")
            m = event.row
            if m.get("session_id", current) != current:
                raise ImportFileError(
                    f"{where}: message belongs to {m.get('session_id')!r} but follows session {current!r}"
                )
            if not isinstance(m.get("role"), str) or not m["role"]:
                raise ImportFileError(f"{where}: message role must be a non-empty string")
            ts = m.get("timestamp")
            if ts is not None and not isinstance(ts, (int, float)):
                raise ImportFileError(f"{where}: message timestamp must be a number")
            mid = m.get("id")
            if mid is not None and (not isinstance(mid, int) or isinstance(mid, bool)):
                raise ImportFileError(f"{where}: message id must be an integer")
            n_messages += 1
    if entry_errors:
        listed = entry_errors[:_MAX_LISTED_ERRORS]
        more = len(entry_errors) - len(listed)
        raise ImportFileError(
            f"{len(entry_errors)} session(s) of {path} cannot be imported; nothing was "
            "written:\n" + "\n".join(listed) + (f"\n… and {more} more" if more else "")
        )
    return n_messages, kept
