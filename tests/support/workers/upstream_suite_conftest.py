"""The ``conftest.py`` beside upstream's own tests when they run on hermes_store (issue 32).

Copied (as ``conftest.py``) into the scratch folder that ``support.upstream_suite``
extracts hermes-agent 0.19.0's tests into; it runs in the suite's agent venv, where
``hermes-store agent enable`` makes ``import hermes_state`` the module
``hermes_store.agent.hermes_state`` (``hermes_store/agent/_finder.py``).

It checks that the module under test really is ours, then gives every name the test
files take from ``hermes_state`` (imported, read as an attribute, or named in a
``monkeypatch.setattr("hermes_state.…")`` string) that the module lacks a stand-in:

* a standard-library module upstream's module imports (``sqlite3``, ``sys``, ``time``)
  is that module, as it is in upstream's: a test patching ``hermes_state.sqlite3.connect``
  patches it for the whole process, as it does with upstream's module;
* any other name (``_collect_delegate_child_ids``, ``SCHEMA_SQL``…) is a placeholder
  that fails when used. A test module then collects, a test may patch the name (which
  changes nothing in the store), and only the tests that use it fail.

Those that fail are listed, with the reason, in ``support.upstream_suite.UPSTREAM_ONLY``.
Nothing of upstream's ``hermes_state`` runs.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import hermes_state

SHIM = "hermes_store.agent.hermes_state"
if hermes_state.__name__ != SHIM:  # the switch is off: the run would test upstream
    raise RuntimeError(f"import hermes_state gave {hermes_state.__file__}, not {SHIM}; "
                       "is `hermes-store agent enable` on in this venv?")


class UpstreamOnly:
    """Stands for one of upstream's module globals that ``hermes_state`` on hermes_store
    does not offer: importable, failing on use with the name."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise NotImplementedError(
            f"hermes_state.{self._name} is upstream's own module global; the module "
            f"hermes_store offers ({SHIM}) has no such name")

    __call__ = __iter__ = __str__ = __len__ = __mul__ = _refuse

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()


def _patched(call: ast.Call, aliases: set[str]) -> set[str]:
    """The name a ``patch("hermes_state.x…")`` or ``setattr(hermes_state, "x", …)``
    call patches."""
    args = call.args
    if args and isinstance(args[0], ast.Constant) and str(args[0].value).startswith("hermes_state."):
        return {args[0].value.split(".")[1]}
    if (len(args) >= 2 and isinstance(args[0], ast.Name) and args[0].id in aliases
            and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)):
        return {args[1].value}
    return set()


def _names_used(folder: Path) -> set[str]:
    """The ``hermes_state`` names the test files of ``folder`` use."""
    names = set()
    for path in folder.glob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {"hermes_state"} | {
            alias.asname for node in ast.walk(tree) if isinstance(node, ast.Import)
            for alias in node.names if alias.name == "hermes_state" and alias.asname}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "hermes_state":
                names.update(alias.name for alias in node.names)
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases):
                names.add(node.attr)
            elif isinstance(node, ast.Call):
                names.update(_patched(node, aliases))
    return names


for _name in sorted(_names_used(Path(__file__).parent / "tests")):
    if hasattr(hermes_state, _name):
        continue
    if _name in sys.stdlib_module_names:
        setattr(hermes_state, _name, importlib.import_module(_name))
    else:
        setattr(hermes_state, _name, UpstreamOnly(_name))
