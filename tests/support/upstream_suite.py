"""Upstream's own tests of ``hermes_state`` run on hermes_store (issue 32, D15).

hermes-agent 0.19.0's source distribution ships the tests upstream runs against its
``hermes_state`` module. :func:`run_upstream_suite` runs them on this package's module
instead, in the suite's agent venv (``support.agent_venv``) where ``hermes-store agent
enable`` makes ``import hermes_state`` the module ``hermes_store.agent.hermes_state``:

* the sdist is fetched once (``pip download --no-deps --no-binary :all:``) into the cache
  the agent venv lives in (``benchmarks/results/cache/sdists``, git-ignored), under a file
  lock so parallel workers fetch it once; a CI machine fetches it on its first run like
  the venv. Offline and not cached: the test fails with the reason, unless
  ``HERMES_SKIP_UPSTREAM_TESTS=1`` says to skip it;
* only upstream's tests of ``hermes_state`` (:func:`selected`) are extracted, into a
  scratch folder (never into this repository), beside
  ``workers/upstream_suite_conftest.py`` as their ``conftest.py`` (it checks the module
  is ours and gives the upstream names ours lacks stand-ins) and an empty ``pytest.ini``
  (no configuration of ours or of the machine applies);
* pytest runs in a subprocess of the venv's interpreter. The venv has no pytest of its
  own: this interpreter's site-packages is appended to the child's ``sys.path`` (after
  the venv's, so the agent's own packages win) with plugin autoloading off.

:data:`UPSTREAM_ONLY` lists the tests that cannot pass on any module but upstream's own,
grouped, one reason each; :data:`BY_DESIGN` the ones whose upstream behaviour the store
does not share on purpose; :data:`NOT_YET` the ones waiting for a change outside this
item. ``docs/agent.md`` ("Upstream's own tests") mirrors all three.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import agent_venv

VERSION = agent_venv.AGENT_VERSION
SDISTS = agent_venv.CACHE / "sdists"
SDIST = SDISTS / f"hermes_agent-{VERSION}.tar.gz"
CONFTEST = Path(__file__).resolve().parent / "workers" / "upstream_suite_conftest.py"

#: upstream's tests of ``hermes_state``: every ``tests/`` file whose name starts with
#: these, and the session tests that import ``hermes_state`` (490 tests in 0.19.0)
TEST_PREFIXES = ("test_hermes_state", "test_state_db_", "test_wal_checkpoint_strategy")
SESSION_TESTS = (
    "test_background_review_session_isolation.py",
    "test_delegate_cascade_49148.py",
    "test_empty_session_hygiene.py",
    "test_lazy_session_regressions.py",
    "test_session_workspace_binding.py",
)
UPSTREAM_TEST_COUNT = 490


def ensure_sdist() -> Path:
    """The cached sdist, downloaded when missing (once, whoever asks first)."""
    if SDIST.is_file():
        return SDIST
    SDISTS.mkdir(parents=True, exist_ok=True)
    with open(SDISTS / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if SDIST.is_file():
            return SDIST
        partial = SDISTS / "partial"
        shutil.rmtree(partial, ignore_errors=True)
        run = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", f"hermes-agent=={VERSION}", "-d", str(partial)],
            capture_output=True, text=True,
        )
        fetched = partial / SDIST.name
        if run.returncode != 0 or not fetched.is_file():
            shutil.rmtree(partial, ignore_errors=True)
            raise RuntimeError(f"downloading the hermes-agent {VERSION} sdist failed:\n"
                               f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
        fetched.rename(SDIST)
        shutil.rmtree(partial, ignore_errors=True)
    return SDIST


def selected(name: str) -> bool:
    return name.startswith(TEST_PREFIXES) or name in SESSION_TESTS


def require_sdist() -> Path:
    """The cached sdist (fetched when missing), or fail/skip the calling test."""
    try:
        return ensure_sdist()
    except RuntimeError as exc:
        if os.environ.get("HERMES_SKIP_UPSTREAM_TESTS") == "1":
            pytest.skip(f"HERMES_SKIP_UPSTREAM_TESTS=1: {exc}")
        pytest.fail(f"{exc}\n(no package index? set HERMES_SKIP_UPSTREAM_TESTS=1 to skip)")


def extract_tests(sdist: Path, dest: Path) -> list[str]:
    """Upstream's tests of ``hermes_state`` (:func:`selected`) into ``dest/tests``, the
    conftest and an empty ``pytest.ini`` into ``dest``; returns the file names."""
    prefix = f"hermes_agent-{VERSION}/tests/"
    names = []
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            name = member.name[len(prefix):] if member.name.startswith(prefix) else ""
            if member.isfile() and "/" not in name and name.endswith(".py") and selected(name):
                member.name = f"tests/{name}"
                tar.extract(member, dest, filter="data")
                names.append(name)
    missing = set(SESSION_TESTS) - set(names)
    assert not missing, f"the sdist has no tests/{sorted(missing)}"
    shutil.copyfile(CONFTEST, dest / "conftest.py")
    (dest / "pytest.ini").write_text("[pytest]\n")
    return sorted(names)


@dataclass(frozen=True)
class Outcome:
    test: str  # "<file>::<Class>::<name>", as UPSTREAM_ONLY names it
    passed: bool
    message: str


def read_junit(path: Path) -> list[Outcome]:
    """Each test case of a junit file (``classname`` ``tests.<module>.<Class>``): passed,
    or the first line of why not (a failure, an error, a skip)."""
    outcomes = []
    for case in ET.parse(path).iter("testcase"):
        module, _, cls = case.get("classname", "").removeprefix("tests.").partition(".")
        test = "::".join(part for part in (f"{module}.py", cls, case.get("name")) if part)
        why = next((case.find(tag) for tag in ("failure", "error", "skipped")
                    if case.find(tag) is not None), None)
        message = ""
        if why is not None:
            text = why.get("message") or why.text or why.tag
            message = f"{why.tag}: {text.strip().splitlines()[0][:300]}"
        outcomes.append(Outcome(test, why is None, message))
    return outcomes


def run_upstream_suite(python: Path, env: dict, sdist: Path, scratch: Path,
                       timeout: float = 600) -> tuple[list[Outcome], subprocess.CompletedProcess]:
    """Upstream's tests of ``hermes_state`` run by ``python`` (the agent venv's, with the
    switch on) in ``scratch``: each test's outcome, and the run."""
    extract_tests(sdist, scratch)
    junit = scratch / "junit.xml"
    ours = sysconfig.get_paths()["purelib"]  # pytest itself, after the venv's packages
    bootstrap = f"import sys; sys.path.append({ours!r}); import pytest; sys.exit(pytest.main())"
    child_env = {k: v for k, v in env.items() if not k.startswith("PYTEST_")}
    child_env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run(
        [str(python), "-c", bootstrap, "-q", "-p", "no:cacheprovider",
         "-o", "junit_family=xunit1", f"--junitxml={junit}",
         f"--basetemp={scratch / 'tmp'}", "tests"],
        capture_output=True, text=True, cwd=scratch, timeout=timeout, env=child_env,
    )
    if not junit.is_file():
        raise AssertionError(f"upstream's tests did not run:\n{run.stdout[-3000:]}\n"
                             f"{run.stderr[-3000:]}")
    return read_junit(junit), run


