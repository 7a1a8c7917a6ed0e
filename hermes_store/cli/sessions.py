"""``hermes-store sessions …``: list, inspect, rename, delete, prune, stats, export, import."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..errors import SessionNotFoundError
from .common import (
    JsonOption,
    YesOption,
    confirm,
    local_path,
    open_store,
    out,
    require_file,
    state,
)
from .output import human_bytes, one_line, when
from .probe import read_engine, size_bytes, wal_bytes

if TYPE_CHECKING:
    from ..location import Target

app = typer.Typer(help="List, inspect, rename, delete, prune, export and import sessions.", no_args_is_help=True)

#: the keys of a session row in `sessions list --json` (stable)
LIST_KEYS = (
    "id", "title", "source", "model", "message_count", "started_at", "last_active",
    "preview", "parent_session_id", "end_reason", "archived",
)


def resolve(db, ref: str) -> str:
    """An exact id, a unique id prefix, or a title (newest "#n" variant first)."""
    sid = db.resolve_session_id(ref) or db.resolve_session_by_title(ref)
    if sid is None:
        raise SessionNotFoundError(ref)
    return sid


# --------------------------------------------------------------------------- list

@app.command("list")
def list_command(
    ctx: typer.Context,
    source: Annotated[Optional[str], typer.Option(help="Only sessions from this source (cli, telegram, …).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows.")] = 20,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived sessions.")] = False,
    children: Annotated[bool, typer.Option("--children", help="Include child sessions (delegate runs, continuations).")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Sessions, newest first: id, title (or first words), source, messages, activity."""
    o = out(ctx, json_flag)
    with open_store(state(ctx).target) as db:
        rows = db.list_sessions_rich(
            source=source, limit=limit, include_archived=archived, include_children=children
        )
    items = [{key: row.get(key) for key in LIST_KEYS} for row in rows]
    if o.json_mode:
        o.emit({"count": len(items), "sessions": items})
        return
    if not items:
        o.line("No sessions found.")
        return
    width = o.console.width
    wide = width >= 120
    id_width = min(max(len(i["id"]) for i in items), 36)  # ids are copied: keep them whole
    columns = [
        {"header": "ID", "min_width": id_width, "overflow": "fold"},
        {"header": "Title / first message", "flex": True, "max_width": 60},
        {"header": "Source", "max_width": 10},
    ]
    if wide:
        columns += [{"header": "Model", "max_width": 28}, {"header": "Started"}]
    columns += [{"header": "Msgs", "justify": "right"}, {"header": "Last active"}]
    table_rows = []
    for item in items:
        label = item["title"] or (one_line(item["preview"]) or "(empty)")
        row = [item["id"], label, item["source"]]
        if wide:
            row += [item["model"], when(item["started_at"])]
        last = when(item["last_active"])
        row += [item["message_count"], last if width >= 100 else last[:10]]
        table_rows.append(row)
    o.table(columns, table_rows)


# --------------------------------------------------------------------------- show / lineage

def _child_kind(row: dict, parent: dict | None) -> str:
    try:
        config = json.loads(row.get("model_config") or "{}")
    except ValueError:
        config = {}
    if isinstance(config, dict) and config.get("_delegate_from"):
        return "delegate"
    if isinstance(config, dict) and config.get("_branched_from"):
        return "branch"
    if parent is not None and parent.get("end_reason") == "compression":
        return "continuation"
    if parent is not None and parent.get("end_reason") == "branched":
        return "branch"
    return "child" if parent is not None else "root"


def _lineage(db, sid: str) -> list[dict]:
    """The whole family of ``sid``: root first, then descendants by generation."""
    root_id = db.get_conversation_root(sid)
    root = db.get_session(root_id)
    family = [root] + db.get_session_descendants(root_id)
    by_id = {row["id"]: row for row in family}
    depth: dict[str, int] = {}
    result = []
    for row in family:  # generation order: a parent comes before its children
        parent = by_id.get(row.get("parent_session_id")) if row["id"] != root_id else None
        depth[row["id"]] = depth[parent["id"]] + 1 if parent else 0
        result.append(
            {
                "id": row["id"],
                "parent_session_id": parent["id"] if parent else None,
                "kind": _child_kind(row, parent),
                "depth": depth[row["id"]],
                "title": row.get("title"),
                "source": row.get("source"),
                "started_at": row.get("started_at"),
                "ended_at": row.get("ended_at"),
                "end_reason": row.get("end_reason"),
                "message_count": row.get("message_count"),
                "selected": row["id"] == sid,
            }
        )
    return result


