"""Differences 1-3 of issue 10, found by running upstream 0.19.0 side by side.

1. ``system_prompt=""`` is a value: stored and returned as ``""`` (only None means no
   prompt), on every path that writes a prompt.
2. A search query is read up to its first NUL, as upstream's SQLite reads it; a query
   whose text before the NUL has terms finds what those terms find.
3. A row found through its tool name by a short CJK query shows the tool name in its
   snippet (api-catalog DIVERGENCE 106).
"""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa

from hermes_store import SessionDB, schema, transfer
from hermes_store.sql.values import prompt_hash
from support.repository import copy_head, backend, db, db_path, db_target  # noqa: F401
from support.upstream_state import load_hermes_state


def _prompt_rows(db) -> list[tuple[str, str]]:
    with db._read() as conn:
        return [tuple(r) for r in conn.execute(
            sa.select(schema.system_prompts.c.hash, schema.system_prompts.c.prompt))]


# --------------------------------------------------------------------------- 1: ""

def test_an_empty_system_prompt_is_stored_as_empty(db):
    db.create_session("empty", "cli", system_prompt="")
    db.ensure_session("ensured", system_prompt="")
    db.create_session("none", "cli", system_prompt=None)
    assert db.get_session("empty")["system_prompt"] == ""
    assert db.get_session("ensured")["system_prompt"] == ""
    assert db.get_session("none")["system_prompt"] is None
    # de-duplicated like any prompt (schema v25): one row, shared
    assert _prompt_rows(db) == [(prompt_hash(""), "")]
    assert db.get_session("empty")["system_prompt_hash"] == prompt_hash("")

    # an existing row without a prompt takes "" (upstream: COALESCE), and then keeps it
    db.create_session("none", "cli", system_prompt="")
    assert db.get_session("none")["system_prompt"] == ""
    db.create_session("none", "cli", system_prompt="a later prompt")
    assert db.get_session("none")["system_prompt"] == ""

    db.update_system_prompt("ensured", "")
    assert db.get_session("ensured")["system_prompt"] == ""
    db.update_system_prompt("ensured", None)
    assert db.get_session("ensured")["system_prompt"] is None
    assert db.list_sessions_rich(limit=None)[0]["system_prompt"] == ""

    db.delete_session("empty")
    assert _prompt_rows(db) == [(prompt_hash(""), "")]  # "none" still uses it
    db.delete_session("none")
    assert _prompt_rows(db) == []


def test_an_empty_system_prompt_survives_export_and_import(db, tmp_path):
    db.create_session("empty", "cli", system_prompt="")
    db.create_session("none", "cli")
    buffer = io.StringIO()
    transfer.write_export(db, buffer, "jsonl")
    path = tmp_path / "export.jsonl"
    path.write_text(buffer.getvalue())
    exported = db.export_session("empty")
    assert exported["system_prompt"] == ""

    with SessionDB(copy_head(tmp_path / "target.db")) as target:
        transfer.import_file(target, path)
        assert target.get_session("empty")["system_prompt"] == ""
        assert target.get_session("none")["system_prompt"] is None
        result = target.import_sessions([{**exported, "id": "via_api"}])
        assert result["ok"] is True
        assert target.get_session("via_api")["system_prompt"] == ""


def test_an_empty_prompt_written_by_upstream_survives_adoption(hermes_home, tmp_path):
    hermes_state = load_hermes_state()
    path = tmp_path / "upstream.db"
    up = hermes_state.SessionDB(db_path=path)
    up.create_session("empty", "cli", system_prompt="")
    up.create_session("none", "cli")
    assert up.get_session("empty")["system_prompt"] == ""  # what upstream answers
    up.close()
    with SessionDB(path) as db:  # adopted and upgraded: v25 moves prompts aside
        assert db.get_session("empty")["system_prompt"] == ""
        assert db.get_session("none")["system_prompt"] is None
        assert _prompt_rows(db) == [(prompt_hash(""), "")]


