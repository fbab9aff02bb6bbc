#!/usr/bin/env bash
# Installs everything the test suite needs into ./.venv, then runs the whole suite:
# lint (ruff), the layer rules (import-linter), and pytest over every tier.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k recovery`).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

.venv/bin/ruff check src tests bench
.venv/bin/lint-imports --no-cache

rc=0
.venv/bin/python -m pytest "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
