#!/usr/bin/env python3
"""Peak memory and wall time of adopting + upgrading a large upstream 0.19.0 (v22) file.

    python3 benchmarks/adoption_memory.py [--messages 100000] [--keep DIR]

Builds a state.db in the 0.19.0 shape (a copy of the real 0.19.0 fixture, then
bulk-inserted rows with plain sqlite3 — upstream's own v11 FTS triggers index them),
then measures in fresh child processes:

* baseline: import hermes_store.migrate, open the file, count the rows;
* upgrade:  ``hermes_store.migrate.upgrade(path)`` — adoption at 0022, then 0023…head
  (FTS layout conversions and rebuilds, prompt de-duplication, usage rebuild…).

Peak RSS comes from ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` taken by a
dedicated parent per measurement, so one measurement cannot mask another. Bounded
memory means the upgrade's peak stays close to the baseline's whatever the row count.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "fixtures" / "upstream-0.19.0-v22.db"

WORDS = (
    "docker build context layer cache python module import error traceback session "
    "search index token model provider request response retry timeout gateway telegram "
    "message thread summary compression agent tool terminal patch file directory "
    "database migration schema column trigger query result commit branch merge"
).split()
CJK = ["全文检索", "会话存储", "トライグラム検索", "データベース", "大别山项目", "中文文档"]

CHILD_CODE = {
    "baseline": (
        "import sqlite3, sys; import hermes_store.migrate\n"
        "c = sqlite3.connect(sys.argv[1]); print(c.execute('SELECT count(*) FROM messages').fetchone()[0])"
    ),
    "upgrade": (
        "import sys; import hermes_store.migrate as m\n"
        "print(m.upgrade(sys.argv[1]))"
    ),
}


def _text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 120))]
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), rng.choice(CJK))
    return " ".join(words)


def build(path: Path, messages: int, seed: int = 7) -> None:
    shutil.copyfile(FIXTURE, path)
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    sessions = max(1, messages // 50)
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, source, model, system_prompt, started_at, message_count, "
            "input_tokens, output_tokens) VALUES (?, ?, 'model-x', ?, ?, 50, 1000, 500)",
            [
                (f"bench_{i}", rng.choice(["cli", "telegram", "cron"]),
                 f"You are Hermes. Profile {i % 20}.", 1.7e9 + i)
                for i in range(sessions)
            ],
        )

    def rows():
        for n in range(messages):
            role = rng.choice(["user", "assistant", "assistant", "tool"])
            yield (
                f"bench_{n % sessions}", role, _text(rng),
                "terminal" if role == "tool" else None, 1.7e9 + n,
            )

    batch = []
    for row in rows():
        batch.append(row)
        if len(batch) == 5000:
            with conn:
                conn.executemany(
                    "INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                    "VALUES (?, ?, ?, ?, ?)", batch)
            batch.clear()
    if batch:
        with conn:
            conn.executemany(
                "INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                "VALUES (?, ?, ?, ?, ?)", batch)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def measure(kind: str, path: Path) -> dict:
    """Run one child; return its wall time, peak RSS (KiB on Linux) and output."""
    runner = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "out = subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], check=True,"
        " capture_output=True, text=True).stdout.strip()\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'wall_s': round(wall, 2), 'peak_rss_kib': rss, 'output': out}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", runner, CHILD_CODE[kind], str(path)],
        check=True, capture_output=True, text=True, cwd=REPO,
    )
    return json.loads(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="directory to keep the built files in")
    args = parser.parse_args()

    work = Path(args.keep or tempfile.mkdtemp(prefix="hermes-adopt-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "state.db"
    t = time.perf_counter()
    build(db, args.messages)
    size_before = db.stat().st_size
    print(f"built {args.messages} messages (v22, 0.19.0 shape) in {time.perf_counter() - t:.1f}s, "
          f"{size_before / 2**20:.1f} MiB", flush=True)

    baseline = measure("baseline", db)
    upgrade = measure("upgrade", db)
    report = {
        "messages": args.messages,
        "file_mib_before": round(size_before / 2**20, 1),
        "file_mib_after": round(db.stat().st_size / 2**20, 1),
        "baseline": baseline,
        "upgrade": upgrade,
        "peak_rss_delta_mib": round((upgrade["peak_rss_kib"] - baseline["peak_rss_kib"]) / 1024, 1),
        "sqlite": sqlite3.sqlite_version,
    }
    print(f"{'':10}{'wall':>9}{'peak RSS':>12}")
    for kind in ("baseline", "upgrade"):
        r = report[kind]
        print(f"{kind:10}{r['wall_s']:>8.2f}s{r['peak_rss_kib'] / 1024:>9.1f} MiB")
    print(json.dumps(report))
    if not args.keep:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
