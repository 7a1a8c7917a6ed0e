"""The API on files upstream Hermes wrote (schema 11–22), adopted by SessionDB(path)."""

from __future__ import annotations

import pytest

from hermes_store import SessionDB
from conftest import UPSTREAM_FIXTURES, copy_fixture, fixture_contents


@pytest.mark.parametrize("stem", [stem for stem, _ in UPSTREAM_FIXTURES])
def test_api_on_an_adopted_upstream_file(stem, tmp_path):
    expected = fixture_contents(stem)
    path = copy_fixture(stem, tmp_path)
    with SessionDB(path) as db:
        sessions = expected["sessions"]
        assert db.session_count(include_archived=True) == len(sessions)
        assert len(db.search_sessions(limit=None)) == len(sessions)
        total_messages = 0
        for want in sessions:
            got = db.get_session(want["id"])
            assert got is not None, want["id"]
            for key in ("source", "parent_session_id", "title", "end_reason", "message_count"):
                assert got[key] == want[key], (want["id"], key)
            if want["title"]:
                assert db.get_session_by_title(want["title"])["id"] == want["id"]
            messages = db.get_messages(want["id"], include_inactive=True)
            assert len(messages) == db.message_count(want["id"])
            assert all(m["session_id"] == want["id"] and m["role"] for m in messages)
            total_messages += len(messages)
            exported = db.export_session(want["id"])
            assert exported["id"] == want["id"]
        assert total_messages == expected["row_counts"]["messages"] == db.message_count()

        # the compression chain and its numbered titles work as upstream's did
        assert db.get_compression_tip("fx_20260101_cli_docker") == "fx_20260101_cli_docker_c1"
        assert db.resolve_session_by_title("Fix Docker Build") == "fx_20260101_cli_docker_c1"
        assert db.get_next_title_in_lineage("Fix Docker Build") == "Fix Docker Build #3"
        listed = {r.get("_lineage_root_id", r["id"]) for r in
                  db.list_sessions_rich(limit=100, include_archived=True)}
        assert "fx_20260101_cli_docker" in listed

        # and it keeps working for writes
        db.create_session("new_after_adoption", "cli", system_prompt="fresh prompt")
        db.set_session_title("new_after_adoption", "Fix Docker Build #3")
        db.update_token_counts("new_after_adoption", input_tokens=5, api_call_count=1,
                               model="m")
        assert db.get_session("new_after_adoption")["system_prompt"] == "fresh prompt"
        assert db.delete_session("fx_20260101_cli_docker") is True
        assert db.get_session("fx_20260101_cli_docker_c1")["parent_session_id"] is None
    with SessionDB(path) as again:  # a second open is a plain open
        assert again.get_session_title("new_after_adoption") == "Fix Docker Build #3"
