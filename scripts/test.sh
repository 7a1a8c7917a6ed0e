#!/usr/bin/env bash
# The README's test command: install the test dependencies into .venv and run the suite.
# The suite starts its own throwaway PostgreSQL server (tests/support/postgres.py) and a
# PgBouncer in front of it (tests/support/pgbouncer.py); on a machine without the server
# binaries or PgBouncer they are installed here (root or passwordless sudo, apt-get), so
# that the PostgreSQL tests run in CI instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."

have_postgres_server() {
    [ -n "${HERMES_TEST_PG_BINDIR:-}" ] && return 0
    command -v initdb >/dev/null 2>&1 && return 0
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && return 0
    compgen -G "/usr/pgsql-*/bin/initdb" >/dev/null && return 0
    return 1
}

have_pgbouncer() {
    [ -n "${HERMES_TEST_PGBOUNCER:-}" ] && return 0
    command -v pgbouncer >/dev/null 2>&1 && return 0
    [ -x /usr/sbin/pgbouncer ] && return 0
    return 1
}

# How to run apt-get as root ("", "sudo -n"), or fail with why not (printed).
root_prefix() {
    local what="$1"
    if [ "$(id -u)" = 0 ]; then echo ""; return 0; fi
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then echo "sudo -n"; return 0; fi
    echo "test.sh: $what not found, and installing it needs root; the PostgreSQL tests" \
         "will fail (see tests/support/postgres.py, tests/support/pgbouncer.py)" >&2
    return 1
}

install_postgres_server() {
    local sudo
    sudo="$(root_prefix "the PostgreSQL server binaries")" || return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: PostgreSQL server binaries not found and apt-get is missing: install" \
             "PostgreSQL 15+ with contrib (pg_trgm), or set HERMES_TEST_PG_BINDIR" >&2
        return 0
    fi
    echo "test.sh: installing the PostgreSQL server for the test suite (apt-get)" >&2
    # The suite runs its own server: Debian must not create (and start) a system cluster.
    $sudo mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.d/hermes-tests.conf >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib >/dev/null
}

install_pgbouncer() {
    local sudo
    sudo="$(root_prefix "PgBouncer")" || return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: PgBouncer not found and apt-get is missing: install it, or set" \
             "HERMES_TEST_PGBOUNCER to its binary" >&2
        return 0
    fi
    echo "test.sh: installing PgBouncer for the test suite (apt-get)" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # the suite starts its own PgBouncer on a socket of its own; the package's service
    # (if the machine runs systemd) is not used
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
}

if [ -z "${HERMES_TEST_SKIP_POSTGRES:-}" ] && ! have_postgres_server; then
    install_postgres_server
fi
if [ -z "${HERMES_TEST_SKIP_POSTGRES:-}" ] && ! have_pgbouncer; then
    install_pgbouncer
fi

python3 -m venv .venv
export PATH="$PWD/.venv/bin:$PATH"   # console scripts (alembic, hermes-store) for subprocess tests
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[test]'
python -m pytest -n 2 "$@"
# The host leg (issue 30, D19): the repository tests with a host's own sqlite3 writing the file between the store's calls.
if [ $# -eq 0 ]; then
    echo "test.sh: the host leg (--host-sqlite)" >&2
    env -u HERMES_STATE_SQLITE_MODULE python -m pytest -n 2 tests/repository -m "not postgres" --host-sqlite
fi
# The pysqlite3 leg: the named subset (tests/conftest.py: LIBRARY_SUBSET, SQLITE_TESTS) on the opt-in
# library (decision D19: the default is the standard library's sqlite3), where the
# platform has a pysqlite3 wheel.
if [ $# -eq 0 ] && [ -z "${HERMES_TEST_SKIP_PYSQLITE3_LEG:-}" ] \
        && python -c "import pysqlite3.dbapi2" 2>/dev/null; then
    echo "test.sh: the pysqlite3 leg (HERMES_STATE_SQLITE_MODULE=pysqlite3)" >&2
    HERMES_STATE_SQLITE_MODULE=pysqlite3 python -m pytest -n 2 -m "pysqlite3_leg and not postgres"
fi
