"""What ``import hermes_state`` finds once ``hermes-store agent enable`` ran (D15).

The start-up hook (a ``.pth`` line that ``switch.hook_text`` writes) only puts a
trampoline first on ``sys.meta_path``: it compares each imported name with
``hermes_state`` and imports nothing. On a match it calls :func:`find_spec` here, and
only then is hermes_store imported, so a process that never imports ``hermes_state``
pays for one string comparison per import.

``hermes_state`` becomes another name for ``hermes_store.agent.hermes_state``: one
module object under both names, so the agent's classes and ours are the same classes.
``HERMES_STORE_AGENT_HOOK=off`` lets one process import upstream's own module instead
(what the integration suite compares against); nothing else is read from the
environment.
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


def opted_out(environ=os.environ) -> bool:
    return environ.get(OPT_OUT, "").strip().lower() in _OFF


class _AliasLoader:
    """Loads ``hermes_state`` as the module :data:`TARGET` (imported once, shared)."""

    def __init__(self, real: ModuleSpec):
        self.real = real

    def create_module(self, spec):
        return importlib.import_module(TARGET)

    def exec_module(self, module):
        # The import system has just set module.__spec__ to the alias spec; the module
        # keeps its own (its relative imports and reload() go by it).
        module.__spec__ = self.real


def find_spec(name, path=None, target=None):
    """The meta-path finder's answer: ``hermes_state`` → :data:`TARGET`."""
    if name != NAME or opted_out():
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
