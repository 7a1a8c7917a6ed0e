#!/usr/bin/env bash
# The README's test command: install the test dependencies into .venv and run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
export PATH="$PWD/.venv/bin:$PATH"   # console scripts (alembic, hermes-store) for subprocess tests
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[test]'
exec python -m pytest -n 2 "$@"
