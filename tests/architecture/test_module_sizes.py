"""No module over 600 lines (issue 33): a module a newcomer cannot read in one sitting
is split along a seam of its own. The frozen revisions (``migrations/versions/``,
``migrations/telegram_topics/versions/``) are exempt: they are written once and never
edited."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600
CHECKED = ("hermes_store", "migrations")
FROZEN = ("migrations/versions", "migrations/telegram_topics/versions")


def _lines(path: Path) -> int:
    with path.open(encoding="utf-8") as source:
        return sum(1 for _ in source)


def test_no_module_is_over_600_lines():
    checked, too_long = 0, []
    for top in CHECKED:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if any(relative.startswith(frozen + "/") for frozen in FROZEN):
                continue
            checked += 1
            if (count := _lines(path)) > MAX_LINES:
                too_long.append(f"{relative}: {count} lines")
    assert checked > 50  # the walk found the package
    assert not too_long, f"over {MAX_LINES} lines (split along a seam):\n" + "\n".join(too_long)
