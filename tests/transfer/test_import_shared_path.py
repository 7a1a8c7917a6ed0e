"""``hermes-store sessions import`` and ``SessionDB.import_sessions`` share one code path
(issue 10): upstream-format entries are checked by the same rules (``ImportChecker``)
and every session of either file format is written by the same ``SessionWriter``.
The CLI alone streams files of any size, committing whole sessions in batches.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from support.cli import *  # noqa: F403

from hermes_store import SessionDB, transfer
from hermes_store.transfer import files as transfer_files
from hermes_store.transfer import importer as transfer_importer
from hermes_store.repository import importing

T0 = 1_700_000_000.0


def _session(sid, *contents, **fields):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": c,
                 "timestamp": T0 + i} for i, c in enumerate(contents)]
    return {"id": sid, "source": "cli", "started_at": T0, **fields, "messages": messages}


PAYLOAD = [
    _session("child", "from the child", parent_session_id="parent", title="Taken"),
    _session("parent", "from the parent", "a reply", system_prompt="", model_config={"k": 1}),
    _session("c1", parent_session_id="c2"),
    _session("c2", parent_session_id="c1"),
    _session("orphan", "alone", parent_session_id="nowhere", session_key="reset on import"),
]


def _dump(path) -> dict:
    return {table: rows(path, table, order)
            for table, order in (("sessions", "id"), ("messages", "id"), ("system_prompts", "hash"))}


def test_the_cli_and_import_sessions_write_the_same_rows(cli, empty_store, head_templates, tmp_path):
    by_api = copy_db(head_templates["empty"], tmp_path / "api.db")
    for target in (empty_store, by_api):
        with SessionDB(target) as db:
            db.create_session("holder", "cli")
            db.set_session_title("holder", "Taken")
            db._write(lambda conn: conn.execute(
                sa.text("UPDATE sessions SET started_at = :t"), {"t": T0}))
    path = tmp_path / "upstream.json"
    path.write_text(json.dumps(PAYLOAD))

    result = cli(empty_store, "--json", "sessions", "import", path)
    assert result.exit_code == 0, result.output
    report = parse_json(result)
    with SessionDB(by_api) as db:
        answer = db.import_sessions(PAYLOAD)

    assert answer["ok"] is True
    assert (report["sessions_added"], report["sessions_skipped"], report["detached"]) == (
        answer["imported"], answer["skipped"], answer["detached"]) == (5, 0, 2)
    assert report["retitled"] == 1 and report["messages_added"] == 4
    assert _dump(empty_store) == _dump(by_api)
    sessions = {r["id"]: r for r in rows(by_api, "sessions", "id")}
    assert sessions["child"]["parent_session_id"] == "parent"
    assert sessions["child"]["title"] == "Taken (imported)"
    assert sessions["orphan"]["session_key"] is None
    assert (sessions["c1"]["parent_session_id"], sessions["c2"]["parent_session_id"]) == (None, "c1")


def test_the_cli_refuses_what_import_sessions_refuses_and_writes_nothing(cli, empty_store, tmp_path):
    bad = [_session("ok", "fine"), _session("ok"), {"id": ""},
           _session("t", title=5), {**_session("m"), "messages": [{"role": ""}]}]
    with SessionDB(empty_store) as db:
        errors = db.import_sessions(bad)["errors"]
    assert [e["error"] for e in errors] == [
        "duplicate session id", "session id is required", "title must be a string",
        "messages[0].role must be a non-empty string"]

    as_json = tmp_path / "bad.json"
    as_json.write_text(json.dumps(bad))
    result = cli(empty_store, "sessions", "import", as_json)
    assert result.exit_code == 2
    text = "".join(result.stderr.split())  # rich wraps the long temporary paths anywhere
    assert "4session(s)of" in text and "nothingwaswritten" in text
    for entry, error in ((1, "session 'ok': duplicate session id"), (2, "session id is required"),
                         (3, "session 't': title must be a string"),
                         (4, "session 'm': messages[0].role must be a non-empty string")):
        assert "".join(f"bad.json: entry {entry}: {error}".split()) in text

    as_jsonl = tmp_path / "bad.jsonl"
    as_jsonl.write_text("".join(json.dumps(entry) + "\n" for entry in bad))
    result = cli(empty_store, "sessions", "import", as_jsonl)
    assert result.exit_code == 2
    assert "bad.jsonl:2:session'ok':duplicatesessionid" in "".join(result.stderr.split())
    assert rows(empty_store, "sessions", "id") == []


def test_the_cli_streams_past_the_api_caps_in_batches(empty_store, tmp_path):
    # 501 sessions: more than import_sessions takes in one payload; children come
    # before their parents, in other batches (batch_size=1 commits after each session)
    entries = [_session(f"s{i:03}", f"message {i}", parent_session_id=f"s{i + 1:03}")
               for i in range(500)] + [_session("s500", "the root")]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    with SessionDB(empty_store) as db:
        with pytest.raises(ValueError, match="at most 500 entries"):
            db.import_sessions(entries)
    report = transfer.import_file(empty_store, path, batch_size=50)
    assert (report.sessions_added, report.messages_added, report.detached) == (501, 501, 0)
    parents = {r["id"]: r["parent_session_id"] for r in rows(empty_store, "sessions", "id")}
    assert parents["s000"] == "s001" and parents["s499"] == "s500" and parents["s500"] is None


def test_one_writer_serves_every_import_path(monkeypatch, store, empty_store, head_templates, tmp_path):
    written: list[str] = []
    original = importing.SessionWriter.add_session

    def recording(self, conn, values, **kwargs):
        written.append(values["id"])
        return original(self, conn, values, **kwargs)

    monkeypatch.setattr(importing.SessionWriter, "add_session", recording)
    upstream_file = tmp_path / "upstream.json"
    upstream_file.write_text(json.dumps([_session("from_file", "hi")]))
    native_file = tmp_path / "native.jsonl"
    with open(native_file, "w", encoding="utf-8") as fh:
        counts = transfer.write_export(store, fh, "jsonl")

    with SessionDB(empty_store) as db:
        db.import_sessions([_session("from_api", "hi")])
    transfer.import_file(empty_store, upstream_file)
    transfer.import_file(empty_store, native_file)
    assert written[:2] == ["from_api", "from_file"]
    assert len(written) == 2 + counts.sessions


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_a_small_file_is_read_once_a_big_one_twice_with_the_same_rows(
        monkeypatch, empty_store, head_templates, tmp_path, fmt):
    # a file within KEEP_CHECKED_MESSAGES is written from the validation pass's rows;
    # a bigger one is read again: both must store exactly the same thing
    path = tmp_path / f"upstream.{fmt}"
    text = (json.dumps(PAYLOAD) if fmt == "json"
            else "".join(json.dumps(e) + "\n" for e in PAYLOAD))
    path.write_text(text)
    reads: list[str] = []
    original = transfer_importer.file_events

    def counting(p, f):
        reads.append(f)
        return original(p, f)

    monkeypatch.setattr(transfer_importer, "file_events", counting)
    once = transfer.import_file(empty_store, path)
    assert len(reads) == 1

    twice_store = copy_db(head_templates["empty"], tmp_path / "twice.db")
    monkeypatch.setattr(transfer_files, "KEEP_CHECKED_MESSAGES", 2)  # PAYLOAD has 4 messages
    twice = transfer.import_file(twice_store, path)
    assert len(reads) == 3
    assert once == twice and once.messages_added == 4
    assert _dump(empty_store) == _dump(twice_store)


def test_a_bad_entry_after_kept_ones_writes_nothing(empty_store, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in [*PAYLOAD, {"id": ""}]))
    with pytest.raises(transfer.ImportFileError, match="nothing was written"):
        transfer.import_file(empty_store, path)
    assert rows(empty_store, "sessions", "id") == []
