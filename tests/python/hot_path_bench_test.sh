#!/usr/bin/env bash
# tools/python/bench/hot_path.py runs (a few steps) and prints its three figures and
# the CPU time per step.
set -euo pipefail
out="$(tools/python/run tools/python/bench/hot_path.py --steps 50 --warmup 10)"
echo "$out"
for name in 'get_data()' 'learn(64)' 'get_data()+learn(64)'; do
  grep -qE "^$(printf '%s' "$name" | sed 's/[()+]/\\&/g') +median [0-9.]+ ms  mean [0-9.]+ ms$" <<<"$out" ||
    { echo "no figure for $name" >&2; exit 1; }
done
grep -qE "^cpu per step: coordinator [0-9.]+ ms, learner [0-9.]+ ms; load average [0-9.]+$" <<<"$out" ||
  { echo "no cpu figure" >&2; exit 1; }