def _print_tree(o, family: list[dict]) -> None:
    from rich.markup import escape
    from rich.tree import Tree

    def label(node: dict) -> str:
        title = f" {escape(one_line(node['title'], 40))}" if node["title"] else ""
        ended = f", ended {node['end_reason']}" if node["end_reason"] else ""
        ident = f"[bold]→ {escape(node['id'])}[/]" if node["selected"] else escape(node["id"])
        return f"{ident}{title} [dim]({node['kind']}, {node['message_count'] or 0} msgs{escape(ended)})[/]"

    root = family[0]
    tree = Tree(label(root))
    branches = {root["id"]: tree}
    for node in family[1:]:
        parent = branches.get(node["parent_session_id"], tree)
        branches[node["id"]] = parent.add(label(node))
    o.print(tree)


@app.command("show")
def show_command(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="ID|TITLE|PREFIX", help="Session id, unique id prefix, or title.")],
    messages: Annotated[bool, typer.Option("--messages/--no-messages", help="Print the transcript.")] = True,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Only the last N messages.")] = None,
    json_flag: JsonOption = False,
) -> None:
    """One session: metadata, lineage and messages."""
    o = out(ctx, json_flag)
    with open_store(state(ctx).target) as db:
        sid = resolve(db, ref)
        session = db.get_session(sid)
        family = _lineage(db, sid)
        transcript = db.get_messages(sid) if messages else []
    if limit is not None:
        transcript = transcript[-limit:]
    if o.json_mode:
        o.emit({"session": session, "lineage": family, "messages": transcript})
        return
    tokens = f"{session.get('input_tokens') or 0} in / {session.get('output_tokens') or 0} out"
    cost = session.get("actual_cost_usd") or session.get("estimated_cost_usd")
    o.pairs(
        [
            ("id", session["id"]),
            ("title", session.get("title")),
            ("source", session.get("source")),
            ("model", session.get("model")),
            ("started", when(session.get("started_at"))),
            ("ended", f"{when(session.get('ended_at'))} ({session.get('end_reason')})" if session.get("ended_at") else "live"),
            ("messages", session.get("message_count")),
            ("tool calls", session.get("tool_call_count")),
            ("tokens", tokens),
            ("cost (USD)", f"{cost:.4f}" if isinstance(cost, (int, float)) else None),
            ("cwd", session.get("cwd")),
            ("archived", "yes" if session.get("archived") else "no"),
        ]
    )
    if len(family) > 1:
        o.line("")
        o.line("Lineage:", style="bold")
        _print_tree(o, family)
    if messages:
        o.line("")
        o.line(f"Messages ({len(transcript)}{' shown' if limit else ''}):", style="bold")
        for m in transcript:
            head = f"[{when(m.get('timestamp'))}] {m.get('role')}"
            if m.get("tool_name"):
                head += f" ({m['tool_name']})"
            o.line(head, style="bold cyan")
            o.line(_content_text(m.get("content")) or "")
            if m.get("tool_calls"):
                for call in m["tool_calls"] if isinstance(m["tool_calls"], list) else [m["tool_calls"]]:
                    fn = call.get("function", {}) if isinstance(call, dict) else {}
                    o.line(f"  -> {fn.get('name', '?')}({one_line(fn.get('arguments'), 60)})", style="dim")


def _content_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "\n".join(
            part.get("text") if isinstance(part, dict) and isinstance(part.get("text"), str)
            else f"[{part.get('type', 'part')}]" if isinstance(part, dict) else str(part)
            for part in content
        )
    return json.dumps(content, ensure_ascii=False)


