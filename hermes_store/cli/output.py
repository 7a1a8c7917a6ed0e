"""Rendering for the CLI: JSON for scripts, rich tables for people.

* ``--json``: one JSON document on stdout, nothing else there (messages go to stderr),
  keys stable across releases.
* Human output: rich tables that fit the terminal (80 columns when piped, or whatever
  ``COLUMNS`` says), colour only on a terminal (and never with ``NO_COLOR``).
* Progress bars only on an interactive stderr, so logs and pipes stay clean.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

# Rich is imported where it draws, not here: a ``--json`` run prints one document and
# never needs it (what it costs a start: docs/performance.md, "Start-up").

# Exit codes (documented in docs/operations.md and `hermes-store --help`).
EXIT_OK = 0
EXIT_PROBLEMS = 1  # doctor/check/recover found problems
EXIT_USAGE = 2  # bad options or invalid input (Click's own code for usage errors)
EXIT_NOT_FOUND = 3  # no such session / file
EXIT_DAMAGED = 4  # damaged file or not a database: run `recover`
EXIT_SCHEMA = 5  # schema too new / not at head / unknown revision
EXIT_BUSY = 6  # another process held the write lock
EXIT_CANCELLED = 7  # the user answered "no" at a confirmation prompt
EXIT_ERROR = 8  # any other hermes_store error (permissions, disk full, ...)


def stdout_console() -> "Console":
    # Created per call: the CLI runner (and tests) swap sys.stdout between invocations.
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=False, emoji=False)


def stderr_console() -> "Console":
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=False, emoji=False)


def escape(text: str) -> str:
    """Text with rich markup ([brackets]) escaped."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class Output:
    """What a command prints, in JSON or for people."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode

    @functools.cached_property
    def console(self) -> "Console":
        return stdout_console()

    @functools.cached_property
    def err(self) -> "Console":
        return stderr_console()

    # -- data

    def emit(self, payload: Any) -> None:
        """The one JSON document of a ``--json`` run."""
        sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2, default=_json_default))
        sys.stdout.write("\n")
        sys.stdout.flush()

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)

    def line(self, text: str, style: str | None = None) -> None:
        """Plain text (escaped: data may contain [brackets])."""
        self.console.print(escape(text), style=style)

    def note(self, text: str) -> None:
        """Status for people; on stderr in JSON mode so stdout stays one document."""
        (self.err if self.json_mode else self.console).print(escape(text))

    def warn(self, text: str) -> None:
        self.err.print(escape(text), style="yellow")

    def error(self, text: str) -> None:
        self.err.print(f"[bold red]error:[/] {escape(text)}")

    # -- shapes

    def table(self, columns: list[dict], rows: list[list[Any]], *, title: str | None = None) -> None:
        """``columns``: dicts with ``header`` and optional ``justify``, ``max_width``,
        ``min_width``, ``flex`` (this column gives up width so the table fits the
        terminal; others keep their natural width) and ``overflow`` ("ellipsis",
        "fold")."""
        from rich import box
        from rich.cells import cell_len
        from rich.table import Table

        cells = [[_cell(v) for v in row] for row in rows]
        widths = []
        for i, spec in enumerate(columns):
            natural = max([cell_len(spec["header"])] + [cell_len(r[i]) for r in cells])
            if spec.get("max_width"):
                natural = min(natural, spec["max_width"])
            widths.append(max(natural, spec.get("min_width", 0)))
        gaps = 3 * (len(columns) - 1)  # padding 1 + separator 1 + padding 1
        excess = sum(widths) + gaps - self.console.width
        for i, spec in enumerate(columns):
            if excess > 0 and spec.get("flex"):
                floor = max(spec.get("min_width", 0), 6)
                give = min(excess, widths[i] - floor)
                widths[i] -= max(give, 0)
                excess -= max(give, 0)
        table = Table(box=box.SIMPLE_HEAD, title=title, expand=False, pad_edge=False, show_edge=False)
        for spec, width in zip(columns, widths):
            table.add_column(
                spec["header"],
                justify=spec.get("justify", "left"),
                width=width,
                no_wrap=spec.get("overflow", "ellipsis") == "ellipsis",
                overflow=spec.get("overflow", "ellipsis"),
            )
        for row in cells:
            table.add_row(*(escape(v) for v in row))
        self.console.print(table)

    def pairs(self, items: list[tuple[str, Any]]) -> None:
        """A key/value block (metadata of one object)."""
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for key, value in items:
            table.add_row(escape(key), escape(_cell(value)))
        self.console.print(table)

    @contextlib.contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """Yields ``advance_to(done)``; draws a bar only on an interactive stderr."""
        if self.json_mode or not self.err.is_terminal:
            yield lambda done, **kw: None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total)
            yield lambda done, **kw: bar.update(task, completed=done, **kw)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value % 1 else str(int(value))
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return {"$base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    return str(value)


def when(ts: Any) -> str:
    """Epoch seconds -> local "YYYY-MM-DD HH:MM" (the operator's clock)."""
    if not isinstance(ts, (int, float)):
        return "-"
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def one_line(text: Any, width: int | None = None) -> str:
    """Collapse whitespace (previews, titles) and optionally cut with an ellipsis."""
    if text is None:
        return ""
    flat = " ".join(str(text).split())
    if width is not None and len(flat) > width:
        return flat[: max(0, width - 1)] + "…"
    return flat
