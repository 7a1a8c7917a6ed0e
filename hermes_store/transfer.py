"""Streaming export and batched, idempotent import of sessions and their messages.

Export never holds more than one page of rows: sessions are read with keyset paging on
``(started_at, id)`` and each session's messages with keyset paging on ``id``, all inside
one read transaction so the export is a consistent snapshot even while writers run.
Columns are reflected from the file, so a store that has not been upgraded exports
faithfully too (nothing is written to it).

The native format (``hermes_store_export`` = 1) carries column values exactly as stored
(message content keeps its ``"\\x00json:"`` sentinel, ``tool_calls`` stays JSON text,
BLOBs become ``{"$base64": ...}``), so export -> import reproduces rows exactly.

JSONL, one record per line::

    {"hermes_store_export": 1, "schema_version": 30, "exported_at": "..."}
    {"session": {...every column...}, "system_prompt": {...} | null, "model_usage": [...]}
    {"message": {...every column...}}            # the session's messages, by id
    ...
    {"end": {"sessions": N, "messages": M}}      # a missing trailer = a truncated file

JSON: the header keys plus ``"sessions": [{"session": ..., "system_prompt": ...,
"model_usage": [...], "messages": [...]}, ...]`` and ``"end"``.

Import also reads upstream Hermes exports: one ``export_session()`` dict, a list of them
(``export_all()``), or JSONL with one such dict per line. Those are checked and written
by the code behind ``SessionDB.import_sessions`` (``repository.importing``: the same
rules and rows, without its size caps), and every session of either format is written
by its ``SessionWriter``.

Import validates the whole file first (nothing is written when any record is bad), then
inserts in batches of whole sessions. A session whose id already exists is skipped with
its messages, so re-importing the same file adds nothing.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from . import schema
from .engine import create_engine, is_transient_error, reader, translate_error, writer
from .errors import HermesStoreError, SessionNotFoundError, StoreBusyError, StoreReadOnlyError
from .repository.importing import NO_LIMITS, ImportChecker, SessionWriter

FORMAT_KEY = "hermes_store_export"
FORMAT_VERSION = 1
CONTENT_JSON_PREFIX = "\x00json:"

#: rows fetched per keyset page on export
EXPORT_PAGE = 500
#: messages per transaction on import (a session is never split across transactions)
IMPORT_BATCH = 2000
#: rows per executemany on import
_INSERT_CHUNK = 500
#: an upstream-format file of at most this many messages is read and checked once, its
#: checked rows kept from the validation pass for the writes (~20 MB); a bigger one is
#: read twice, so an import's memory stays flat whatever the file's size
KEEP_CHECKED_MESSAGES = 10_000


class ImportFileError(HermesStoreError, ValueError):
    """The import file is unreadable or malformed; nothing was imported."""


# --------------------------------------------------------------------------- helpers

def _to_json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _from_json_value(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$base64"}:
        return base64.b64decode(value["$base64"])
    return value


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _dumps(record: Any) -> str:
    return _ENCODER.encode(record)  # one encoder for every line, not one per call


def _write_line(out: IO[str], text: str, fallback: Any) -> None:
    try:
        out.write(text)
    except UnicodeEncodeError:
        # A lone surrogate cannot be written as UTF-8; the escaped form round-trips.
        out.write(json.dumps(fallback, ensure_ascii=True, separators=(",", ":")))


class _Opened:
    """An Engine for whatever the caller handed us, disposed only if we created it."""

    def __init__(self, target: Any, *, read_only: bool) -> None:
        self.owned = False
        if isinstance(target, Engine):
            self.engine = target
        elif isinstance(getattr(target, "engine", None), Engine):  # a SessionDB
            if not read_only and getattr(target, "read_only", False):
                raise StoreReadOnlyError(getattr(target, "db_path", None))
            self.engine = target.engine
        elif isinstance(target, (str, os.PathLike)):
            from . import location

            where = location.resolve(target)  # a URL is never taken for a path
            if where.is_postgresql:
                from . import postgres

                self.engine = postgres.create_engine(where, read_only=read_only)
            else:
                if not where.path.exists():
                    raise HermesStoreError(f"{where.path} does not exist: nothing to read")
                self.engine = create_engine(where.path, read_only=read_only, journal_mode=None)
            self.owned = True
        else:
            raise TypeError(f"expected an Engine, a SessionDB, a path or a URL, got {type(target).__name__}")

    def close(self) -> None:
        if self.owned:
            self.engine.dispose()


# --------------------------------------------------------------------------- export

@dataclass
class ExportCounts:
    sessions: int = 0
    messages: int = 0


def _reflect(conn: Connection) -> dict[str, sa.TableClause]:
    """Lightweight tables with the file's own columns (no index reflection: upstream's
    expression indexes are irrelevant here and only produce warnings)."""
    inspector = sa.inspect(conn)
    names = set(inspector.get_table_names())
    derived = lambda column: False  # noqa: E731
    if conn.dialect.name == "postgresql":
        # the full-text columns PostgreSQL computes (a file has none): derived, not data
        from .fts.postgres import is_fts_object as derived
    tables = {}
    for name in ("sessions", "messages", "system_prompts", "session_model_usage"):
        if name in names:
            columns = [sa.column(c["name"]) for c in inspector.get_columns(name)
                       if not derived(c["name"])]
            tables[name] = sa.table(name, *columns)
            if name == "session_model_usage":
                pk = inspector.get_pk_constraint(name).get("constrained_columns") or []
                tables["session_model_usage.pk"] = pk  # type: ignore[assignment]
    return tables


def stored_schema_version(conn: Connection) -> int | None:
    """``schema_version.version`` of the file, or None when it has no version table."""
    if not sa.inspect(conn).has_table("schema_version"):
        return None
    return conn.execute(sa.select(sa.func.max(sa.column("version"))).select_from(sa.table("schema_version"))).scalar()


def iter_export(
    engine_or_db: Any,
    session_id: str | None = None,
    source: str | None = None,
    *,
    page_size: int = EXPORT_PAGE,
    counts: ExportCounts | None = None,
    header: dict | None = None,
) -> Iterator[dict]:
    """Yield export records one at a time: ``{"session": ..., "system_prompt": ...,
    "model_usage": [...]}`` followed by that session's ``{"message": ...}`` records.

    Sessions come oldest first (``started_at``, then id), so parents usually precede
    their children; messages in id order. ``session_id`` exports one session (exact id;
    unknown -> ``SessionNotFoundError``), ``source`` only sessions of that source.
    ``header``, if given, is filled with ``schema_version`` before the first record.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, got {page_size}")
    opened = _Opened(engine_or_db, read_only=True)
    counts = counts if counts is not None else ExportCounts()
    try:
        # One read transaction: a consistent snapshot (PostgreSQL: REPEATABLE READ), and
        # WAL lets writers go on.
        with reader(opened.engine).connect() as conn, conn.begin():
            tables = _reflect(conn)
            if header is not None:
                header["schema_version"] = stored_schema_version(conn)
            if "sessions" not in tables:
                if session_id is not None:
                    raise SessionNotFoundError(session_id)
                return
            queries = _ExportQueries(tables, session_id, source, page_size)
            if session_id is not None and conn.execute(queries.session_exists).first() is None:
                raise SessionNotFoundError(session_id)
            for page in queries.session_pages(conn):
                usage = queries.usage_by_session(conn, [row["id"] for row in page])
                for row in page:
                    yield {
                        "session": row,
                        "system_prompt": queries.prompt(conn, row.get("system_prompt_hash")),
                        "model_usage": usage.get(row["id"], []),
                    }
                    counts.sessions += 1
                    for message in queries.messages(conn, row["id"]):
                        counts.messages += 1
                        yield {"message": message}
    finally:
        opened.close()


