"""One test per user-pain group not covered by the load/crash/damage tests
(`/work/shared/spec/user-pain.md`): size, search quality, correctness.

Each test names the upstream reports it guards against.
"""

from __future__ import annotations

import random
import string

import pytest

from support import reliability as rs
from hermes_store import SessionDB

TOOL_PREFIX_CHARS = 8192  # upstream FTS_TOOL_CONTENT_PREFIX_CHARS (head layout, D7)


@pytest.fixture
def db(tmp_path):
    with SessionDB(rs.fresh_store_file(tmp_path / "state.db")) as store:
        store.create_session("s", source="cli")
        yield store


def _index_bytes(path) -> dict[str, int]:
    """Bytes held by each FTS index (its %_data shadow table)."""
    conn = rs.raw_connect(path)
    try:
        return {t: conn.execute(f"SELECT coalesce(sum(length(block)), 0) FROM {t}_data").fetchone()[0]
                for t in rs.fts_table_names(path)}
    finally:
        conn.close()


def _random_words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 10))) for _ in range(n))


# --------------------------------------------------------------------------- size

def test_size_big_tool_output_and_cron_transcripts_do_not_bloat_the_index(db):
    """#22478, #43690, #55233, PR #65798, PR #101266: indexes grew to 70 % of the file.
    A tool row is indexed by its first 8,192 characters only and never by the trigram
    index; cron transcripts stay out of the trigram index; no FTS table keeps a second
    copy of the text."""
    path = db.db_path
    before = _index_bytes(path)
    assert "messages_fts" in before and "messages_fts_trigram" in before

    output = "prefixword " + _random_words(150_000, seed=1)  # ~1 MB of distinct-ish words
    tool_id = db.append_message("s", role="tool", content=output, tool_name="terminal",
                                tool_call_id="call-1")
    after_tool = _index_bytes(path)
    growth = after_tool["messages_fts"] - before["messages_fts"]
    # Indexing all of it would cost hundreds of KB; the 8,192-char prefix costs a few KB.
    assert growth < 64 * 1024, f"a 1 MB tool row grew messages_fts by {growth} bytes"
    assert after_tool["messages_fts_trigram"] - before["messages_fts_trigram"] < 1024
    assert tool_id in {h["id"] for h in db.search_messages("prefixword")}

    db.create_session("cron_job_1", source="cron")
    db.append_message("cron_job_1", role="assistant", content=_random_words(20_000, seed=2) + " cronword")
    after_cron = _index_bytes(path)
    assert after_cron["messages_fts_trigram"] - after_tool["messages_fts_trigram"] < 1024
    assert db.search_messages("cronword")  # still found through the word index

    conn = rs.raw_connect(path)
    try:
        copies = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'messages_fts%_content'")]
    finally:
        conn.close()
    assert copies == [], f"FTS tables keeping their own copy of the text: {copies}"


# --------------------------------------------------------------------------- search quality

SEARCH_CORPUS = {
    "hyphen": "please run chat-send before lunch",
    "dotted": "milestone P2.2 is done, see simulate.p2.test.ts",
    "path": "the bug is in src/main.py line 40",
    "email": "write to alice@example.com about it",
    "apostrophe": "I don't know why",
    "percent": "we got 50% off the bill",
    "issue": "fixed in issue #123 yesterday",
    "question": "is it ok? it is",
    "prefix": "the deployment finished at noon",
    "cjk4": "我的记忆断裂问题很严重",
    "cjk2": "广西 桂林 的 漓江 很美",
    "mixed": "修改youer服务端的配置",
}

QUERIES = [
    ("chat-send", "hyphen"),            # #1770: split into chat AND send, or a column filter
    ("wrong-book OR chat-send", "hyphen"),  # #7824: "no such column: book" emptied everything
    ("P2.2", "dotted"),
    ("simulate.p2.test.ts", "dotted"),
    ("src/main.py", "path"),            # #76305: punctuated queries silently returned nothing
    ("alice@example.com", "email"),
    ("don't", "apostrophe"),
    ("50%", "percent"),
    ("#123", "issue"),
    ("ok?", "question"),
    ("deploy*", "prefix"),              # prefix queries keep working
    ("记忆断裂", "cjk4"),                # #11511: CJK returned nothing
    ("记忆", "cjk4"),                    # #14829: short CJK (below the trigram's 3 chars)
    ("广西 OR 桂林", "cjk2"),             # #20494: 2-char CJK tokens
    ("youer", "mixed"),                 # #54242: Latin glued to CJK
]


