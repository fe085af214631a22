#!/usr/bin/env bash
# Runs aggregator_schema_test.py under Debian's python3 (python3-jsonschema,
# python3-yaml) from the runfiles root.
set -euo pipefail
export PYTHONPATH="$PWD/tests/testing${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 tests/config/aggregator_schema_test.py "$@"
