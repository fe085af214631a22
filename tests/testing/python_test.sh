#!/usr/bin/env bash
# Runs one Python test file (its argument, from the runfiles root) under Debian's
# python3 with the SDK, the generated stubs and tests/testing/testutil.py importable;
# the file prints Catch2's "test cases:" line for tools/test.
set -euo pipefail
export PYTHONPATH="$PWD/tests/testing${PYTHONPATH:+:$PYTHONPATH}"
exec tools/python/run "$@"
