"""Regular expressions compiled on first use.

The store has a few dozen patterns at module level (the search sanitizer, titles, the
memory-context scrubber, URL parsing), and a process that opens a store to read one
session uses almost none of them (what compiling them cost: docs/performance.md,
"Start-up"). ``LazyPattern(...)`` takes
``re.compile``'s arguments and behaves as the compiled pattern (``.sub``, ``.search``,
``.match``, …), compiling it the first time one of those is used.
"""

from __future__ import annotations

import re


class LazyPattern:
    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern | None = None

    def __getattr__(self, name: str):
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(*self._args)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._args[0]!r})"
