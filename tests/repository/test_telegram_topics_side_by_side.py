"""The Telegram topic methods side by side with upstream 0.19.0: one scripted sequence of
calls runs on upstream's ``SessionDB`` and on ours, each on a fresh file in its own
process, and every answer must agree (timestamps compared by position, not value).

Upstream's ``hermes_state.py`` is found (or fetched) by ``support.upstream_state``. Two calls differ on purpose — an unknown session and ``managed_mode=None``
raise the package's errors where upstream lets SQLite's ``IntegrityError`` through — so
for those only "it raised and stored nothing" is compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.upstream_state import require_upstream_dir

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, os, sys
kind, path, home = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["HERMES_HOME"] = home
if kind == "upstream":
    sys.path.insert(0, sys.argv[4])
    import logging
    logging.disable(logging.WARNING)
    from hermes_state import SessionDB
else:
    from hermes_store import SessionDB
from pathlib import Path

db = SessionDB(Path(path))
out = []

def call(label, fn, diverges=False):
    try:
        value = fn()
    except Exception as exc:
        if diverges:
            out.append([label, "error"])
        else:
            out.append([label, "error", isinstance(exc, ValueError), str(exc)])
        return
    out.append([label, value])

def tables():
    from hermes_store.backends.sqlite.library import dbapi as _dbapi
    sqlite3 = _dbapi()
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(n for (n,) in c.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'telegram_dm_topic_%' AND type='table'"))
    finally:
        c.close()

def unlinked(**kw):
    return [[s["id"], s["preview"]] for s in db.list_unlinked_telegram_sessions_for_user(**kw)]

for sid in ("a", "b", "c", "d"):
    db.create_session(sid, "telegram", user_id="7")
db.create_session("x", "telegram", user_id="8")
db.create_session("y", "cli", user_id="7")
db.append_message("a", role="user", content="line one\nline two " + "z" * 70)
db.append_message("c", role="assistant", content="not a user message")

call("enabled before", lambda: db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7"))
call("binding before", lambda: db.get_telegram_topic_binding(chat_id="100", thread_id="1"))
call("by session before", lambda: db.get_telegram_topic_binding_by_session(session_id="a"))
call("list before", lambda: db.list_telegram_topic_bindings_for_chat(chat_id="100"))
call("delete before", lambda: db.delete_telegram_topic_binding(chat_id="100", thread_id="1"))
call("disable before", lambda: db.disable_telegram_topic_mode(chat_id="100"))
call("linked before", lambda: db.is_telegram_session_linked_to_topic(session_id="a"))
call("unlinked before", lambda: unlinked(chat_id="100", user_id="7"))
call("tables after reads", tables)
call("enable", lambda: db.enable_telegram_topic_mode(chat_id=100, user_id=7, has_topics_enabled=True))
call("tables after enable", tables)
call("meta", lambda: db.get_meta("telegram_dm_topic_schema_version"))
call("enabled int ids", lambda: db.is_telegram_topic_mode_enabled(chat_id=100, user_id=7))
call("enabled other user", lambda: db.is_telegram_topic_mode_enabled(chat_id="100", user_id="8"))
call("bind a", lambda: db.bind_telegram_topic(chat_id=100, thread_id=1, user_id=7, session_key="k1", session_id="a"))
call("bind b", lambda: db.bind_telegram_topic(chat_id="100", thread_id="2", user_id="7", session_key="k2", session_id="b", managed_mode="manual"))
call("rebind a", lambda: db.bind_telegram_topic(chat_id="100", thread_id="1", user_id="9", session_key="k1b", session_id="a"))
call("a elsewhere", lambda: db.bind_telegram_topic(chat_id="100", thread_id="3", user_id="7", session_key="k3", session_id="a"))
call("unknown session", lambda: db.bind_telegram_topic(chat_id="100", thread_id="4", user_id="7", session_key="k4", session_id="nope"), diverges=True)
call("managed None", lambda: db.bind_telegram_topic(chat_id="100", thread_id="5", user_id="7", session_key="k5", session_id="c", managed_mode=None), diverges=True)
call("move topic 2 to c", lambda: db.bind_telegram_topic(chat_id="100", thread_id="2", user_id="7", session_key="k2", session_id="c"))
call("binding 1", lambda: db.get_telegram_topic_binding(chat_id="100", thread_id="1"))
call("by session c", lambda: db.get_telegram_topic_binding_by_session(session_id="c"))
call("by session b", lambda: db.get_telegram_topic_binding_by_session(session_id="b"))
call("list", lambda: db.list_telegram_topic_bindings_for_chat(chat_id=100))
call("linked a", lambda: db.is_telegram_session_linked_to_topic(session_id="a"))
call("linked b", lambda: db.is_telegram_session_linked_to_topic(session_id="b"))
call("unlinked", lambda: unlinked(chat_id="100", user_id="7"))
call("unlinked limit 1", lambda: unlinked(chat_id="100", user_id="7", limit=1))
call("unlinked limit -1", lambda: unlinked(chat_id="100", user_id="7", limit=-1))
call("unlinked limit 0", lambda: unlinked(chat_id="100", user_id="7", limit=0))
call("delete missing", lambda: db.delete_telegram_topic_binding(chat_id="100", thread_id="9"))
call("delete 1", lambda: db.delete_telegram_topic_binding(chat_id=100, thread_id=1))
call("enabled after one delete", lambda: db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7"))
call("delete 2", lambda: db.delete_telegram_topic_binding(chat_id="100", thread_id="2"))
call("enabled after last delete", lambda: db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7"))
call("re-enable", lambda: db.enable_telegram_topic_mode(chat_id="100", user_id="7"))
call("bind d", lambda: db.bind_telegram_topic(chat_id="100", thread_id="6", user_id="7", session_key="k6", session_id="d"))
call("delete session d", lambda: db.delete_session("d"))
call("list after session delete", lambda: db.list_telegram_topic_bindings_for_chat(chat_id="100"))
call("bind b again", lambda: db.bind_telegram_topic(chat_id="100", thread_id="7", user_id="7", session_key="k7", session_id="b"))
call("disable keep", lambda: db.disable_telegram_topic_mode(chat_id="100", clear_bindings=False))
call("enabled after disable", lambda: db.is_telegram_topic_mode_enabled(chat_id="100", user_id="7"))
call("list after disable keep", lambda: db.list_telegram_topic_bindings_for_chat(chat_id="100"))
call("disable clear", lambda: db.disable_telegram_topic_mode(chat_id="100"))
call("list after disable clear", lambda: db.list_telegram_topic_bindings_for_chat(chat_id="100"))
db.close()
print(json.dumps(out))
'''


def _run(kind: str, tmp_path: Path) -> list:
    folder = tmp_path / kind
    folder.mkdir()
    args = [sys.executable, "-c", SCRIPT, kind, str(folder / "state.db"), str(folder / "home")]
    if kind == "upstream":
        args.append(str(require_upstream_dir()))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _positional_times(results: list) -> list:
    """Replace each distinct timestamp by its rank: equal and ordered alike, values aside."""
    stamps = sorted({v for _, *rest in results for v in _floats(rest)})
    rank = {v: f"T{i}" for i, v in enumerate(stamps)}

    def swap(value):
        if isinstance(value, float) and value in rank:
            return rank[value]
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    return [swap(r) for r in results]


def _floats(value):
    if isinstance(value, float) and value > 1e9:
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _floats(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floats(v)


def test_every_answer_matches_upstream_0_19_0(tmp_path):
    theirs = _positional_times(_run("upstream", tmp_path))
    ours = _positional_times(_run("ours", tmp_path))
    assert [label for label, *_ in ours] == [label for label, *_ in theirs]
    mismatches = [(t, o) for t, o in zip(theirs, ours) if t != o]
    assert not mismatches, "\n".join(f"upstream {t}\nours     {o}" for t, o in mismatches)