#: value types JSON carries as they are (anything else is a BLOB: base64)
_PLAIN_TYPES = frozenset({str, int, float, type(None)})
#: prompt rows kept for reuse across sessions: prompts are shared, and big
_PROMPT_CACHE = 16


def _dicts(result: sa.CursorResult) -> list[dict]:
    """A page of rows as JSON-ready dicts (keys looked up once per page)."""
    keys = tuple(result.keys())
    out = []
    for values in result.all():  # fetchall: one driver call per page, not per row
        if _PLAIN_TYPES.issuperset(map(type, values)):
            out.append(dict(zip(keys, values)))
        else:
            out.append({k: _to_json_value(v) for k, v in zip(keys, values)})
    return out


class _ExportQueries:
    """The export's statements, built once per export (on the file's reflected
    columns) with bind parameters; each page is one execution of a prebuilt one."""

    def __init__(self, tables: dict, session_id: str | None, source: str | None, page_size: int):
        self.page_size = page_size
        sessions = tables["sessions"]
        self.session_exists = sa.select(sessions.c.id).where(sessions.c.id == session_id)
        order = (sessions.c.started_at, sessions.c.id)
        first = sa.select(sessions).order_by(*order).limit(page_size)
        if session_id is not None:
            first = first.where(sessions.c.id == session_id)
        if source is not None:
            first = first.where(sessions.c.source == source)
        self.first_sessions = first
        self.next_sessions = first.where(
            sa.tuple_(*order) > sa.tuple_(sa.bindparam("after_started"), sa.bindparam("after_id"))
        )

        messages = tables.get("messages")
        self.first_messages = self.next_messages = None
        if messages is not None:
            self.first_messages = (
                sa.select(messages).where(messages.c.session_id == sa.bindparam("sid"))
                .order_by(messages.c.id).limit(page_size)
            )
            self.next_messages = self.first_messages.where(messages.c.id > sa.bindparam("after_id"))

        usage = tables.get("session_model_usage")
        self.usage = None
        if usage is not None:
            key = [usage.c[name] for name in tables["session_model_usage.pk"]]
            self.usage = (
                sa.select(usage)
                .where(usage.c.session_id.in_(sa.bindparam("sids", expanding=True)))
                .order_by(usage.c.session_id, *key)
            )

        prompts = tables.get("system_prompts")
        self.prompt_by_hash = None
        if prompts is not None:
            self.prompt_by_hash = sa.select(prompts).where(prompts.c.hash == sa.bindparam("hash"))
        self._prompts: dict[str, dict | None] = {}

    def session_pages(self, conn: Connection) -> Iterator[list[dict]]:
        page = _dicts(conn.execute(self.first_sessions))
        while page:
            yield page
            if len(page) < self.page_size:
                return  # a short page is the last one: no query to learn that
            last = page[-1]
            page = _dicts(conn.execute(
                self.next_sessions, {"after_started": last["started_at"], "after_id": last["id"]}
            ))

    def messages(self, conn: Connection, sid: str) -> Iterator[dict]:
        if self.first_messages is None:
            return
        page = _dicts(conn.execute(self.first_messages, {"sid": sid}))
        while page:
            yield from page
            if len(page) < self.page_size:
                return
            page = _dicts(conn.execute(self.next_messages, {"sid": sid, "after_id": page[-1]["id"]}))

    def usage_by_session(self, conn: Connection, sids: list[str]) -> dict[str, list[dict]]:
        """The model-usage rows of a page of sessions, in one query."""
        grouped: dict[str, list[dict]] = {}
        if self.usage is not None and sids:
            for row in _dicts(conn.execute(self.usage, {"sids": sids})):
                grouped.setdefault(row["session_id"], []).append(row)
        return grouped

    def prompt(self, conn: Connection, prompt_hash: Any) -> dict | None:
        if self.prompt_by_hash is None or not prompt_hash:
            return None
        if prompt_hash not in self._prompts:
            found = _dicts(conn.execute(self.prompt_by_hash, {"hash": prompt_hash}))
            if len(self._prompts) >= _PROMPT_CACHE:
                self._prompts.pop(next(iter(self._prompts)))  # the oldest entry
            self._prompts[prompt_hash] = found[0] if found else None
        prompt = self._prompts[prompt_hash]
        return dict(prompt) if prompt is not None else None  # each record owns its dicts


