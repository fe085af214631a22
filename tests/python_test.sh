#!/usr/bin/env bash
# Runs one Python test file (its argument) under Debian's python3 with the SDK and the
# generated stubs importable; the file prints Catch2's "test cases:" line for tools/test.
set -euo pipefail
exec tools/python/run "$@"
