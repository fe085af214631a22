#!/usr/bin/env bash
# Runs json_log_test.py under Debian's python3 (json,
# testutil) from the runfiles root.
set -euo pipefail
export PYTHONPATH="$PWD/tests/testing${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 tests/daemon/json_log_test.py "$@"