def export_header(schema_version: int | None) -> dict:
    return {
        FORMAT_KEY: FORMAT_VERSION,
        "schema_version": schema_version,
        "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_export(
    engine_or_db: Any,
    out: IO[str],
    fmt: str = "jsonl",
    *,
    session_id: str | None = None,
    source: str | None = None,
    on_record: Callable[[ExportCounts], None] | None = None,
) -> ExportCounts:
    """Stream an export to a text stream in ``jsonl``, ``json`` or ``md``; returns counts."""
    if fmt not in ("jsonl", "json", "md"):
        raise ValueError(f"unknown export format {fmt!r}: use json, jsonl or md")
    counts = ExportCounts()
    meta: dict = {}
    records = iter_export(engine_or_db, session_id, source, counts=counts, header=meta)
    writers = {"jsonl": _write_jsonl, "json": _write_json, "md": _write_markdown}
    writers[fmt](records, out, meta, counts, on_record or (lambda c: None))
    return counts


def _first(records: Iterator[dict]) -> dict | None:
    # The header needs schema_version, which the generator learns on its first step.
    return next(records, None)


def _write_jsonl(records, out, meta, counts, tick) -> None:
    first = _first(records)
    out.write(_dumps(export_header(meta.get("schema_version"))) + "\n")
    if first is not None:
        for record in _chain(first, records):
            _write_line(out, _dumps(record), record)
            out.write("\n")
            tick(counts)
    out.write(_dumps({"end": asdict(counts)}) + "\n")


