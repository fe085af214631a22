#!/bin/sh
echo "bazel coverage is unsupported offline: measure coverage outside Bazel" >&2
exit 1
