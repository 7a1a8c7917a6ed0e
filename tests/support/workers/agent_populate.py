"""Fill ``$HERMES_HOME/state.db`` the way a Hermes user's store looks, with upstream's code.

Run by the agent venv's interpreter with the switch off for this process
(``HERMES_STORE_AGENT_HOOK=off``), so the file is what hermes-agent 0.19.0 itself writes
(schema 22), the file a user has when they switch to hermes_store. What is in it: CLI and
gateway sessions with tool calls and token counts, titles, a compression chain (root ->
child -> grandchild), Chinese/Japanese/Korean text, an old ended session for prune, an
ended session for ``chat --resume``, a ``tool``-source session (hidden by default),
working directories (workspaces). Start times are fixed offsets before now, so both
copies list in the same order.

    python agent_populate.py        # prints the ids as JSON
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

DAY = 86400.0

#: (id, source, model, title, days ago, extra create kwargs)
SESSIONS = [
    ("s_docker", "cli", "gpt-5", "Fix Docker Build", 3.0, {"cwd": "/work/proj-alpha"}),
    ("s_chain_root", "cli", "claude-sonnet-4", "Long Refactor", 2.0, {"cwd": "/work/proj-beta"}),
    ("s_chain_child", "cli", "claude-sonnet-4", "Long Refactor #2", 1.9,
     {"cwd": "/work/proj-beta", "parent_session_id": "s_chain_root"}),
    ("s_chain_tip", "cli", "claude-sonnet-4", "Long Refactor #3", 1.8,
     {"cwd": "/work/proj-beta", "parent_session_id": "s_chain_child"}),
    ("s_cjk", "telegram", "gpt-5", "数据库迁移", 1.0,
     {"user_id": "tg-user-1", "chat_id": "tg-chat-1", "chat_type": "dm",
      "session_key": "agent:main:telegram:dm:tg-chat-1"}),
    ("s_ended", "cli", "gpt-5", "Resume Me", 0.5, {"cwd": "/work/proj-alpha"}),
    ("s_old", "cli", "gpt-4o", "Ancient Notes", 200.0, {}),
    ("s_tool", "tool", "gpt-5", None, 0.4, {}),
    ("s_discord", "discord", "gpt-5", None, 0.3,
     {"user_id": "dc-user-9", "chat_id": "dc-chan-3", "chat_type": "group"}),
]

SYSTEM_PROMPT = "You are Hermes, a helpful agent. Stay concise. 你好。"

CONVERSATIONS = {
    "s_docker": [
        ("user", "How do I fix the Docker build? It fails at pip install."),
        ("assistant", None, [{"id": "call_1", "type": "function", "function": {
            "name": "terminal", "arguments": json.dumps({"command": "docker build ."})}}]),
        ("tool", "ERROR: pip install failed: no space left on device", None, "call_1", "terminal"),
        ("assistant", "The Docker build ran out of disk space; prune old images with docker system prune."),
    ],
    "s_chain_root": [
        ("user", "Refactor the payment module into services."),
        ("assistant", "Starting with the billing service extraction."),
        ("user", "Also keep the webhook handler backwards compatible."),
        ("assistant", "Noted: the webhook handler keeps its signature."),
    ],
    "s_chain_child": [
        ("user", "[compressed summary] payment refactor in progress"),
        ("assistant", "Continuing: extracted InvoiceService and the ledger adapter."),
        ("user", "What about the refund path?"),
        ("assistant", "The refund path now goes through RefundService with idempotency keys."),
    ],
    "s_chain_tip": [
        ("user", "[compressed summary] refund path done"),
        ("assistant", "Final step: removing the legacy payment facade."),
    ],
    "s_cjk": [
        ("user", "数据库迁移失败了，怎么办？"),
        ("assistant", "请先备份数据库，然后重新运行迁移脚本。データベースの移行を再試行してください。"),
        ("user", "데이터베이스 백업은 어떻게 하나요?"),
        ("assistant", "sqlite3 state.db '.backup backup.db' 를 실행하세요."),
    ],
    "s_ended": [
        ("user", "Summarise the release notes for 0.19."),
        ("assistant", "Release 0.19 adds session search scrolling and gateway fixes."),
    ],
    "s_old": [
        ("user", "Old question about cron syntax"),
        ("assistant", "Use five fields: minute hour day month weekday."),
    ],
    "s_tool": [
        ("user", "tool-run prompt"),
        ("assistant", "tool-run answer"),
    ],
    "s_discord": [
        ("user", "Ping from discord about kubernetes ingress"),
        ("assistant", "Check the ingress controller logs first."),
    ],
}

ENDED = {  # id -> (end_reason, days ago)
    "s_chain_root": ("compression", 1.9),
    "s_chain_child": ("compression", 1.8),
    "s_ended": ("user_exit", 0.45),
    "s_old": ("user_exit", 199.9),
    "s_docker": ("user_exit", 2.9),
}


def main() -> int:
    import hermes_state

    if not hermes_state.__file__.endswith(os.path.join("site-packages", "hermes_state.py")):
        raise SystemExit(f"populate must run on upstream's hermes_state, got {hermes_state.__file__}")
    db = hermes_state.SessionDB()
    now = time.time()
    for sid, source, model, title, _ago, extra in SESSIONS:
        db.create_session(sid, source=source, model=model, system_prompt=SYSTEM_PROMPT,
                          model_config={"temperature": 0.2}, **extra)
        for msg in CONVERSATIONS[sid]:
            role, content = msg[0], msg[1]
            tool_calls = msg[2] if len(msg) > 2 else None
            tool_call_id = msg[3] if len(msg) > 3 else None
            tool_name = msg[4] if len(msg) > 4 else None
            db.append_message(sid, role=role, content=content, tool_calls=tool_calls,
                              tool_call_id=tool_call_id, tool_name=tool_name)
        if title:
            db.set_session_title(sid, title)
        db.update_token_counts(sid, input_tokens=1200, output_tokens=340, model=model,
                               estimated_cost_usd=0.0123, billing_provider="openrouter")
    for sid, (reason, _ago) in ENDED.items():
        db.end_session(sid, reason)
    db.close()
    # Fixed ages (the API stamps "now"): same order and same age buckets on every copy.
    conn = sqlite3.connect(str(hermes_state.DEFAULT_DB_PATH))
    with conn:
        for sid, *_rest, ago, _extra in SESSIONS:
            conn.execute("UPDATE sessions SET started_at = ? WHERE id = ?", (now - ago * DAY, sid))
            conn.execute("UPDATE messages SET timestamp = ? + id WHERE session_id = ?",
                         (now - ago * DAY, sid))
        for sid, (_reason, ago) in ENDED.items():
            conn.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (now - ago * DAY, sid))
    conn.close()
    print(json.dumps({"ids": [s[0] for s in SESSIONS], "db": str(hermes_state.DEFAULT_DB_PATH)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
