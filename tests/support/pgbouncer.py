"""PgBouncer in front of the suite's throwaway PostgreSQL server (issue 17, decision D16).

Fixtures (imported into ``tests/conftest.py``):

``pgbouncer_transaction``  (session) a PgBouncer in ``pool_mode = transaction`` — what
                           managed PostgreSQL services hand out as their pooled URL;
``pgbouncer_session``      (session) the same in ``pool_mode = session``;
``pooler_url``             the URL of a fresh database at head (``pg_url``) as reached
                           through one of them; parametrize ``pooler_mode`` indirectly
                           (``"transaction"`` or ``"session"``).

Each one is Debian's ``pgbouncer`` (1.18; ``scripts/test.sh`` installs it when missing,
as it does the server) started in the foreground in a private temporary directory,
listening only on a Unix socket in that directory (no TCP port: parallel workers cannot
collide), in front of this process's server (``tests/support/postgres.py``) over the
server's own socket. Every database of the server is reachable through it by name
(``* =`` in ``[databases]``). Authentication is ``trust`` (the server trusts local
logins too), with the users the tests connect as in its ``auth_file``.

The settings are PgBouncer's defaults where they matter to the store: ``server_reset_query
= DISCARD ALL`` (session mode), ``ignore_startup_parameters = extra_float_digits`` only —
so a client that sends ``options`` at startup is refused as on a real deployment.

Like the server, PgBouncer refuses to run as root: as root it runs as ``postgres``
(``runuser``). It is stopped at the end of the session, by an ``atexit`` hook if the
session ends abnormally, and by a watchdog process if pytest is killed (the same
approach as ``postgres.py``: the watchdog waits for EOF on a pipe only this process
holds, then kills PgBouncer by the pid in its pidfile and removes the directory).
Nothing is left running. Without the binary the tests that use it fail with how to
install it (``HERMES_TEST_SKIP_POSTGRES=1`` skips them with the server's tests).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

#: a PgBouncer binary to use instead of the one on PATH / in /usr/sbin
BINARY_ENV = "HERMES_TEST_PGBOUNCER"
INSTALL_HINT = (
    "install PgBouncer (Debian/Ubuntu: `apt-get install -y pgbouncer`; `bash scripts/test.sh` "
    f"does it when run as root), or point {BINARY_ENV} at the binary"
)
#: the socket file's name in the directory (PgBouncer's ``listen_port``)
PORT = 6432
MODES = ("transaction", "session")


def find_binary() -> Path | None:
    given = os.environ.get(BINARY_ENV, "").strip()
    if given:
        return Path(given) if Path(given).exists() else None
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer")
         if Path(p).exists()), None)
    return Path(found) if found else None


_WATCHDOG = textwrap.dedent("""
    import os, shutil, signal, sys, time
    pidfile, base = sys.argv[1:3]
    sys.stdin.buffer.read()
    try:
        pid = int(open(pidfile).read().strip())
    except (OSError, ValueError):
        pid = None
    if pid:
        for sig in (signal.SIGINT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
    shutil.rmtree(base, ignore_errors=True)
""")


class PgBouncer:
    """One PgBouncer in front of ``server`` (a ``postgres.PostgresServer``)."""

    def __init__(self, binary: Path, server, mode: str, *, settings: dict[str, str] | None = None,
                 users: tuple[str, ...] = ("postgres",)) -> None:
        if mode not in MODES:
            raise ValueError(f"pool mode {mode!r} is not one of {MODES}")
        self.binary = binary
        self.server = server
        self.mode = mode
        self.base = Path(tempfile.mkdtemp(prefix=f"hermes-pgb-{mode[0]}-"))
        self.config = self.base / "pgbouncer.ini"
        self.log = self.base / "pgbouncer.log"
        self.pidfile = self.base / "pgbouncer.pid"
        self.port = PORT
        self.settings = dict(settings or {})
        self.users = list(users)
        self.run_as = "postgres" if os.geteuid() == 0 else None
        self._proc: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None

    # ------------------------------------------------------------------ config

    def _ini(self) -> str:
        settings = {
            "pool_mode": self.mode,
            "listen_addr": "",  # no TCP: only the socket below
            "listen_port": str(self.port),
            "unix_socket_dir": str(self.base),
            "auth_type": "trust",
            "auth_file": str(self.base / "userlist.txt"),
            "pidfile": str(self.pidfile),
            "logfile": str(self.log),
            "admin_users": "postgres",
            "max_client_conn": "400",
            "default_pool_size": "20",
            "max_db_connections": "40",
            # a restart of the server: reconnect at once rather than after 15 s
            "server_login_retry": "0.2",
            "server_lifetime": "3600",
            "ignore_startup_parameters": "extra_float_digits",
            "log_connections": "0",
            "log_disconnections": "0",
        }
        settings.update(self.settings)
        lines = ["[databases]",
                 f"* = host={self.server.base} port={self.server.port}", "",
                 "[pgbouncer]", *(f"{k} = {v}" for k, v in settings.items()), ""]
        return "\n".join(lines)

    def _write_config(self) -> None:
        self.config.write_text(self._ini())
        (self.base / "userlist.txt").write_text(
            "".join(f'"{user}" ""\n' for user in self.users))
        if self.run_as:
            for path in (self.base, self.config, self.base / "userlist.txt"):
                shutil.chown(path, user=self.run_as)
        os.chmod(self.base, 0o700)

    # ------------------------------------------------------------------ processes

    def start(self) -> None:
        self._write_config()
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.pidfile), str(self.base)],
            stdin=subprocess.PIPE, start_new_session=True,
        )
        atexit.register(self.stop)
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        self._proc = subprocess.Popen(prefix + [str(self.binary), str(self.config)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      start_new_session=True)
        socket_path = self.base / f".s.PGSQL.{self.port}"
        deadline = time.monotonic() + 30
        while not (socket_path.exists() and self.pidfile.exists()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.poll() is not None else ""
                log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
                self.stop()
                raise RuntimeError(f"PgBouncer ({self.mode}) did not start:\n{err}{log}")
            time.sleep(0.05)
        self._wait_accepting(socket_path)

    @staticmethod
    def _wait_accepting(socket_path: Path) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(socket_path))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def reload(self, **settings: str) -> None:
        """Change settings of the running PgBouncer (``SIGHUP`` re-reads the file)."""
        self.settings.update(settings)
        self._write_config()
        pid = self.pid()
        if pid:
            os.kill(pid, signal.SIGHUP)
            time.sleep(0.3)

    def stop(self) -> None:
        """Stop PgBouncer and remove its directory (idempotent)."""
        if self._proc is not None:
            pid = self.pid()
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGINT)  # immediate shutdown
                except ProcessLookupError:
                    pass
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
            if self._proc.stderr is not None:
                self._proc.stderr.close()
            self._proc = None
        if self._watchdog is not None:
            self._watchdog.stdin.close()
            self._watchdog.wait(timeout=60)
            self._watchdog = None
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ addresses

    def url(self, database: str, *, user: str = "postgres", driver: str = "psycopg") -> str:
        return f"postgresql+{driver}://{user}@/{database}?host={self.base}&port={self.port}"

    def through(self, server_url: str) -> str:
        """``server_url`` (a URL of the suite's server, as ``pg_url`` gives) rewritten to
        reach the same database, user and query options through this PgBouncer."""
        import sqlalchemy as sa

        url = sa.engine.make_url(server_url)
        query = dict(url.query)
        query.update(host=str(self.base), port=str(self.port))
        return url.set(host=None, port=None, query=query).render_as_string(hide_password=False)

    def admin(self, command: str) -> list[tuple]:
        """A command on PgBouncer's console (``SHOW POOLS``, ``SHOW SERVERS``…)."""
        import psycopg

        with psycopg.connect(host=str(self.base), port=self.port, user="postgres",
                             dbname="pgbouncer", autocommit=True, prepare_threshold=None) as conn:
            cur = conn.execute(command, prepare=False)
            return cur.fetchall() if cur.description else []


# --------------------------------------------------------------------------- fixtures

_bouncers: dict[str, PgBouncer] = {}
_error: str | None = None


def running_pgbouncer(mode: str) -> PgBouncer:
    """This process's PgBouncer in ``mode``, started on first use in front of its server."""
    global _error
    from support.postgres import running_server

    server = running_server()  # skips or fails first, as for every PostgreSQL test
    if _error is not None:
        pytest.fail(_error, pytrace=False)
    if mode not in _bouncers:
        binary = find_binary()
        if binary is None:
            _error = f"PgBouncer not found: {INSTALL_HINT}"
            pytest.fail(_error, pytrace=False)
        bouncer = PgBouncer(binary, server, mode)
        try:
            bouncer.start()
        except Exception as exc:
            _error = f"could not start PgBouncer ({binary}): {exc}"
            pytest.fail(_error, pytrace=False)
        _bouncers[mode] = bouncer
    return _bouncers[mode]


def stop_pgbouncers() -> None:
    while _bouncers:
        _, bouncer = _bouncers.popitem()
        bouncer.stop()


@pytest.fixture(scope="session")
def pgbouncer_transaction(pg_server):
    yield running_pgbouncer("transaction")
    stop_pgbouncers()


@pytest.fixture(scope="session")
def pgbouncer_session(pg_server):
    yield running_pgbouncer("session")
    stop_pgbouncers()


@pytest.fixture
def pooler_mode(request) -> str:
    """``"transaction"`` or ``"session"`` (parametrize it indirectly)."""
    return getattr(request, "param", "transaction")


@pytest.fixture
def pgbouncer(request, pooler_mode) -> PgBouncer:
    """The session's PgBouncer in ``pooler_mode``."""
    return request.getfixturevalue(f"pgbouncer_{pooler_mode}")


@pytest.fixture
def pooler_url(pgbouncer, pg_url) -> str:
    """A fresh database at head (``pg_url``), reached through ``pgbouncer``."""
    return pgbouncer.through(pg_url)


# --------------------------------------------------------------------------- the engines' third and fourth run

#: the ``backend`` values of a database on the suite's server reached through PgBouncer
POOLER_BACKENDS = ("pgbouncer-transaction", "pgbouncer-session")

#: tests of the repository and reliability suites that run through both poolers as well
#: (``[pgbouncer-transaction]``, ``[pgbouncer-session]``): one or more per concern, and
#: what a pooler changes (transactions, prepared statements, locks, read-only, several
#: processes). ``pytest --poolers`` runs every engine-parametrized test of those two
#: suites through them. A name here that no longer exists is a collection error.
POOLER_SUBSET = frozenset({
    "repository/test_sessions.py::test_create_is_an_enriching_upsert",
    "repository/test_sessions.py::test_updaters",
    "repository/test_sessions.py::test_end_session_first_reason_wins_and_reopen",
    "repository/test_sessions.py::test_system_prompts_are_stored_once_and_read_transparently",
    "repository/test_titles.py::test_titles_are_unique_and_case_sensitive",
    "repository/test_titles.py::test_get_next_title_in_lineage",
    "repository/test_titles.py::test_title_moves_from_a_compression_ancestor_only",
    "repository/test_usage.py::test_per_model_attribution_across_a_switch",
    "repository/test_usage.py::test_increments_and_creates_missing_session",
    "repository/test_messages.py::test_append_returns_increasing_ids_and_counts_messages",
    "repository/test_messages.py::test_multimodal_content_is_stored_with_the_json_marker_and_decoded",
    "repository/test_messages.py::test_replace_messages_is_all_or_nothing",
    "repository/test_messages.py::test_rewind_soft_deletes_target_and_later_rows",
    "repository/test_messages.py::test_get_messages_around",
    "repository/test_messages_batch.py::test_a_batch_stores_what_one_call_per_message_stores",
    "repository/test_messages_batch.py::test_a_failure_inside_the_unit_rolls_back_rows_and_counters",
    "repository/test_search.py::test_result_shape_and_session_fields",
    "repository/test_search.py::test_cjk_three_chars_uses_trigram_with_markers",
    "repository/test_search.py::test_short_cjk_terms_use_the_like_scan_or_ed",
    "repository/test_search.py::test_a_word_search_retried_on_the_trigram_index_reads_one_snapshot",
    "repository/test_search.py::test_paging",
    "repository/test_search.py::test_read_only_store_searches",
    "repository/test_search.py::test_missing_index_falls_back_to_the_bounded_scan",
    "repository/test_lineage_listing.py::test_listing_hides_children_and_archived_and_projects_tips",
    "repository/test_lineage_listing.py::test_compression_tip_and_lineage",
    "repository/test_lineage_listing.py::test_token_statistics",
    "repository/test_lookups.py::test_exact_then_prefix_then_substring_each_newest_first",
    "repository/test_lookups.py::test_resume_conversations_are_the_repaired_tip_and_the_whole_lineage",
    "repository/test_lookups.py::test_cron_runs_page",
    "repository/test_gateway.py::test_save_upserts_one_entry_per_scope_and_key",
    "repository/test_gateway.py::test_replace_is_all_or_nothing",
    "repository/test_gateway.py::test_origin_finds_the_live_keyed_session_of_a_chat",
    "repository/test_gateway.py::test_latest_for_peer_is_the_newest_session_with_a_transcript",
    "repository/test_handoff.py::test_the_whole_cycle",
    "repository/test_handoff.py::test_exactly_one_of_two_processes_wins_each_claim",
    "repository/test_portability.py::test_delete_cascades_delegates_and_detaches_other_children",
    "repository/test_portability.py::test_prune_only_old_ended_and_detaches_children",
    "repository/test_portability.py::test_export_session_lineage",
    "repository/test_cleanup.py::test_a_ghost_that_is_a_parent_is_kept_and_the_others_are_pruned",
    "repository/test_cleanup.py::test_delete_session_if_empty_never_loses_a_message_written_meanwhile",
    "repository/test_import_sessions.py::test_an_export_imports_back_with_its_history_but_not_its_runtime_state",
    "repository/test_import_sessions.py::test_all_or_nothing_when_the_store_refuses",
    "repository/test_meta_locks.py::test_compression_lock_protocol",
    "repository/test_meta_locks.py::test_meta_roundtrip",
    "repository/test_open_close.py::test_read_only",
    "repository/test_open_close.py::test_maintenance_calls",
    "repository/test_open_close.py::test_maybe_auto_prune_and_vacuum",
    "repository/test_telegram_topics.py::test_apply_creates_the_tables_at_head_and_writes_upstreams_meta_key",
    "repository/test_telegram_topics.py::test_two_processes_opting_in_at_once_create_the_tables_once",
    "repository/test_telegram_topics.py::test_bind_opts_in_and_returns_upstreams_row_shape",
    "repository/test_concurrency.py::test_concurrent_appenders_lose_and_double_nothing",
    "repository/test_concurrency.py::test_processes_claiming_one_title_at_once_one_wins",
    "repository/test_concurrency.py::test_reader_never_sees_half_a_unit",
    "repository/test_concurrency.py::test_second_writer_waits_at_begin_and_its_unit_runs_once",
    "repository/test_concurrency.py::test_unit_that_stays_locked_raises_store_busy_after_the_attempts",
    "repository/test_concurrency.py::test_no_unit_runs_twice_under_contention",
    "repository/test_held_connections.py::test_an_insert_through_the_driver_returns_its_new_id",
    "repository/test_constructs.py::test_json_text_statements_differing_only_in_the_key_are_not_confused",
    "repository/test_parity_differences.py::test_nul_queries_find_what_upstream_finds",
    "reliability/test_load.py::test_four_writers_two_readers_lose_nothing",
    "reliability/test_load.py::test_retries_under_forced_contention_never_apply_a_unit_twice",
})
#: the suites whose ``backend`` fixtures know the pooler backends (``through_pooler``)
POOLER_SUITES = ("repository", "reliability")


def pooler_mode_of(backend: str) -> str | None:
    """``"transaction"``/``"session"`` for a pooler backend, None otherwise."""
    return backend.split("-", 1)[1] if backend in POOLER_BACKENDS else None


def through_pooler(request, backend: str, url: str) -> str:
    """``url`` (a database on the suite's server) as the engine under test reaches it:
    unchanged for ``postgresql``, through the session's PgBouncer for a pooler backend."""
    mode = pooler_mode_of(backend)
    if mode is None:
        return url
    return request.getfixturevalue(f"pgbouncer_{mode}").through(url)


def suite_test_name(definition) -> str:
    """``repository/test_x.py::test_name`` of a test function (for ``POOLER_SUBSET``)."""
    path = Path(str(definition.path))
    return f"{path.parent.name}/{path.name}::{definition.originalname}"