def groups() -> dict[str, tuple[tuple[str, str], ...]]:
    """Every group of tests that do not pass: :data:`UPSTREAM_ONLY`, :data:`BY_DESIGN`,
    :data:`NOT_YET`."""
    return {**UPSTREAM_ONLY, **BY_DESIGN, **NOT_YET}


def listed() -> dict[str, str]:
    """Every test that does not pass, with its reason."""
    return {test: reason for group in groups().values() for test, reason in group}


#: The tests that cannot pass on any module but upstream's own: they patch or read
#: upstream's module globals or ``SessionDB``'s private attributes. Grouped by what they
#: reach into; one reason each. docs/agent.md ("Upstream's own tests") mirrors this list.
_HS = "test_hermes_state.py"
_REPAIR = "test_state_db_malformed_repair.py"
_CHECKPOINT = "test_wal_checkpoint_strategy.py"
_HARNESS = "test_background_review_session_isolation.py"
_CASCADE = "test_delegate_cascade_49148.py"

UPSTREAM_ONLY: dict[str, tuple[tuple[str, str], ...]] = {
    "Upstream's private module functions": (
        *((f"{_HARNESS}::TestIsBackgroundReviewHarnessMessage::{name}",
           "calls hermes_state._is_background_review_harness_message; the store drops "
           "background-review turns on load in repository/conversation.py")
          for name in ("test_matches_skill_review_prompt", "test_matches_memory_review_prompt",
                       "test_matches_after_leading_whitespace",
                       "test_ignores_normal_user_message", "test_ignores_assistant_role",
                       "test_ignores_non_string_content", "test_ignores_non_dict")),
        *((f"{_HARNESS}::TestStripBackgroundReviewHarness::{name}",
           "calls hermes_state._strip_background_review_harness; the store drops "
           "background-review turns on load in repository/conversation.py")
          for name in ("test_strips_harness_and_following_assistant_reply",
                       "test_strips_harness_without_following_assistant",
                       "test_does_not_skip_user_turn_after_harness",
                       "test_clean_history_passes_through_unchanged", "test_empty_list",
                       "test_multiple_harness_pairs")),
        *((f"{_CASCADE}::TestCollectDelegateChildIds::{name}",
           "calls hermes_state._collect_delegate_child_ids on a plain sqlite3 connection; "
           "the store's delete cascade is repository/deletion.py")
          for name in ("test_collects_delegate_child_excludes_parent",
                       "test_multilevel_chain_collects_all_descendants",
                       "test_parent_session_id_branch_with_marker_collected",
                       "test_untagged_child_not_collected",
                       "test_cycle_terminates_and_excludes_parent")),
        (f"{_CASCADE}::TestDeleteDelegateChildrenPreservesParent::"
         "test_cycle_does_not_delete_parent_or_its_messages",
         "calls hermes_state._delete_delegate_children on a plain sqlite3 connection; the "
         "store's delete cascade is repository/deletion.py"),
    ),
    "A SQLite without FTS5, trigram or WAL, made by patching hermes_state.sqlite3.connect": (
        (f"{_HS}::TestSessionLifecycle::test_db_initializes_without_fts5_module",
         "patches hermes_state.sqlite3.connect and reads SessionDB._fts_enabled; the store's "
         "engine connects through SQLAlchemy's sqlite3.dbapi2, which the patch misses"),
        (f"{_HS}::TestSessionLifecycle::test_existing_fts_tables_do_not_break_without_fts5",
         "patches hermes_state.sqlite3.connect and reads SessionDB._fts_enabled"),
        (f"{_HS}::TestSessionLifecycle::test_old_schema_without_fts5_does_not_crash",
         "builds the file from upstream's SCHEMA_SQL and patches hermes_state.sqlite3.connect"),
        (f"{_HS}::TestSessionLifecycle::test_fts_runtime_restores_triggers_after_no_fts_open",
         "patches hermes_state.sqlite3.connect and reads SessionDB._fts_enabled"),
        (f"{_HS}::TestSessionLifecycle::test_base_fts_rebuilds_after_trigger_repair_without_trigram",
         "drops the FTS triggers through SessionDB._conn (refused: the schema belongs to the "
         "migrations), patches hermes_state.sqlite3.connect, reads _fts_enabled and "
         "_trigram_available"),
        (f"{_HS}::TestSessionLifecycle::test_db_initializes_without_trigram_tokenizer",
         "patches hermes_state.sqlite3.connect and reads SessionDB._fts_enabled"),
        (f"{_HS}::TestSessionLifecycle::test_v11_migration_backfills_base_fts_when_trigram_unavailable",
         "patches hermes_state.sqlite3.connect and reads _fts_enabled and _trigram_available"),
        (f"{_HS}::TestSchemaInit::test_v9_migration_skips_v10_trigram_backfill_before_v11_rebuild",
         "builds the file from upstream's SCHEMA_SQL and patches hermes_state.sqlite3.connect"),
        ("test_hermes_state_wal_fallback.py::TestSessionDbUsesWalFallback::"
         "test_sessiondb_works_when_wal_unavailable",
         "patches hermes_state.sqlite3.connect to refuse WAL; the store picks the journal "
         "from the filesystem (files/journal.py) on connections the patch does not reach"),
    ),
    "SessionDB's private methods and attributes": (
        (f"{_HS}::TestSessionLifecycle::test_is_fts5_unavailable_error_catches_trigram_tokenizer",
         "calls SessionDB._is_fts5_unavailable_error"),
        (f"{_HS}::TestSessionLifecycle::test_is_trigram_unavailable_error",
         "calls SessionDB._is_trigram_unavailable_error"),
        (f"{_HS}::TestMessageStorage::test_string_content_unchanged_by_encoding",
         "holds SessionDB._lock, upstream's one lock around its one connection; the store "
         "has a connection per thread and write units"),
        (f"{_HS}::TestListSessionsRich::test_order_by_last_active_surfaces_recently_touched_older_session_first",
         "holds SessionDB._lock to write rows past the API"),
        (f"{_HS}::TestListSessionsRich::test_order_by_last_active_uses_compression_tip_activity",
         "holds SessionDB._lock to write rows past the API"),
        (f"{_HS}::TestOptimizeFts::test_optimize_skips_missing_trigram_table",
         "holds SessionDB._lock to drop an FTS table"),
        (f"{_HS}::TestOptimizeFts::test_write_path_optimizes_fts_on_cadence",
         "sets SessionDB._OPTIMIZE_EVERY_N_WRITES; the store merges FTS segments by its own "
         "bounded schedule"),
        (f"{_HS}::TestSchemaInit::test_schema_sql_is_source_of_truth",
         "parses upstream's SCHEMA_SQL with SessionDB._parse_schema_columns; the store's "
         "schema is hermes_store/schema.py and the revisions"),
        (f"{_HS}::TestCompactRows::test_get_session_rich_row_compact_omits_system_prompt",
         "calls SessionDB._get_session_rich_row"),
        (f"{_HS}::TestCompactRows::test_get_session_rich_row_full_includes_system_prompt",
         "calls SessionDB._get_session_rich_row"),
        (f"{_HS}::TestConcurrentWriteSafety::test_sqlite_timeout_is_at_least_30s",
         "reads the source text of SessionDB.__init__ for upstream's timeout=30; the store "
         "waits on a busy file with its RetryPolicy"),
        (f"{_CHECKPOINT}::TestTryWalCheckpointPassive::test_checkpoint_uses_passive_mode",
         "puts a recording object in place of SessionDB._conn and calls "
         "_try_wal_checkpoint; the store never runs a PASSIVE checkpoint (D19)"),
        (f"{_CHECKPOINT}::TestTryWalCheckpointPassive::test_checkpoint_logs_warning_on_failure",
         "puts a failing object in place of SessionDB._conn and calls _try_wal_checkpoint"),
        (f"{_CHECKPOINT}::TestTryWalCheckpointPassive::test_checkpoint_returns_result_on_success",
         "calls SessionDB._try_wal_checkpoint"),
        (f"{_CHECKPOINT}::TestCloseUsesTruncate::test_close_uses_truncate_mode",
         "puts a recording object in place of SessionDB._conn to see close() checkpoint "
         "through it; the store checkpoints on its engine under the writer lock (D19)"),
        (f"{_CHECKPOINT}::TestCloseUsesTruncate::test_close_logs_debug_on_failure",
         "puts a failing object in place of SessionDB._conn and expects upstream's log line"),
        (f"{_CHECKPOINT}::TestCheckpointFrequency::test_checkpoint_triggers_at_interval",
         "counts calls of SessionDB._try_wal_checkpoint every _CHECKPOINT_EVERY_N_WRITES"),
    ),
    "Other module globals of upstream's, patched": (
        (f"{_HS}::TestApplyWalProbe::test_macos_checkpoint_fullsync_barrier_applied",
         "patches hermes_state.sys.platform and looks for upstream's statement text "
         "checkpoint_fullfsync=1; the store sends the engine's pragmas, "
         "checkpoint_fullfsync=ON (the same setting)"),
        (f"{_HS}::TestApplyWalProbe::test_macos_barrier_applied_when_already_wal",
         "patches hermes_state.sys.platform and looks for the text checkpoint_fullfsync=1"),
        (f"{_REPAIR}::test_auto_heal_attempted_once_per_process",
         "patches hermes_state.repair_state_db_schema and expects SessionDB() to call it; the "
         "store heals duplicated FTS schema rows itself at open (files/repair.py)"),
        (f"{_REPAIR}::test_strategy_b_rebuild_when_dedup_insufficient",
         "patches hermes_state._db_opens_cleanly to call a healed file broken while any FTS "
         "object exists, so that upstream drops the FTS schema for its next open to rebuild; "
         "the store's repair checks with its own probe and reports dedup_schema"),
    ),
}

#: Upstream's behaviour the store does not share, on purpose (docs/agent.md says why).
BY_DESIGN: dict[str, tuple[tuple[str, str], ...]] = {
    "Upstream's behaviour the store does not share": (
        (f"{_HS}::TestAutoMaintenance::test_first_run_prunes_and_vacuums",
         "expects a VACUUM after pruning two empty sessions; the store's automatic "
         "maintenance VACUUMs only a file with enough free pages to be worth rewriting "
         "(issue 31: a VACUUM holds the file exclusively while it rewrites it), and says "
         "why not in the result's reason"),
    ),
}

#: Behaviour differences whose fix is waiting for a change outside item 1 of issue 32,
#: each naming it; they leave this list when the change lands (the run then fails on
#: them as passing).
NOT_YET: dict[str, tuple[tuple[str, str], ...]] = {}