def _write_json(records, out, meta, counts, tick) -> None:
    first = _first(records)
    head = export_header(meta.get("schema_version"))
    out.write("{\n" + ",\n".join(f"{json.dumps(k)}: {_dumps(v)}" for k, v in head.items()))
    out.write(',\n"sessions": [')
    open_session = False
    if first is not None:
        for record in _chain(first, records):
            if "session" in record:
                if open_session:
                    out.write("]},")
                body = _dumps(record)
                out.write("\n" + body[:-1] + ',"messages":[')
                open_session = True
                first_message = True
            else:
                out.write("\n" if first_message else ",\n")
                _write_line(out, _dumps(record["message"]), record["message"])
                first_message = False
            tick(counts)
    if open_session:
        out.write("]}")
    out.write("\n],\n" + f'"end": {_dumps(asdict(counts))}' + "\n}\n")


def _chain(first: dict, rest: Iterator[dict]) -> Iterator[dict]:
    yield first
    yield from rest


def decode_content(value: Any) -> Any:
    """Stored message content -> what the repository returns (list/dict for JSON content)."""
    if isinstance(value, str) and value.startswith(CONTENT_JSON_PREFIX):
        try:
            return json.loads(value[len(CONTENT_JSON_PREFIX):])
        except ValueError:
            return value
    return value


