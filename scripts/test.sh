#!/usr/bin/env bash
# The README's test command: install the test dependencies into .venv and run the suite.
# The suite starts its own throwaway PostgreSQL server (tests/support/postgres.py); on a
# machine without the server binaries they are installed here (root or passwordless sudo,
# apt-get), so that the PostgreSQL tests run in CI instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."

have_postgres_server() {
    [ -n "${HERMES_TEST_PG_BINDIR:-}" ] && return 0
    command -v initdb >/dev/null 2>&1 && return 0
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && return 0
    compgen -G "/usr/pgsql-*/bin/initdb" >/dev/null && return 0
    return 1
}

install_postgres_server() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
            echo "test.sh: PostgreSQL server binaries not found, and installing them needs root;" \
                 "the PostgreSQL tests will fail (see tests/support/postgres.py)" >&2
            return 0
        fi
    fi
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

if [ -z "${HERMES_TEST_SKIP_POSTGRES:-}" ] && ! have_postgres_server; then
    install_postgres_server
fi

python3 -m venv .venv
export PATH="$PWD/.venv/bin:$PATH"   # console scripts (alembic, hermes-store) for subprocess tests
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[test]'
python -m pytest -n 2 "$@"
# The stdlib leg: the named subset (tests/conftest.py, STDLIB_SUBSET) on the standard
# library's sqlite3, which is what users without a pysqlite3 wheel run (issue 20).
if [ $# -eq 0 ] && [ -z "${HERMES_TEST_SKIP_STDLIB_LEG:-}" ]; then
    echo "test.sh: the stdlib-sqlite3 leg (HERMES_STATE_SQLITE_MODULE=sqlite3)" >&2
    HERMES_STATE_SQLITE_MODULE=sqlite3 python -m pytest -n 2 -m "stdlib_sqlite and not postgres"
fi
