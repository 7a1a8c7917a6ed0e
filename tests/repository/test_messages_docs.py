"""The examples of docs/api-messages-search.md run, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "api-messages-search.md"


def test_doc_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 15
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        # the file name says which block failed
        exec(compile(block, f"{DOC.name} python block {number}", "exec"), namespace)  # noqa: S102
