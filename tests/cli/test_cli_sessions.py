"""`hermes-store sessions …` through the CLI runner: JSON shapes, 80 columns, safety."""

from __future__ import annotations

from support.cli import *  # noqa: F403

from hermes_store import SessionDB

ROOT = "fx_20260101_cli_docker"
CONTINUATION = "fx_20260101_cli_docker_c1"


def test_list_json_shape_and_filters(cli, store):
    result = cli(store, "--json", "sessions", "list")
    assert result.exit_code == 0, result.output
    data = parse_json(result)
    assert set(data) == {"count", "sessions"}
    assert data["count"] == len(data["sessions"]) >= 1
    for row in data["sessions"]:
        assert set(row) == {
            "id", "title", "source", "model", "message_count", "started_at", "last_active",
            "preview", "parent_session_id", "end_reason", "archived",
        }
    listed = {r["id"] for r in data["sessions"]}
    assert CONTINUATION not in listed or ROOT not in listed  # a compression chain shows once

    everything = parse_json(cli(store, "sessions", "list", "--children", "--archived", "--json"))
    assert everything["count"] == 6
    only_cli = parse_json(cli(store, "sessions", "list", "--source", "cli", "--children", "--json"))
    assert only_cli["count"] >= 1 and {r["source"] for r in only_cli["sessions"]} == {"cli"}
    assert parse_json(cli(store, "sessions", "list", "--limit", "1", "--json"))["count"] == 1


def test_list_human_output_fits_80_columns_and_keeps_ids_whole(cli, store):
    result = cli(store, "sessions", "list", "--children")
    assert result.exit_code == 0
    assert_fits(result.stdout)
    for sid in (ROOT, CONTINUATION, "fx_20260101_tg_cjk"):
        assert sid in result.stdout


def test_list_of_an_empty_store(cli, empty_store):
    result = cli(empty_store, "sessions", "list")
    assert result.exit_code == 0 and "No sessions found." in flat(result.stdout)


def test_show_by_id_prefix_and_title(cli, store):
    by_id = parse_json(cli(store, "--json", "sessions", "show", ROOT))
    assert set(by_id) == {"session", "lineage", "messages"}
    assert by_id["session"]["id"] == ROOT
    assert len(by_id["messages"]) == 12
    assert [n["id"] for n in by_id["lineage"]] == [ROOT, CONTINUATION]
    assert set(by_id["lineage"][1]) == {
        "id", "parent_session_id", "kind", "depth", "title", "source", "started_at",
        "ended_at", "end_reason", "message_count", "selected",
    }
    assert by_id["lineage"][1]["kind"] == "continuation"

    by_prefix = parse_json(cli(store, "--json", "sessions", "show", "fx_20260101_tg"))
    assert by_prefix["session"]["id"] == "fx_20260101_tg_cjk"
    by_title = parse_json(cli(store, "--json", "sessions", "show", "Refactor parser"))
    assert by_title["session"]["id"] == "fx_20260101_cli_codex"

    human = cli(store, "sessions", "show", ROOT, "--limit", "3")
    assert human.exit_code == 0
    assert "Lineage:" in human.stdout and CONTINUATION in human.stdout
    assert "Messages (3 shown)" in flat(human.stdout)
    assert_fits(human.stdout)


def test_show_unknown_session_exits_3(cli, store):
    result = cli(store, "sessions", "show", "no-such-session")
    assert result.exit_code == 3
    assert "no-such-session" in flat(result.stderr)


def test_lineage_tree(cli, store):
    data = parse_json(cli(store, "--json", "sessions", "lineage", CONTINUATION))
    assert set(data) == {"session_id", "root_id", "sessions"}
    assert data["root_id"] == ROOT
    assert [s["selected"] for s in data["sessions"]] == [False, True]
    human = cli(store, "sessions", "lineage", CONTINUATION)
    assert ROOT in human.stdout and CONTINUATION in human.stdout
    assert_fits(human.stdout)


def test_rename_and_a_title_conflict(cli, store):
    ok = cli(store, "--json", "sessions", "rename", "fx_20260101_cli_codex", "Parser", "cleanup")
    assert ok.exit_code == 0, ok.output
    assert parse_json(ok) == {"id": "fx_20260101_cli_codex", "title": "Parser cleanup"}

    clash = cli(store, "sessions", "rename", "fx_20260101_tg_cjk", "Parser cleanup")
    assert clash.exit_code == 2
    assert "already in use" in flat(clash.stderr)
    with SessionDB(store) as db:
        assert db.get_session_title("fx_20260101_tg_cjk") != "Parser cleanup"


def test_delete_asks_and_refusal_keeps_the_session(cli, store):
    no = cli(store, "sessions", "delete", "fx_20260101_cron_digest", input="n\n")
    assert no.exit_code == 7
    with SessionDB(store) as db:
        assert db.get_session("fx_20260101_cron_digest") is not None

    yes = cli(store, "sessions", "delete", "fx_20260101_cron_digest", input="y\n")
    assert yes.exit_code == 0, yes.output
    assert "Deleted session 'fx_20260101_cron_digest'." in flat(yes.stdout)
    forced = cli(store, "--json", "sessions", "delete", "fx_20260101_cli_codex", "--yes")
    assert parse_json(forced) == {"id": "fx_20260101_cli_codex", "deleted": True}
    with SessionDB(store) as db:
        assert db.get_session("fx_20260101_cron_digest") is None
        assert db.get_messages("fx_20260101_cli_codex") == []


