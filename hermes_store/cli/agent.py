"""``hermes-store agent``: switch Hermes Agent's own ``hermes_state`` to this package.

The work is in ``hermes_store.agent.switch`` (imported when a command runs); this module
only turns its answers into output and exit codes.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import HermesGroup, JsonOption, out

EPILOG = (
    "Exit codes: 0 ok, 2 --python is not a Python interpreter, 3 hermes-agent is not "
    "installed there, 8 the hook could not be written or does not take effect, 9 "
    "hermes-agent is a version this hermes_store was not tested with, 10 hermes_store "
    "cannot be imported there (install it into that environment)."
)

app = typer.Typer(
    cls=HermesGroup,
    help="Run Hermes Agent on hermes_store: its processes import hermes_store's "
    "hermes_state module (SQLite file or HERMES_STATE_DATABASE_URL) instead of its own.",
    epilog=EPILOG,
    no_args_is_help=True,
)

PythonOption = Annotated[
    Optional[str],
    typer.Option(
        "--python",
        metavar="PATH",
        help="The agent's Python interpreter (e.g. ~/.hermes/hermes-agent/venv/bin/python); "
        "default: the one running hermes-store.",
        show_default=False,
    ),
]


def _run(o, fn, *args):
    from ..agent.switch import SwitchError

    try:
        return fn(*args)
    except SwitchError as exc:
        o.error(str(exc))
        raise typer.Exit(exc.exit_code) from None


@app.command("enable")
def enable_command(ctx: typer.Context, python: PythonOption = None, json_flag: JsonOption = False) -> None:
    """Make the agent's processes (CLI, gateway, cron, subprocesses) import hermes_store's hermes_state. Idempotent."""
    from ..agent import switch

    o = out(ctx, json_flag)
    change = _run(o, switch.enable, python)
    if o.json_mode:
        o.emit(change.as_dict() | {"hook_file": change.paths[0]})
        return
    env = change.environment
    if change.action == "already enabled":
        o.line(f"Already enabled: {change.paths[0]}")
    else:
        o.line(f"{change.action.capitalize()}: hermes-agent {env.agent_version} in {env.prefix} "
               f"now imports hermes_state from {env.hermes_state}")
        o.line(f"Hook: {change.paths[0]} (undo: hermes-store agent disable"
               + (f" --python {python}" if python else "") + ")")
    o.note("Processes already running (a gateway, a dashboard) keep the module they "
           "loaded: restart them. `hermes-store agent status` shows which store they use.")


@app.command("disable")
def disable_command(ctx: typer.Context, python: PythonOption = None, json_flag: JsonOption = False) -> None:
    """Remove the hook: the agent imports its own hermes_state again. Idempotent."""
    from ..agent import switch

    o = out(ctx, json_flag)
    change = _run(o, switch.disable, python)
    if o.json_mode:
        o.emit(change.as_dict())
        return
    if not change.paths:
        o.line(f"Already disabled: no hook in {change.environment.prefix}")
    for path in change.paths:
        o.line(f"Disabled: removed {path}")
    prompts = change.prompts
    if prompts and prompts.get("error"):
        o.warn(f"Could not put the system prompts of {prompts['store']} back inline for the "
               f"agent's own hermes_state ({prompts['error']}); run `hermes-store agent disable` "
               "again when the file is free.")
    elif prompts:
        o.line(f"{prompts['store']}: every system prompt is on its session row, where the "
               f"agent's own hermes_state reads it ({prompts['refilled']} row(s) refilled).")
    if change.paths:
        o.note("Restart running agent processes so they load the agent's own hermes_state.")


@app.command("status")
def status_command(ctx: typer.Context, python: PythonOption = None, json_flag: JsonOption = False) -> None:
    """Whether the switch is on, which hermes_state the agent imports, which store it will use and whether it is at head.

    Exits with the code `enable` would refuse with (0 when the agent can run on hermes_store).
    """
    from ..agent import switch

    o = out(ctx, json_flag)
    info = _run(o, switch.status, python)
    if o.json_mode:
        o.emit(info)
    else:
        _print_status(o, info)
    if info["exit_code"]:
        raise typer.Exit(info["exit_code"])


def _print_status(o, info: dict) -> None:
    agent = info["agent_version"] or "not installed"
    if info["agent_version"] and not info["agent_tested"]:
        agent += f" (not tested: tested with {', '.join(info['tested_versions'])})"
    package = info["store_package"] or f"not importable ({info['store_package_error']})"
    if info["enabled"]:
        switch_line = "on (" + ", ".join(info["hook_files"]) + ")"
        if info["hook_current"] is False:
            switch_line += " — written by another hermes_store version: run `hermes-store agent enable`"
    elif info["hook_files"]:
        switch_line = "hook present but not in effect (" + ", ".join(info["hook_files"]) + ")"
    else:
        switch_line = "off"
    module = info["hermes_state"] or info["hermes_state_error"] or "not found"
    module = ("hermes_store: " if info["hermes_state_is_ours"] else "hermes-agent's own: ") + module \
        if info["hermes_state"] else module
    rows = [
        ("environment", f"{info['environment']} (Python {info['python_version']})"),
        ("hermes-agent", agent),
        ("hermes_store", package),
        ("switch", switch_line),
        ("hermes_state", module),
        ("HERMES_HOME", f"{info['hermes_home']} ({info['hermes_home_source']})"),
    ]
    if info.get("store"):
        rows.append(("store", f"{info['store']} ({info['backend']}; {info['source']})"))
        if info.get("error"):
            rows.append(("revision", f"unknown: {info['error']}"))
        elif not info.get("exists"):
            rows.append(("revision", "none yet: created at head on first use"))
        elif info["at_head"]:
            rows.append(("revision", f"{info['revision']} (head)"))
        else:
            rows.append(("revision", f"{info['revision'] or 'an upstream file'} (head is "
                         f"{info['head']}: upgraded when hermes_store first opens it, or run "
                         "`hermes-store db upgrade`)"))
    else:
        rows.append(("store", f"unusable: {info.get('error')} ({info['source']})"))
    o.pairs(rows)
    if info["problem"]:
        o.error(info["problem"])


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="agent")