@app.command("lineage")
def lineage_command(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="ID", help="Session id, unique prefix, or title.")],
    json_flag: JsonOption = False,
) -> None:
    """The session's family tree: root, continuations, branches, delegate runs."""
    o = out(ctx, json_flag)
    with open_store(state(ctx).target) as db:
        sid = resolve(db, ref)
        family = _lineage(db, sid)
    if o.json_mode:
        o.emit({"session_id": sid, "root_id": family[0]["id"], "sessions": family})
        return
    _print_tree(o, family)


# --------------------------------------------------------------------------- change

@app.command("rename")
def rename_command(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="ID", help="Session id or unique prefix.")],
    title: Annotated[list[str], typer.Argument(help="The new title (words are joined with spaces).")],
    json_flag: JsonOption = False,
) -> None:
    """Give a session a new title (unique across sessions)."""
    o = out(ctx, json_flag)
    new_title = " ".join(title)
    with open_store(state(ctx).target, write=True) as db:
        sid = db.resolve_session_id(ref)
        if sid is None:
            raise SessionNotFoundError(ref)
        db.set_session_title(sid, new_title)
        stored = db.get_session_title(sid)
    if o.json_mode:
        o.emit({"id": sid, "title": stored})
    else:
        o.line(f"Session '{sid}' renamed to: {stored}")


@app.command("delete")
def delete_command(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="ID", help="Session id or unique prefix.")],
    yes: YesOption = False,
    json_flag: JsonOption = False,
) -> None:
    """Delete a session, its messages and its delegate runs (other children are kept)."""
    o = out(ctx, json_flag)
    with open_store(state(ctx).target, write=True) as db:
        sid = db.resolve_session_id(ref)
        if sid is None:
            raise SessionNotFoundError(ref)
        confirm(f"Delete session '{sid}' and all its messages?", yes=yes, out=o)
        deleted = db.delete_session(sid)
    if o.json_mode:
        o.emit({"id": sid, "deleted": deleted})
    else:
        o.line(f"Deleted session '{sid}'." if deleted else f"Session '{sid}' was already gone.")


