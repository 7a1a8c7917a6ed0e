"""What ``import hermes_state`` finds once ``hermes-store agent enable`` ran (D15).

The start-up hook (a ``.pth`` line that ``switch.hook_text`` writes) only puts a
trampoline first on ``sys.meta_path``: it compares each imported name with
``hermes_state`` and imports nothing. On a match it calls :func:`find_spec` here, and
only then is hermes_store imported, so a process that never imports ``hermes_state``
pays for one string comparison per import.

``hermes_state`` becomes another name for ``hermes_store.agent.hermes_state``: one
module object under both names, so the agent's classes and ours are the same classes.
``HERMES_STORE_AGENT_HOOK=off`` lets one process import upstream's own module instead
(what the integration suite compares against). And when the installed hermes-agent is
no longer a version the switch was tested with (``hermes update`` replaced it), the
agent gets its own module back, with a warning on stderr naming the way out, rather
than a module that may not fit it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec

#: the name the agent imports, and the module that answers to it
NAME = "hermes_state"
TARGET = "hermes_store.agent.hermes_state"
#: set to ``off`` (or ``0``/``no``/``false``) in one process's environment to import
#: upstream's ``hermes_state`` there while the switch stays on
OPT_OUT = "HERMES_STORE_AGENT_HOOK"
_OFF = frozenset({"off", "0", "no", "false"})
#: the hermes-agent releases the switch was tested with (the integration suite)
TESTED_AGENT_VERSIONS = ("0.19.0",)
AGENT_DIST = "hermes-agent"


def opted_out(environ=os.environ) -> bool:
    return environ.get(OPT_OUT, "").strip().lower() in _OFF


class _AliasLoader:
    """Loads ``hermes_state`` as the module :data:`TARGET` (imported once, shared)."""

    def __init__(self, real: ModuleSpec):
        self.real = real

    def create_module(self, spec):
        # An agent process: the agent opens state.db with the standard library's sqlite3
        # itself (doctor, backup, the gateway's readiness check) and hands sqlite3
        # classes to our connection, so the store runs on that library here too — one
        # SQLite per process (backends/sqlite/library.py, docs/operations.md).
        import logging

        from hermes_store import SQLiteLibraryError, use_sqlite_library

        try:
            use_sqlite_library("sqlite3", why="hermes-agent opens state.db with the "
                                              "standard library's sqlite3")
        except SQLiteLibraryError as exc:  # a store of this process opened first
            logging.getLogger("hermes_store.agent").warning("%s", exc)
        return importlib.import_module(TARGET)

    def exec_module(self, module):
        # The import system has just set module.__spec__ to the alias spec; the module
        # keeps its own (its relative imports and reload() go by it).
        module.__spec__ = self.real


def _agent_untested() -> str | None:
    """The installed hermes-agent's version when the switch was not tested with it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version(AGENT_DIST)
    except PackageNotFoundError:  # a program of its own importing hermes_state
        return None
    return None if found in TESTED_AGENT_VERSIONS else found


def find_spec(name, path=None, target=None):
    """The meta-path finder's answer: ``hermes_state`` → :data:`TARGET`."""
    if name != NAME or opted_out():
        return None
    untested = _agent_untested()
    if untested is not None:
        sys.stderr.write(
            f"hermes-store agent: hermes-agent {untested} is installed, but the switch was "
            f"tested with {', '.join(TESTED_AGENT_VERSIONS)} only; this process uses the "
            "agent's own hermes_state. See `hermes-store agent status`.\n")
        return None
    real = importlib.util.find_spec(TARGET)
    if real is None:  # pragma: no cover - only a broken install gets here
        raise ImportError(f"the hermes_store agent switch is on, but {TARGET} is missing; "
                          "reinstall hermes_store or run `hermes-store agent disable`",
                          name=NAME)
    return ModuleSpec(NAME, _AliasLoader(real), origin=real.origin)


def installed() -> bool:
    """Whether this process runs with the start-up hook (the trampoline is on
    ``sys.meta_path``)."""
    return any(getattr(f, "__name__", None) == "HermesStateHook" for f in sys.meta_path)