def test_prune_dry_run_then_prune(cli, store):
    # The fixture's sessions are from 2026-01-01, so ended ones are older than 1 day.
    dry = cli(store, "--json", "sessions", "prune", "--older-than", "1", "--source", "cli", "--dry-run")
    assert dry.exit_code == 0, dry.output
    data = parse_json(dry)
    assert set(data) == {"dry_run", "older_than_days", "source", "candidates", "pruned"}
    assert data["dry_run"] is True and data["pruned"] == 0
    ids = [c["id"] for c in data["candidates"]]
    assert ids and all(set(c) == {"id", "source", "title", "started_at", "ended_at", "message_count"} for c in data["candidates"])
    with SessionDB(store) as db:
        assert all(db.get_session(i) is not None for i in ids), "a dry run deleted something"

    human_dry = cli(store, "sessions", "prune", "--older-than", "1", "--dry-run")
    assert "Dry run" in flat(human_dry.stdout)
    assert_fits(human_dry.stdout)

    done = cli(store, "--json", "sessions", "prune", "--older-than", "1", "--source", "cli", "--yes")
    assert parse_json(done)["pruned"] == len(ids)
    with SessionDB(store) as db:
        assert all(db.get_session(i) is None for i in ids)
    nothing = cli(store, "sessions", "prune", "--older-than", "1", "--source", "cli")
    assert "No ended sessions" in flat(nothing.stdout)


def test_stats_by_source_and_model(cli, store):
    data = parse_json(cli(store, "--json", "sessions", "stats"))
    assert set(data) == {"path", "sessions", "messages", "size_bytes", "wal_bytes", "by_source", "by_model"}
    assert (data["sessions"], data["messages"]) == (6, 41)
    assert sum(r["sessions"] for r in data["by_source"]) == 6
    assert sum(r["messages"] for r in data["by_source"]) == 41
    assert sum(r["messages"] for r in data["by_model"]) == 41
    for row in data["by_source"]:
        assert set(row) == {"source", "sessions", "messages", "input_tokens", "output_tokens", "cost_usd"}
        assert all(type(row[k]) is int for k in ("sessions", "messages", "input_tokens", "output_tokens"))
    tokens = sum(r["input_tokens"] or 0 for r in rows(store, "sessions", "id"))
    assert sum(r["input_tokens"] for r in data["by_model"]) == tokens
    assert (data["wal_bytes"] is None) == is_url(store)  # a server has no -wal file
    human = cli(store, "sessions", "stats")
    assert "By source" in flat(human.stdout) and "By model" in flat(human.stdout)
    assert_fits(human.stdout)


def test_export_formats_and_import_report(cli, store, empty_store, tmp_path):
    md = cli(store, "sessions", "export", "fx_20260101_tg_cjk", "--format", "md")
    assert md.exit_code == 0
    assert md.stdout.startswith("# ") and "## user" in md.stdout and "你好" in md.stdout

    target = tmp_path / "all.json"
    result = cli(store, "--json", "sessions", "export", "--format", "json", "--output", target)
    assert result.exit_code == 0, result.output
    assert parse_json(result) == {"path": str(target), "format": "json", "sessions": 6, "messages": 41}
    assert not list(tmp_path.glob(".*.partial")), "the partial file was left behind"

    imported = cli(empty_store, "--json", "sessions", "import", target)
    assert imported.exit_code == 0, imported.output
    report = parse_json(imported)
    assert set(report) == {
        "file", "format", "sessions_added", "sessions_skipped", "messages_added",
        "messages_skipped", "detached", "renumbered", "retitled", "ignored_fields",
    }
    assert (report["sessions_added"], report["messages_added"], report["format"]) == (6, 41, "json")
    again = cli(empty_store, "sessions", "import", target)
    flat = " ".join(again.stdout.split())
    assert "added 0 session(s)" in flat and "skipped 6 already present" in flat
    assert_fits(again.stdout)


def test_export_rejects_an_unknown_format(cli, store):
    result = cli(store, "sessions", "export", "--format", "xml")
    assert result.exit_code == 2


def test_import_of_a_malformed_file_writes_nothing(cli, empty_store, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "source": "cli", "messages": []}\n{not json\n')
    result = cli(empty_store, "sessions", "import", bad)
    assert result.exit_code == 2
    assert "bad.jsonl:2" in "".join(result.stderr.split())
    with SessionDB(empty_store) as db:
        assert db.get_session("a") is None


def test_read_commands_never_upgrade_an_old_store(cli, tmp_path):
    from conftest import copy_fixture

    db = copy_fixture("upstream-0.18.0-v17", tmp_path)
    before = db.read_bytes()
    for args in (["sessions", "list"], ["sessions", "show", "x"], ["search", "docker"], ["sessions", "stats"]):
        result = cli(db, *args)
        assert result.exit_code == 5, (args, result.output)
        assert "db upgrade" in flat(result.stderr)
    exported = cli(db, "sessions", "export", "--format", "jsonl")
    assert exported.exit_code == 0 and exported.stdout.startswith('{"hermes_store_export":1')
    assert db.read_bytes() == before
