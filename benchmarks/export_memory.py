#!/usr/bin/env python3
"""Peak memory of ``hermes-store sessions export --format jsonl`` on a 200,000-message store.

    python benchmarks/export_memory.py [--messages 200000] [--keep DIR]

Builds a head store (``migrate.upgrade``) and fills it with plain ``sqlite3``: 1,000
sessions, one of which holds a quarter of all messages (so a single huge session is
streamed too), triggers live so the FTS indexes are filled as in real use. Then it runs,
each as its own subprocess of the installed console script:

* baseline — ``hermes-store --db X status``: same interpreter, same imports, opens the
  file and counts rows;
* export   — ``hermes-store --db X sessions export --format jsonl --output F``.

Peak RSS comes from the kernel (``wait4`` rusage ``ru_maxrss``) for that child alone.
Target: the export's peak stays under 150 MB. Upstream's in-memory export of the same
store would hold every message as dicts at once (and refuses more than 20,000).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MB = 150
WORDS = (
    "docker build cache layer compose volume network python parser token tokenizer "
    "session message search index query trigram migration schema upgrade rollback "
    "function argument result error retry lock writer reader page checkpoint vacuum"
).split()


def _command() -> list[str]:
    script = shutil.which("hermes-store")
    return [script] if script else [sys.executable, "-m", "hermes_store"]


def build(path: Path, n_messages: int, n_sessions: int = 1000, seed: int = 7) -> None:
    from hermes_store import migrate

    migrate.upgrade(path)
    rng = random.Random(seed)
    big = n_messages // 4
    per_session = (n_messages - big) // (n_sessions - 1)
    counts = [big] + [per_session] * (n_sessions - 1)
    counts[-1] += n_messages - sum(counts)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")  # building a benchmark file, not keeping data
    conn.execute("BEGIN")
    t0 = 1_767_225_600.0
    for s, count in enumerate(counts):
        sid = f"bench_{s:05d}"
        conn.execute(
            "INSERT INTO sessions (id, source, model, started_at, ended_at, end_reason, message_count, title) "
            "VALUES (?, ?, ?, ?, ?, 'done', ?, ?)",
            (sid, rng.choice(["cli", "telegram", "discord"]), "bench/model", t0 + s, t0 + s + count, count,
             f"Benchmark session {s}"),
        )
        rows = []
        for i in range(count):
            role = "user" if i % 3 == 0 else ("assistant" if i % 3 == 1 else "tool")
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))
            calls = (
                json.dumps([{"id": f"c{i}", "type": "function",
                             "function": {"name": "terminal", "arguments": json.dumps({"command": text[:40]})}}])
                if role == "assistant" and i % 2 else None
            )
            rows.append((sid, role, text, calls, "terminal" if role == "tool" else None, t0 + s + i * 0.001))
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_name, timestamp) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def peak_rss(argv: list[str]) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit status) of one child process."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    return usage.ru_maxrss / 1024, time.monotonic() - started, proc.returncode  # KiB -> MiB on Linux


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--keep", type=Path, help="build (and keep) the store in this folder")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp(prefix="hermes-export-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / f"export-{args.messages}.db"
    try:
        if not db.exists():
            t = time.monotonic()
            build(db, args.messages)
            print(f"built {db} ({args.messages} messages) in {time.monotonic() - t:.1f} s", file=sys.stderr)
        out = folder / "export.jsonl"
        out.unlink(missing_ok=True)
        base_mb, base_s, _ = peak_rss(_command() + ["--db", str(db), "status"])
        export_mb, export_s, _ = peak_rss(
            _command() + ["--db", str(db), "sessions", "export", "--format", "jsonl", "--output", str(out)]
        )
        with open(out, encoding="utf-8") as fh:
            lines = sum(1 for _ in fh)
        result = {
            "messages": args.messages,
            "db_bytes": db.stat().st_size,
            "export_bytes": out.stat().st_size,
            "export_lines": lines,
            "baseline_peak_rss_mb": round(base_mb, 1),
            "export_peak_rss_mb": round(export_mb, 1),
            "export_over_baseline_mb": round(export_mb - base_mb, 1),
            "export_seconds": round(export_s, 2),
            "target_mb": TARGET_MB,
            "ok": export_mb < TARGET_MB,
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"store: {args.messages} messages, {result['db_bytes'] / 2**20:.0f} MiB")
            print(f"export: {result['export_bytes'] / 2**20:.0f} MiB, {lines} lines, {export_s:.1f} s")
            print(f"peak RSS baseline (status): {base_mb:.1f} MB")
            print(f"peak RSS export:            {export_mb:.1f} MB  (+{export_mb - base_mb:.1f} MB)")
            print(f"target < {TARGET_MB} MB: {'met' if result['ok'] else 'MISSED'}")
        return 0 if result["ok"] else 1
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
