"""docs/api.md's examples run, in order, as one script (so the docs cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_api_md_examples_run(hermes_home):
    text = API_DOC.read_text()
    blocks = list(re.finditer(r"```python\n(.*?)```", text, flags=re.S))
    assert len(blocks) >= 7, "docs/api.md lost its examples"
    namespace: dict = {}
    for block in blocks:
        # pad with newlines so a failure reports the line number inside api.md
        first_line = text.count("\n", 0, block.start(1))
        source = "\n" * first_line + block.group(1)
        exec(compile(source, str(API_DOC), "exec"), namespace)  # noqa: S102
    assert namespace["db"].closed
