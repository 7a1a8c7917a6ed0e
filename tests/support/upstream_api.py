#!/usr/bin/env python3
"""Record the public API of upstream's ``SessionDB`` (hermes-agent 0.19.0) as JSON.

    python3 tests/support/upstream_api.py /path/to/unpacked/hermes-agent [OUT.json]

The folder is the one holding ``hermes_state.py`` (an unpacked wheel); OUT defaults to
``tests/data/upstream-0.19.0-sessiondb-api.json``. The record lists every public name
of the class: for a callable its kind (method, staticmethod, classmethod) and its
parameters (name, kind, default), plus the return annotation as upstream spells it; for
a plain class attribute its value. A method that hands ``**kwargs`` on to a private
method (``create_session`` → ``_insert_session_row``) also records that method's
parameters under ``forwards_kwargs_to``: they are the keywords it really accepts.

``describe_class`` is also what ``tests/repository/test_upstream_api.py`` applies to
our ``SessionDB``, so both sides are described by the same code.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "upstream-0.19.0-sessiondb-api.json"
_JSON_SCALARS = (type(None), bool, int, float, str)
_FORWARD = re.compile(r"self\.(_\w+)\([^)]*\*\*kwargs\)")


def describe_value(value: Any) -> Any:
    """JSON as is for scalars, else ``{"repr": …}`` (a tuple default, for instance)."""
    if isinstance(value, _JSON_SCALARS):
        return value
    return {"repr": repr(value)}


def describe_parameters(func) -> list[dict]:
    """Name, kind and (only when there is one) default of every parameter."""
    described = []
    for p in inspect.signature(func).parameters.values():
        entry = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = describe_value(p.default)
        described.append(entry)
    return described


def _returns(func) -> str | None:
    annotation = inspect.signature(func).return_annotation
    if annotation is inspect.Signature.empty:
        return None
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def describe_member(cls: type, name: str) -> dict:
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, (staticmethod, classmethod)):
        kind, func = type(raw).__name__, raw.__func__
    elif isinstance(raw, property):
        return {"kind": "property"}
    elif callable(raw):
        kind, func = "method", raw
    else:
        return {"kind": "attribute", "value": describe_value(raw)}
    func = inspect.unwrap(func)
    entry: dict[str, Any] = {"kind": kind, "parameters": describe_parameters(func),
                             "returns": _returns(func)}
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        source = ""
    target = _FORWARD.search(source)
    if target and hasattr(cls, target.group(1)):
        entry["forwards_kwargs_to"] = {
            "method": target.group(1),
            "parameters": describe_parameters(getattr(cls, target.group(1))),
        }
    return entry


def describe_class(cls: type) -> dict[str, dict]:
    return {name: describe_member(cls, name) for name in sorted(dir(cls))
            if not name.startswith("_")}


def load_upstream_session_db(folder: Path) -> type:
    if not (folder / "hermes_state.py").is_file():
        raise SystemExit(f"{folder} holds no hermes_state.py")
    os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="upstream-home-")  # read at import
    sys.path.append(str(folder))
    import hermes_state

    return hermes_state.SessionDB


def record(folder: Path) -> dict:
    import importlib.metadata as md

    cls = load_upstream_session_db(folder)
    try:
        version = md.version("hermes-agent")
    except md.PackageNotFoundError:
        version = next((p.name.split("-")[1] for p in folder.glob("hermes_agent-*.dist-info")), None)
    return {
        "source": f"hermes-agent {version}, hermes_state.SessionDB",
        "generated_by": "tests/support/upstream_api.py",
        "members": describe_class(cls),
    }


def dumps(data: dict) -> str:
    """Indented JSON with one line per parameter (a diff then shows what changed)."""
    compact: list[str] = []

    def mark(value):
        if isinstance(value, dict) and "kind" in value and "name" in value:
            compact.append(json.dumps(value, sort_keys=True))
            return f"\x00{len(compact) - 1}\x00"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(data), indent=1, sort_keys=True)
    return re.sub(r'"\\u0000(\d+)\\u0000"', lambda m: compact[int(m.group(1))], text) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    data = record(Path(argv[1]).expanduser())
    out = Path(argv[2]) if len(argv) == 3 else DEFAULT_OUT
    out.write_text(dumps(data), encoding="utf-8")
    print(f"{len(data['members'])} public members of {data['source']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
