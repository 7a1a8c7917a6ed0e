"""``hermes-store search QUERY``: full-text search with highlighted snippets."""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from .common import JsonOption, open_store, out, state
from .output import escape, one_line, when

#: snippet markers the repository puts around matched terms
_HIT = re.compile(r">>>(.*?)<<<", re.S)
RESULT_KEYS = ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model", "session_started")


def _highlight(snippet: str, styled: bool) -> str:
    """Rich markup: matched terms in bold on a terminal; the >>>markers<<< stay when
    piped, so the hits remain visible without colour."""
    flat = one_line(snippet)
    if not styled:
        return escape(flat)
    parts, last = [], 0
    for m in _HIT.finditer(flat):
        parts.append(escape(flat[last:m.start()]))
        parts.append(f"[bold yellow]{escape(m.group(1))}[/]")
        last = m.end()
    parts.append(escape(flat[last:]))
    return "".join(parts)


def search_command(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Words to find (FTS5 syntax: phrases in quotes, OR, NOT, prefix*).")],
    source: Annotated[Optional[list[str]], typer.Option(help="Only sessions from this source (repeatable).")] = None,
    role: Annotated[Optional[list[str]], typer.Option(help="Only messages with this role (repeatable).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many hits.")] = 20,
    sort: Annotated[str, typer.Option(help="rank (best match), newest or oldest.", case_sensitive=False)] = "rank",
    json_flag: JsonOption = False,
) -> None:
    """Search message text across every session."""
    sort = sort.lower()
    if sort not in ("rank", "newest", "oldest"):
        raise typer.BadParameter(f"{sort!r}: choose rank, newest or oldest", param_hint="--sort")
    o = out(ctx, json_flag)
    with open_store(state(ctx).target) as db:
        hits = db.search_messages(
            query,
            source_filter=source or None,
            role_filter=role or None,
            limit=limit,
            sort=None if sort == "rank" else sort,
        )
    if o.json_mode:
        o.emit({"query": query, "count": len(hits), "results": [{k: h.get(k) for k in RESULT_KEYS} for h in hits]})
        return
    if not hits:
        o.line(f"No messages match {query!r}.")
        return
    styled = o.console.is_terminal
    for hit in hits:
        who = hit["role"] + (f" ({hit['tool_name']})" if hit.get("tool_name") else "")
        o.print(
            f"[bold]{escape(hit['session_id'])}[/] [dim]#{hit['id']} · {escape(who)} · "
            f"{when(hit.get('timestamp'))} · {escape(hit.get('source') or '-')}[/]"
        )
        o.print("  " + _highlight(hit.get("snippet") or "", styled))
    o.note(f"{len(hits)} hit(s).")


def register(app: typer.Typer) -> None:
    app.command("search")(search_command)
