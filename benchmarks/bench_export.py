#!/usr/bin/env python3
"""Export of a whole store to JSONL, streaming: wall time and peak RSS of the process.

* ours      — the CLI, ``hermes-store --db PATH sessions export --format jsonl --output OUT``,
              in a child process;
* floor     — a child running plain sqlite3: every session row, then its messages by
              id, one JSON line each (a cursor streams; nothing is collected);
* upstream  — a child doing what 0.19.0's ``hermes sessions export`` does for bare
              JSONL: ``SessionDB.export_all()`` (the whole store as one list), one line
              per session.

Peak RSS is ``ru_maxrss`` of that child alone. Target: < 200 MB at 1M messages.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stores  # noqa: E402
import _upstream  # noqa: E402
from _common import human, log, main_for, run_measured  # noqa: E402
from hermes_store.backends.sqlite.files.uri import file_uri  # noqa: E402

NAME = "export"
RSS_TARGET_MB = 200

FLOOR = r"""
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], uri=True)  # a read-only file: URI
conn.row_factory = sqlite3.Row
out = open(sys.argv[2], "w", encoding="utf-8")
sessions = conn.execute("SELECT * FROM sessions ORDER BY started_at, id")
reader = sqlite3.connect(sys.argv[1], uri=True)
reader.row_factory = sqlite3.Row
for s in sessions:
    out.write(json.dumps({"session": dict(s)}, ensure_ascii=False) + "\n")
    for m in reader.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id", (s["id"],)):
        out.write(json.dumps({"message": dict(m)}, ensure_ascii=False) + "\n")
out.close()
"""

UPSTREAM = r"""
import json
from pathlib import Path
db = hermes_state.SessionDB(Path(sys.argv[1]))
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for s in db.export_all():
        out.write(json.dumps(s, ensure_ascii=False) + "\n")
db.close()
"""

OURS_FALLBACK = r"""
import sys
from hermes_store.transfer import write_export
with open(sys.argv[2], "w", encoding="utf-8") as out:
    write_export(sys.argv[1], out, "jsonl")
"""


def ours_command(db: Path, out: Path) -> tuple[list[str], str]:
    exe = shutil.which("hermes-store", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if exe:
        return [exe, "--db", str(db), "sessions", "export", "--format", "jsonl", "--output", str(out)], "CLI"
    return [sys.executable, "-c", OURS_FALLBACK, str(db), str(out)], "transfer.write_export"


def _sizes(args) -> list[int]:
    return [s for s in args.size_list if s >= 100_000]


def run(args, report) -> None:
    for n in _sizes(args):
        work = args.workdir / f"export-{human(n)}"
        ours_db = _stores.working_copy(_stores.store("head", n, log=lambda m: log(args, m)), work, "ours.db")
        up_cmd = None
        if not args.no_upstream:
            home = args.workdir / "upstream-home"
            up_db = _stores.working_copy(_stores.store("upstream", n, log=lambda m: log(args, m)), work, "up.db")
            up_cmd = [sys.executable, "-c", "import sys\n" + _upstream.child_prelude(home) + UPSTREAM,
                      str(up_db), str(work / "up.jsonl")]
        cmd, how = ours_command(ours_db, work / "ours.jsonl")
        floor_cmd = [sys.executable, "-c", FLOOR, file_uri(ours_db, mode="ro"), str(work / "floor.jsonl")]
        runs: dict[str, list[dict]] = {"ours": [], "floor": [], "upstream": []}
        rounds = max(1, min(args.rounds, 3 if n < 1_000_000 else 2))
        for r in range(rounds):
            log(args, f"export {human(n)} round {r + 1}")
            runs["ours"].append(run_measured(cmd))
            runs["floor"].append(run_measured(floor_cmd))
            if up_cmd is not None:
                runs["upstream"].append(run_measured(up_cmd))
        lines = {k: sum(1 for _ in open(work / f"{k if k != 'upstream' else 'up'}.jsonl", encoding="utf-8"))
                 for k in ("ours", "floor", "upstream") if (work / f"{k if k != 'upstream' else 'up'}.jsonl").exists()}
        med = lambda side, k: statistics.median(x[k] for x in runs[side]) if runs[side] else None  # noqa: E731
        case = f"JSONL, {human(n)} messages ({how})"
        report.add(NAME, case, "time", "s", med("ours", "seconds"), med("floor", "seconds"),
                   med("upstream", "seconds"), lines=lines, runs=runs)
        rss = med("ours", "peak_rss_mb")
        report.add(NAME, case, "peak RSS", "MB", rss, med("floor", "peak_rss_mb"), med("upstream", "peak_rss_mb"),
                   target=f"< {RSS_TARGET_MB} MB at 1M", met=rss < RSS_TARGET_MB)
        for p in work.glob("*"):
            p.unlink()


if __name__ == "__main__":
    sys.exit(main_for(NAME, __doc__.split("\n")[1], run))
