"""``hermes-store``: the admin CLI for a Hermes ``state.db``.

One module per command group (``db``, ``sessions``, ``search``, ``maintenance``,
``recover``); ``status`` lives here. Global options: ``--db PATH|URL`` (a SQLite file,
``sqlite:///PATH`` or ``postgresql+psycopg://…``; default ``$HERMES_STATE_DATABASE_URL``,
else ``$HERMES_HOME/state.db``, else ``~/.hermes/state.db``) and ``--json``.
"""

from __future__ import annotations

from typing import Annotated, Optional

from ..startup import collector_paused, skip_final_collection

with collector_paused():  # the commands' imports: see hermes_store.startup
    import typer

    from . import agent, db, maintenance, recover, search, sessions
    from .common import HermesGroup, JsonOption, State, out, state
    from .output import human_bytes

EPILOG = (
    "Exit codes: 0 ok, 1 problems found, 2 usage or invalid input, 3 not found, "
    "4 damaged file (run recover), 5 schema version problem, 6 busy (locked by another "
    "process), 7 cancelled at a prompt, 8 other error."
)

app = typer.Typer(
    name="hermes-store",
    cls=HermesGroup,
    help="Administer a Hermes Agent session store (a state.db file, or a PostgreSQL "
    "database given by URL): schema upgrades, sessions, search, maintenance, backup and "
    "recovery.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    ctx: typer.Context,
    db_given: Annotated[
        Optional[str],
        typer.Option(
            "--db",
            metavar="PATH|URL",
            help="The store to work on: a state.db path, sqlite:///PATH, or "
            "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE (default: "
            "$HERMES_STATE_DATABASE_URL, else $HERMES_HOME/state.db, else ~/.hermes/state.db).",
            show_default=False,
        ),
    ] = None,
    json_mode: JsonOption = False,
    journal_mode: Annotated[
        Optional[str],
        typer.Option(
            "--journal-mode",
            metavar="wal|delete",
            help="The journal mode for a SQLite file this command creates or opens, whatever "
            "its filesystem (default: $HERMES_STATE_JOURNAL_MODE, else WAL on a local disk "
            "and DELETE on a VM share or network mount). A file already in WAL stays in WAL: "
            "`maintenance journal-mode delete` switches it offline.",
            show_default=False,
        ),
    ] = None,
) -> None:
    if journal_mode is not None:
        from ..backends.base import get

        # The CLI owns its process: the setting reaches every store the command opens.
        get("sqlite").files.choose_journal_mode(journal_mode, source="--journal-mode")
    # Kept as typed: resolved on first use (common.State.target), never made a Path here.
    ctx.obj = State(given=db_given, json=json_mode)


@app.command("status")
def status_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Path (or URL), size, revision, schema version and row counts of the store."""
    from .maintenance import store_status

    o = out(ctx, json_flag)
    target = state(ctx).target
    info = store_status(target)
    if o.json_mode:
        o.emit(info)
    else:
        rev = info["revision"] or "-"
        if info["revision"] and info["revision"] == info["head"]:
            rev += " (head)"
        elif info["revision"]:
            rev += f" (head is {info['head']}: run `hermes-store db upgrade`)"
        missing = ("no — run `hermes-store db upgrade`" if target.is_file else
                   "no — create it on the server (createdb), then run `hermes-store db upgrade`")
        rows = [
            ("path" if target.is_file else "database", info["path"]),
            ("backend", info["backend"]),
            ("exists", "yes" if info["exists"] else missing),
            ("size", human_bytes(info["size_bytes"]) + (f" + {human_bytes(info['wal_bytes'])} WAL" if info["wal_bytes"] else "")),
            ("revision", rev),
            ("schema_version", info["schema_version"]),
        ]
        if target.is_file:  # a server keeps its own journal
            rows.append(("journal_mode", info["journal_mode"]))
            for key, label in (("sqlite_library", "sqlite"), ("filesystem", "filesystem")):
                if info.get(key):  # what the file's backend says of where it runs
                    rows.append((label, info[key]["summary"]))
        rows += [("sessions", info["sessions"]), ("messages", info["messages"])]
        if info["fts_stale"] is not None:
            from ..fts.layout import FTS_STALE_HINT

            rows.append(("search index", f"stale ({info['fts_stale']}): {FTS_STALE_HINT}"))
        o.pairs(rows)
    if not info["exists"]:
        raise typer.Exit(3)


app.add_typer(db.app, name="db")
app.add_typer(sessions.app, name="sessions")
app.add_typer(maintenance.app, name="maintenance")
search.register(app)
recover.register(app)
agent.register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app(prog_name="hermes-store")
    finally:  # the command has finished (its store closed, its output written)
        skip_final_collection()