@pytest.fixture
def corpus(db):
    ids = {key: db.append_message("s", role="user", content=text) for key, text in SEARCH_CORPUS.items()}
    db.append_message("s", role="assistant", content="running it",
                      tool_calls=[{"id": "c1", "type": "function",
                                   "function": {"name": "kubectl_rollout", "arguments": '{"ns": "prod-east"}'}}])
    return ids


@pytest.mark.parametrize("query,key", QUERIES, ids=[q for q, _ in QUERIES])
def test_search_quality_queries_find_what_they_should(db, corpus, query, key):
    hits = db.search_messages(query, limit=50)
    assert corpus[key] in [h["id"] for h in hits], f"{query!r} did not find {SEARCH_CORPUS[key]!r}: {hits}"


def test_search_finds_tool_names_and_tool_call_arguments(db, corpus):
    """#16751: tokens inside tool calls were not searchable."""
    assert db.search_messages("kubectl_rollout")
    assert db.search_messages("prod-east")


def test_rewound_rows_stay_hidden_on_every_search_route(db):
    """api-catalog DIVERGENCE: upstream's LIKE route for short CJK showed rewound rows."""
    keep = db.append_message("s", role="user", content="记忆 保留 keepword")
    db.append_message("s", role="assistant", content="ok")
    gone = db.append_message("s", role="user", content="记忆 回退 keepword")
    db.append_message("s", role="assistant", content="ok")
    db.rewind_to_message("s", gone)
    for query in ("keepword", "记忆"):
        ids = [h["id"] for h in db.search_messages(query)]
        assert keep in ids and gone not in ids, query
        assert gone in [h["id"] for h in db.search_messages(query, include_inactive=True)], query


# --------------------------------------------------------------------------- correctness

def test_replay_is_ordered_by_id_not_by_clock(db):
    """PR #25589, #47669, #50356: a clock step sorted a tool result before its call."""
    call = db.append_message("s", role="assistant", content="calling", timestamp=2_000_000_000.0,
                             tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    result = db.append_message("s", role="tool", content="result", tool_call_id="c1", timestamp=1_000.0)
    after = db.append_message("s", role="user", content="thanks", timestamp=5.0)
    assert [m["id"] for m in db.get_messages("s")] == [call, result, after]
    assert [m["role"] for m in db.get_messages_as_conversation("s")] == ["assistant", "tool", "user"]


def test_deleting_and_pruning_session_chains_never_hits_the_foreign_key(db):
    """PR #6463, hermes-desktop #276, PR #40949: deleting a parent with children rolled back."""
    db.create_session("root", source="cli")
    db.create_session("mid", source="cli", parent_session_id="root")
    db.create_session("leaf", source="cli", parent_session_id="mid")
    db.create_session("live", source="cli", parent_session_id="leaf")
    for sid in ("root", "mid", "leaf", "live"):
        db.append_message(sid, role="user", content=f"in {sid}")
    assert db.delete_session("mid") is True
    assert db.get_session("leaf")["parent_session_id"] is None
    for sid in ("root", "leaf"):
        db.end_session(sid, "done")
    assert db.prune_sessions(older_than_days=None) == 2
    assert db.get_session("live")["parent_session_id"] is None
    assert [m["content"] for m in db.get_messages("live")] == ["in live"]
    rs.assert_store_whole(db.db_path)


def test_title_moves_from_a_compression_ancestor_instead_of_conflicting(db):
    """PR #48989: renaming failed against an invisible compression predecessor."""
    db.set_session_title("s", "my project")
    db.end_session("s", "compression")
    db.create_session("s-cont", source="cli", parent_session_id="s")
    assert db.set_session_title("s-cont", "my project") is True
    assert db.get_session_title("s-cont") == "my project"
    assert db.get_session_title("s") is None
    db.create_session("unrelated", source="cli")
    with pytest.raises(ValueError, match="already in use"):
        db.set_session_title("unrelated", "my project")
