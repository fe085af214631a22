#!/usr/bin/env bash
# config/aggregatord.service passes `systemd-analyze verify` and its exposure under
# `systemd-analyze security --offline` is at most 1.5.
set -euo pipefail
unit_dir="${TEST_TMPDIR:-$(mktemp -d)}/units"
mkdir -p "$unit_dir"
# verify checks that ExecStart= exists: point it at the binary just built.
sed "s|/usr/local/bin/aggregatord|$PWD/daemon/aggregatord|" config/aggregatord.service \
  > "$unit_dir/aggregatord.service"
systemd-analyze verify "$unit_dir/aggregatord.service"
report=$(systemd-analyze security --offline=true "$unit_dir/aggregatord.service" 2>&1)
exposure=$(echo "$report" | sed -n 's/.*Overall exposure level for aggregatord.service: \([0-9.]*\).*/\1/p')
echo "exposure: $exposure"
[ -n "$exposure" ] || { echo "no exposure in:"; echo "$report"; exit 1; }
awk -v e="$exposure" 'BEGIN { exit !(e <= 1.5) }' || { echo "exposure $exposure > 1.5"; exit 1; }
grep -q '^Type=notify$' config/aggregatord.service
grep -q '^ExecReload=/bin/sh -c .kill -HUP \$\$MAINPID.$' config/aggregatord.service
echo "unit OK"