def _fmt_time(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _markdown_content(content: Any) -> str:
    content = decode_content(content)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and part.get("type"):
                parts.append(f"_[{part['type']}]_")
            else:
                parts.append(json.dumps(part, ensure_ascii=False))
        return "\n\n".join(parts)
    return "```json\n" + json.dumps(content, ensure_ascii=False, indent=2) + "\n```"


def _write_markdown(records, out, meta, counts, tick) -> None:
    for record in records:
        if "session" in record:
            s = record["session"]
            if counts.sessions > 1:
                out.write("\n---\n\n")
            out.write(f"# {s.get('title') or s['id']}\n\n")
            for label, value in (
                ("id", s["id"]),
                ("source", s.get("source")),
                ("model", s.get("model")),
                ("started", _fmt_time(s.get("started_at"))),
                ("ended", _fmt_time(s.get("ended_at")) if s.get("ended_at") else None),
                ("parent", s.get("parent_session_id")),
            ):
                if value:
                    out.write(f"- **{label}**: {value}\n")
            out.write("\n")
        else:
            m = record["message"]
            if m.get("active", 1) == 0:
                continue  # rewound rows are not part of the transcript
            heading = m.get("role") or "?"
            if m.get("tool_name"):
                heading += f" ({m['tool_name']})"
            out.write(f"## {heading} · {_fmt_time(m.get('timestamp'))}\n\n")
            text = _markdown_content(m.get("content"))
            if text:
                _write_line(out, text + "\n\n", text)
            if m.get("tool_calls"):
                calls = m["tool_calls"]
                try:
                    calls = json.dumps(json.loads(calls), ensure_ascii=False, indent=2)
                except (TypeError, ValueError):
                    pass
                out.write(f"```json\n{calls}\n```\n\n")
        tick(counts)


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
class _Session:
    """A session record of the native format (every column as stored)."""

    line: int
    row: dict
    system_prompt: dict | None
    model_usage: list


@dataclass
class _Message:
    line: int
    row: dict


@dataclass
class _Entry:
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


def _detect(path: Path) -> str:
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


def _events(path: Path, fmt: str) -> Iterator[_Session | _Message | _Entry]:
    """The records of a file, with where they are for error messages."""
    if fmt == "jsonl":
        yield from _jsonl_events(path)
    else:
        yield from _json_events(path)


def _jsonl_events(path: Path) -> Iterator[_Session | _Message | _Entry]:
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
                    yield _Message(lineno, _decode_row(_expect_dict(record["message"], lineno, "message")))
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
                yield _Entry(f"{path}:{lineno}", entries, record)
                entries += 1
    if native and not ended:
        raise ImportFileError(
            f"{path}: the end record is missing, so the file is truncated; export it again"
        )


def _json_events(path: Path) -> Iterator[_Session | _Message | _Entry]:
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
                yield _Message(index, _decode_row(_expect_dict(message, index, "message")))
    elif isinstance(doc, dict):
        yield _Entry(str(path), 0, doc)
    elif isinstance(doc, list):
        for index, entry in enumerate(doc):
            yield _Entry(f"{path}: entry {index}", index, entry)
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
    return {k: _from_json_value(v) for k, v in row.items()}


def _native_session(record: dict, where: int) -> _Session:
    row = _decode_row(_expect_dict(record["session"], where, "session"))
    prompt = record.get("system_prompt")
    usage = record.get("model_usage") or []
    if not isinstance(usage, list):
        raise ImportFileError(f"record {where}: model_usage must be a list")
    return _Session(
        where,
        row,
        _decode_row(_expect_dict(prompt, where, "system_prompt")) if prompt is not None else None,
        [_decode_row(_expect_dict(u, where, "model_usage row")) for u in usage],
    )


#: errors listed in one ImportFileError (the rest are counted)
_MAX_LISTED_ERRORS = 20


def _validate(events: Iterable[_Session | _Message | _Entry],
              path: Path) -> tuple[int, list[_Entry] | None]:
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
    kept: list[_Entry] | None = []
    for event in events:
        if isinstance(event, _Entry):
            result = checker.check(event.index, event.raw)
            if isinstance(result, dict):
                sid = f"session {result['session_id']!r}: " if "session_id" in result else ""
                entry_errors.append(f"{event.where}: {sid}{result['error']}")
            else:
                n_messages += len(result.messages)
                if kept is not None and n_messages <= KEEP_CHECKED_MESSAGES:
                    kept.append(_Entry(event.where, event.index, None, checked=result))
                else:
                    kept = None
            continue
        kept = None
        where = f"{path}:{event.line}"
        if isinstance(event, _Session):
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
    path = Path(path).expanduser()
    if not path.is_file():
        raise ImportFileError(f"{path} does not exist or is not a file")
    fmt = _detect(path)
    total_messages, checked = _validate(_events(path, fmt), path)

    report = ImportReport(format=fmt)
    opened = _Opened(db, read_only=False)
    try:
        events = iter(checked) if checked is not None else _events(path, fmt)
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
        self.label = engine.url.database
        # On PostgreSQL a batch reads (ids, titles) then writes: like every such write
        # unit it runs alone under the store's unit lock (decision D13), as BEGIN
        # IMMEDIATE makes it run alone on SQLite.
        self.lock_unit = None
        if engine.dialect.name == "postgresql":
            from . import location, postgres

            self.label = location.mask(engine.url)
            self.lock_unit = postgres.lock_unit
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

    def run(self, events: Iterator[_Session | _Message | _Entry]) -> None:
        try:
            self._run(events)
        except sa.exc.DBAPIError as exc:
            mapped = translate_error(exc, self.label)
            if mapped is None and is_transient_error(exc):  # PostgreSQL's lock timeout
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

    def _run(self, events: Iterator[_Session | _Message | _Entry]) -> None:
        conn: Connection | None = None
        tx = None
        in_batch = 0
        skipping = False
        buffer: list[dict] = []
        try:
            for event in events:
                if isinstance(event, _Message):
                    if skipping:
                        self.sessions.tally.messages_skipped += 1
                    else:
                        buffer.append(self._message_values(event.row))
                        in_batch += 1
                        if len(buffer) >= _INSERT_CHUNK:
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
                    if self.lock_unit is not None:
                        self.lock_unit(conn, exclusive=True)
                if isinstance(event, _Entry):
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
        if before // _INSERT_CHUNK != self.done // _INSERT_CHUNK:
            self.progress(self.done, self.total)

    def _add_native(self, conn: Connection, event: _Session) -> bool:
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
