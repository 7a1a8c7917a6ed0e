"""Make ``fixtures/upstream-0.19.0-v22-telegram-topics.db``: the 0.19.0 fixture after a
user opted into Telegram DM topic mode in upstream Hermes 0.19.0 itself.

    python3 tests/support/telegram_topics_fixture.py UPSTREAM_DIR

UPSTREAM_DIR holds hermes-agent 0.19.0's ``hermes_state.py`` (an unpacked wheel, e.g.
``benchmarks/results/cache/hermes-agent-0.19.0``). Upstream runs in a child process with a scratch
``$HERMES_HOME``; it opens a copy of ``upstream-0.19.0-v22.db`` and calls only its own
public API: three Telegram sessions of user 7, ``enable_telegram_topic_mode`` for chat
100 (user 7) and chat 200 (user 8), topic bindings, and ``disable_telegram_topic_mode``
of chat 200 keeping its binding. The result carries upstream's tables, indexes and
``state_meta.telegram_dm_topic_schema_version = 2``. Run once; the file is checked in.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SOURCE = DATA / "fixtures" / "upstream-0.19.0-v22.db"
TARGET = DATA / "fixtures" / "upstream-0.19.0-v22-telegram-topics.db"

UPSTREAM_SCRIPT = r'''
import os, sys
os.environ["HERMES_HOME"] = sys.argv[3]
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from hermes_state import SessionDB

db = SessionDB(Path(sys.argv[1]))
for sid in ("tg_topic_a", "tg_topic_b", "tg_lobby"):
    db.create_session(sid, "telegram", user_id="7")
db.append_message("tg_topic_a", role="user", content="plan the release notes")
db.append_message("tg_topic_b", role="user", content="review the deploy script")
db.append_message("tg_lobby", role="user", content="hello from the lobby")
db.enable_telegram_topic_mode(chat_id="100", user_id="7", has_topics_enabled=True,
                              allows_users_to_create_topics=False)
db.bind_telegram_topic(chat_id="100", thread_id="11", user_id="7",
                       session_key="agent:main:telegram:dm:100:11", session_id="tg_topic_a")
db.bind_telegram_topic(chat_id="100", thread_id="12", user_id="7",
                       session_key="agent:main:telegram:dm:100:12", session_id="tg_topic_b",
                       managed_mode="manual")
db.enable_telegram_topic_mode(chat_id="200", user_id="8")
db.bind_telegram_topic(chat_id="200", thread_id="21", user_id="8",
                       session_key="agent:main:telegram:dm:200:21",
                       session_id="fx_20260101_tg_cjk")
db.disable_telegram_topic_mode(chat_id="200", clear_bindings=False)
db.close()
'''


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} UNPACKED_HERMES_AGENT_0_19_0_DIR")
    upstream = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "state.db"
        shutil.copyfile(SOURCE, work)
        subprocess.run(
            [sys.executable, "-c", UPSTREAM_SCRIPT, str(work), upstream, str(Path(tmp) / "home")],
            check=True,
        )
        # One self-contained file: fold the WAL in, as the other fixtures are.
        from hermes_store.backends.sqlite.library import dbapi as _dbapi
        sqlite3 = _dbapi()

        conn = sqlite3.connect(work)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        shutil.copyfile(work, TARGET)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
