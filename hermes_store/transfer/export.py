"""Streaming export: keyset pages inside one read snapshot, as JSONL, JSON or Markdown."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass
from typing import IO, Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends.base import backend_of
from ..connections import reader
from ..errors import SessionNotFoundError
from ..repository.message_rows import CONTENT_JSON_PREFIX
from .formats import (
    EXPORT_PAGE,
    FORMAT_KEY,
    FORMAT_VERSION,
    _dumps,
    OpenedTarget,
    _to_json_value,
    _write_line,
)

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
    # columns the engine computes itself (PostgreSQL's full-text ones): derived, not data
    derived = backend_of(conn).computed_column
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
    opened = OpenedTarget(engine_or_db, read_only=True)
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