# --------------------------------------------------------------------------- 2: NUL

@pytest.fixture
def searchable(db):
    db.create_session("s", "cli")
    db.append_message("s", "user", "deploy the docker image tonight")
    db.append_message("s", "assistant", "好的 我们 部署")
    return db


@pytest.mark.parametrize("query, found", [
    ("docker\x00zzz", ["deploy the >>>docker<<< image tonight"]),
    ("docker\x00", ["deploy the >>>docker<<< image tonight"]),
    ('"docker\x00 image"', ["deploy the >>>docker<<< image tonight"]),  # upstream: []
    ("部署\x00abc", ["好的 我们 部署"]),
    ("\x00docker", []),  # nothing before the NUL: nothing to search for
])
def test_a_query_is_read_up_to_its_first_nul(searchable, query, found):
    assert [h["snippet"] for h in searchable.search_messages(query)] == found


def test_nul_queries_find_what_upstream_finds(searchable, hermes_home, tmp_path):
    hermes_state = load_hermes_state()
    up = hermes_state.SessionDB(db_path=tmp_path / "upstream.db")
    up.create_session("s", "cli")
    up.append_message("s", "user", "deploy the docker image tonight")
    up.append_message("s", "assistant", "好的 我们 部署")
    for query in ("docker\x00zzz", "docker\x00", "部署\x00abc", "\x00docker", "image\x00 docker"):
        ours = [h["id"] for h in searchable.search_messages(query)]
        assert ours == [h["id"] for h in up.search_messages(query)], repr(query)
    up.close()


# --------------------------------------------------------------------------- 3: snippet

def test_a_short_cjk_hit_through_the_tool_name_shows_the_tool_name(db):
    db.create_session("s", "cli")
    empty_tool = db.append_message("s", "tool", "", tool_name="读取文件")
    tool = db.append_message("s", "tool", "result here", tool_name="读取文件")
    text = db.append_message("s", "user", "x" * 100 + "后来 读取")

    snippets = {h["id"]: h["snippet"] for h in db.search_messages("读取")}
    assert snippets[empty_tool] == "读取文件"  # 0.19.0: "" (its content)
    assert snippets[tool] == "读取文件"  # 0.19.0: "result here"
    assert snippets[text] == "x" * 37 + "后来 读取"  # the content's own window, as upstream


def test_like_snippet_picks_the_column_and_term_that_matched():
    from hermes_store.fts.query import like_snippet

    long = "a" * 50 + "记忆" + "b" * 200
    # upstream's window when the content holds the first term: 40 before, 120 in all
    assert like_snippet((long, None, None), ["记忆"]) == long[10:130]
    # another term of the query, found in the content
    assert like_snippet(("前面 断裂 后面", None, None), ["记忆", "断裂"]) == "前面 断裂 后面"
    # LIKE matches ASCII case-insensitively: so does the snippet
    assert like_snippet(("x" * 60 + "Deploy 部署", None, None), ["deploy 部署"]) == (
        "x" * 40 + "Deploy 部署")
    # the tool-call JSON, when neither the content nor the tool name holds the term
    assert like_snippet(("", "terminal", '[{"name": "记忆"}]'), ["记忆"]) == '[{"name": "记忆"}]'
    # nothing found anywhere (cannot come from a LIKE hit): the content's start
    assert like_snippet(("plain text", "tool", None), ["无"]) == "plain text"
    assert like_snippet((None, None, None), ["无"]) == ""
    assert like_snippet((42, None, None), ["无"]) == "42"


def test_upstream_snippet_is_empty_for_a_tool_name_hit(hermes_home, tmp_path):
    hermes_state = load_hermes_state()
    up = hermes_state.SessionDB(db_path=tmp_path / "upstream.db")
    up.create_session("s", "cli")
    up.append_message("s", "tool", "", tool_name="读取文件")
    assert [h["snippet"] for h in up.search_messages("读取")] == [""]
    up.close()
