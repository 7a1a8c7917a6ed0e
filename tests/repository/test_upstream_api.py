"""Acceptance (issue 10): every public member of upstream 0.19.0's ``SessionDB`` exists in
ours with the same name, kind, parameters (names, kinds, defaults) — or, for an
attribute, the same value.

Upstream's side is the checked-in record ``tests/data/upstream-0.19.0-sessiondb-api.json``,
written by ``tests/support/upstream_api.py`` (``python3 tests/support/upstream_api.py
UPSTREAM_DIR``); ``test_the_record_is_what_upstream_says`` re-derives it from upstream
whenever upstream is at hand. Both sides are described by the same ``describe_class``.
"""

from __future__ import annotations

import json

from hermes_store import SessionDB
from support.upstream_api import DEFAULT_OUT, describe_class
from support.upstream_state import load_hermes_state

RECORD = json.loads(DEFAULT_OUT.read_text(encoding="utf-8"))


def _render(parameters: list[dict]) -> str:
    """A parameter list as Python spells it: ``(self, a, b=1, *, c=None, **kw)``."""
    parts, star_done = [], False
    for p in parameters:
        kind = p["kind"]
        if kind == "KEYWORD_ONLY" and not star_done:
            parts.append("*")
        star_done = star_done or kind in ("KEYWORD_ONLY", "VAR_POSITIONAL")
        prefix = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(kind, "")
        default = f"={p['default']!r}" if "default" in p else ""
        parts.append(f"{prefix}{p['name']}{default}")
        if kind == "POSITIONAL_ONLY":
            parts.append("/")
    return "(" + ", ".join(parts) + ")"


def _forwarded(theirs: dict) -> list[dict] | None:
    """Upstream's parameters with ``**kwargs`` replaced by the keywords it hands them to
    (``create_session(session_id, source, **kwargs)`` takes ``_insert_session_row``'s):
    naming those keywords accepts exactly the calls upstream accepts."""
    target = theirs.get("forwards_kwargs_to")
    if target is None:
        return None
    own = [p for p in theirs["parameters"] if p["kind"] != "VAR_KEYWORD"]
    names = {p["name"] for p in own}
    return own + [{**p, "kind": "KEYWORD_ONLY"} for p in target["parameters"]
                  if p["name"] not in names and p["kind"] != "VAR_KEYWORD"]


def mismatch(theirs: dict, ours: dict | None) -> str | None:
    """Why our member does not stand in for upstream's (None when it does)."""
    if ours is None:
        return "missing"
    if ours["kind"] != theirs["kind"]:
        return f"is a {ours['kind']}, upstream's is a {theirs['kind']}"
    if theirs["kind"] == "attribute":
        return None if ours["value"] == theirs["value"] else (
            f"is {ours['value']!r}, upstream's is {theirs['value']!r}")
    if theirs["kind"] == "property" or ours["parameters"] == theirs["parameters"]:
        return None
    if ours["parameters"] == _forwarded(theirs):
        return None
    return f"takes {_render(ours['parameters'])}, upstream's {_render(theirs['parameters'])}"


def test_every_upstream_member_exists_with_the_same_signature():
    ours = describe_class(SessionDB)
    problems = {name: mismatch(theirs, ours.get(name))
                for name, theirs in RECORD["members"].items()}
    missing = sorted(name for name, why in problems.items() if why == "missing")
    differ = {name: why for name, why in sorted(problems.items()) if why not in (None, "missing")}
    report = []
    if missing:
        report.append(f"SessionDB lacks {len(missing)} of the {len(problems)} public members "
                      f"of upstream's ({RECORD['source']}): {', '.join(missing)}")
    if differ:
        report.append(f"{len(differ)} differ from upstream:\n" + "\n".join(
            f"  {name} {why}" for name, why in differ.items()))
    assert not report, "\n".join(report)


def test_the_comparison_sees_a_changed_parameter():
    theirs = RECORD["members"]["search_sessions"]
    assert mismatch(theirs, theirs) is None
    changed = json.loads(json.dumps(theirs))
    changed["parameters"][2]["default"] = 50
    assert mismatch(theirs, changed) == (
        "takes (self, source=None, limit=50, offset=0), "
        "upstream's (self, source=None, limit=20, offset=0)")
    assert mismatch(theirs, None) == "missing"
    create = RECORD["members"]["create_session"]
    assert create["forwards_kwargs_to"]["method"] == "_insert_session_row"
    assert mismatch(create, {**create, "parameters": create["parameters"][:3]}).startswith(
        "takes (self, session_id, source)")


def test_the_record_is_what_upstream_says(hermes_home):
    hermes_state = load_hermes_state()
    assert describe_class(hermes_state.SessionDB) == RECORD["members"]


def test_upstream_loads_after_the_stores_optional_agent_import_failed():
    """The suite's own harness: ``tests/agent`` is a namespace package named ``agent``
    when ``tests/`` is on sys.path, and the store's optional import of
    ``agent.agent_runtime_helpers`` (conversation repair) leaves it in sys.modules; the
    upstream loader must still import upstream's own ``agent`` package (in a fresh
    process: this one may have loaded upstream already)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "from hermes_store.repository.conversation import default_alternation_repair as _default_alternation_repair\n"
            "assert _default_alternation_repair() is None  # upstream not on the path yet\n"
            "from support.upstream_state import load_hermes_state\n"
            "hs = load_hermes_state()\n"
            "print(hs.SCHEMA_VERSION)")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "22"
