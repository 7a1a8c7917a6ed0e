#!/usr/bin/env bash
# The README's test command: install the test dependencies into .venv and run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
exec .venv/bin/python -m pytest -n 2 "$@"