@app.command("prune")
def prune_command(
    ctx: typer.Context,
    older_than: Annotated[float, typer.Option("--older-than", metavar="DAYS", min=0, help="Ended sessions started more than DAYS ago.")] = 90,
    source: Annotated[Optional[str], typer.Option(help="Only sessions from this source.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    yes: YesOption = False,
    json_flag: JsonOption = False,
) -> None:
    """Delete ended sessions older than DAYS (live sessions are never pruned)."""
    o = out(ctx, json_flag)
    with open_store(state(ctx).target, write=not dry_run) as db:
        candidates = db.list_prune_candidates(older_than_days=older_than, source=source)
        pruned = 0
        if candidates and not dry_run:
            if not o.json_mode:
                _show_candidates(o, candidates[:15], len(candidates))
            confirm(f"Delete these {len(candidates)} session(s) and their messages?", yes=yes, out=o)
            pruned = db.prune_sessions(older_than_days=older_than, source=source)
    keys = ("id", "source", "title", "started_at", "ended_at", "message_count")
    if o.json_mode:
        o.emit(
            {
                "dry_run": dry_run,
                "older_than_days": older_than,
                "source": source,
                "candidates": [{k: c.get(k) for k in keys} for c in candidates],
                "pruned": pruned,
            }
        )
        return
    if not candidates:
        o.line(f"No ended sessions older than {older_than:g} days{f' from {source}' if source else ''}.")
    elif dry_run:
        _show_candidates(o, candidates, len(candidates))
        o.line(f"Dry run: {len(candidates)} session(s) would be deleted; nothing was changed.")
    else:
        o.line(f"Pruned {pruned} session(s).")


def _show_candidates(o, rows: list[dict], total: int) -> None:
    o.table(
        [
            {"header": "ID", "overflow": "fold", "max_width": 36},
            {"header": "Title", "flex": True, "max_width": 50},
            {"header": "Source", "max_width": 10},
            {"header": "Msgs", "justify": "right"},
            {"header": "Started"},
        ],
        [[r["id"], r.get("title") or "", r.get("source"), r.get("message_count"), when(r.get("started_at"))] for r in rows],
    )
    if total > len(rows):
        o.line(f"… and {total - len(rows)} more")


# --------------------------------------------------------------------------- stats

def _stats(target: "Target") -> dict:
    import sqlalchemy as sa

    from .. import schema
    from ..sql.constructs import int_sum

    S, M = schema.sessions, schema.messages
    real = (
        sa.select(M.c.session_id, sa.func.count().label("n"))
        .group_by(M.c.session_id)
        .subquery("real")
    )
    # a REAL on both engines (SQLite would sum the literal 0 as an integer)
    cost = sa.func.coalesce(S.c.actual_cost_usd, S.c.estimated_cost_usd, sa.literal(0.0))

    def grouped(key):
        stmt = (
            sa.select(
                key.label("key"),
                sa.func.count().label("sessions"),
                sa.func.coalesce(int_sum(real.c.n), 0).label("messages"),
                sa.func.coalesce(int_sum(S.c.input_tokens), 0).label("input_tokens"),
                sa.func.coalesce(int_sum(S.c.output_tokens), 0).label("output_tokens"),
                sa.func.sum(cost).label("cost_usd"),
            )
            .select_from(S.outerjoin(real, real.c.session_id == S.c.id))
            .group_by(key)
            .order_by(sa.func.count().desc(), key)
        )
        return [dict(r._mapping) for r in conn.execute(stmt)]

    # one read snapshot: the totals and both breakdowns agree with each other
    with read_engine(target) as engine, engine.connect() as conn, conn.begin():
        by_source = grouped(S.c.source)
        by_model = grouped(S.c.model)
        totals = conn.execute(
            sa.select(
                sa.select(sa.func.count()).select_from(S).scalar_subquery(),
                sa.select(sa.func.count()).select_from(M).scalar_subquery(),
            )
        ).one()
        size = size_bytes(target, conn)
    return {
        "path": target.display,
        "sessions": totals[0],
        "messages": totals[1],
        "size_bytes": size,
        "wal_bytes": wal_bytes(target),
        "by_source": [{"source": r.pop("key"), **r} for r in by_source],
        "by_model": [{"model": r.pop("key"), **r} for r in by_model],
    }


@app.command("stats")
def stats_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Totals by source and by model: sessions, messages, tokens, cost."""
    o = out(ctx, json_flag)
    target = state(ctx).target
    with open_store(target):  # refuses a store below head, with the command to run
        pass
    data = _stats(target)
    if o.json_mode:
        o.emit(data)
        return
    wal = "" if data["wal_bytes"] is None else f" (+{human_bytes(data['wal_bytes'])} WAL)"
    o.line(
        f"{data['sessions']} sessions, {data['messages']} messages, "
        f"{human_bytes(data['size_bytes'])}{wal}"
    )
    for title, key, rows in (("By source", "source", data["by_source"]), ("By model", "model", data["by_model"])):
        o.table(
            [
                {"header": title, "flex": True, "max_width": 40},
                {"header": "Sessions", "justify": "right"},
                {"header": "Messages", "justify": "right"},
                {"header": "Tokens in", "justify": "right"},
                {"header": "Tokens out", "justify": "right"},
                {"header": "Cost $", "justify": "right"},
            ],
            [
                [r[key] or "(none)", r["sessions"], r["messages"], r["input_tokens"], r["output_tokens"],
                 f"{r['cost_usd']:.2f}" if r["cost_usd"] is not None else None]
                for r in rows
            ],
        )


# --------------------------------------------------------------------------- export / import

@app.command("export")
def export_command(
    ctx: typer.Context,
    ref: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="One session (id, prefix or title); all when omitted.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="json, jsonl or md.", case_sensitive=False)] = "jsonl",
    output_path: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write here instead of stdout.",
        parser=local_path("--output", "an export is a file; `hermes-store db copy` copies a store into a database"))] = None,
    source: Annotated[Optional[str], typer.Option(help="Only sessions from this source.")] = None,
    json_flag: JsonOption = False,
) -> None:
    """Stream sessions with every message (bounded memory, no size cap)."""
    from .. import transfer

    fmt = fmt.lower()
    if fmt not in ("json", "jsonl", "md"):
        raise typer.BadParameter(f"{fmt!r}: choose json, jsonl or md", param_hint="--format")
    o = out(ctx, json_flag)
    db_target = state(ctx).target
    sid = None
    if ref:
        with open_store(db_target) as db:
            sid = resolve(db, ref)
    elif db_target.is_file:
        require_file(db_target.path)  # the export itself reads any schema version, read-only

    to_stdout = output_path is None or output_path.name == "-"
    target = None if to_stdout else output_path
    with read_engine(db_target) as engine:
        total = _count_messages(engine, sid, source)
        with o.progress("Exporting", total) as advance:
            tick = lambda counts: advance(counts.messages)  # noqa: E731
            if target is None:
                counts = transfer.write_export(engine, sys.stdout, fmt, session_id=sid, source=source, on_record=tick)
                sys.stdout.flush()
            else:
                # Written aside and renamed when complete: never a half export under the name.
                partial = target.with_name(f".{target.name}.partial")
                try:
                    with open(partial, "w", encoding="utf-8", newline="\n") as fh:
                        counts = transfer.write_export(engine, fh, fmt, session_id=sid, source=source, on_record=tick)
                    os.replace(partial, target)
                finally:
                    partial.unlink(missing_ok=True)
    if target is not None:
        summary = {"path": str(target), "format": fmt, "sessions": counts.sessions, "messages": counts.messages}
        if o.json_mode:
            o.emit(summary)
        else:
            o.line(f"Exported {counts.sessions} session(s), {counts.messages} message(s) to {target}")


def _count_messages(engine, sid: str | None, source: str | None) -> int:
    import sqlalchemy as sa

    from .. import schema

    S, M = schema.sessions, schema.messages
    stmt = sa.select(sa.func.count()).select_from(M)
    if sid is not None:
        stmt = stmt.where(M.c.session_id == sid)
    if source is not None:
        stmt = stmt.where(M.c.session_id.in_(sa.select(S.c.id).where(S.c.source == source)))
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(M.name):
            return 0  # an empty store: the export finds nothing either
        return conn.execute(stmt).scalar() or 0


IMPORT_KEYS = (
    "file", "format", "sessions_added", "sessions_skipped", "messages_added",
    "messages_skipped", "detached", "renumbered", "retitled", "ignored_fields",
)


@app.command("import")
def import_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(
        help="A json/jsonl export (this tool's or upstream Hermes').",
        parser=local_path("FILE", "import reads an export file; `hermes-store db copy` copies a whole store"))],
    json_flag: JsonOption = False,
) -> None:
    """Import sessions from an export; sessions already present are skipped."""
    from .. import transfer

    o = out(ctx, json_flag)
    # Opened for writing: imports need the head schema (an older store is upgraded,
    # a missing file created), and on PostgreSQL each batch takes the store's unit lock.
    with open_store(state(ctx).target, write=True) as db, \
            o.progress("Importing", None) as advance:
        report = transfer.import_file(db, file, progress=lambda done, total: advance(done, total=total))
    data = {"file": str(file), **report.as_dict()}
    if o.json_mode:
        o.emit({k: data[k] for k in IMPORT_KEYS})
        return
    o.line(
        f"Imported {file}: added {report.sessions_added} session(s) with "
        f"{report.messages_added} message(s); skipped {report.sessions_skipped} already "
        f"present ({report.messages_skipped} message(s))."
    )
    if report.detached:
        o.line(f"{report.detached} parent link(s) dropped: the parent is in neither the file nor the store.")
    if report.retitled:
        o.line(f"{report.retitled} session(s) had a title already in use and got an \"(imported)\" suffix.")
    if report.renumbered:
        o.line(f"{report.renumbered} message id(s) were taken and got new ids.")
    if report.ignored_fields:
        o.line(f"Fields this schema has no column for (ignored): {', '.join(report.ignored_fields)}")
