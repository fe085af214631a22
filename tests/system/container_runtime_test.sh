#!/usr/bin/env bash
# The runtime stage of config/Dockerfile, run outside Docker in seconds (the real
# image is container_image_test.sh, minutes):
# 1. its package list covers every shared library the three binaries load, beyond
#    what debian:bookworm-slim already ships;
# 2. its ENTRYPOINT, as an unprivileged user on the image's aggregator.yaml (made by
#    config/container.sed), serves: HEALTHCHECK's command exits 0; STOPSIGNAL stops
#    it with exit 0 and no worker left; ld.so loads aggregatord's loader-audit module
#    from beside it, where the build stage installs it.
set -euo pipefail
dockerfile=config/Dockerfile
bins=(daemon/aggregatord tools/cli/aggregatorctl tools/examples/example_learner)

# bookworm-slim: libc, libstdc++ and apt's own libraries.
base="libc6 libgcc-s1 libstdc++6 zlib1g liblzma5 libzstd1 liblz4-1 libgcrypt20 libgpg-error0 libcap2 libsystemd0"
runtime=$(sed -n '/^FROM debian:bookworm-slim/,$p' "$dockerfile" |
  sed -n '/apt-get install/,/rm -rf/p' | tr ' \\' '\n\n' | grep -E '^lib' || true)
[ -n "$runtime" ] || { echo "no runtime packages found in $dockerfile"; exit 1; }
libs=$(for b in "${bins[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u)
# One dpkg query for every spelling of every path (/lib is /usr/lib here).
owners=$(for lib in $libs; do echo "$lib" "${lib#/usr}" "/usr${lib}"; done |
  xargs dpkg -S 2>/dev/null || true)
missing=""
known=" $(echo $base $runtime) "
# No reader in these pipelines stops early: under pipefail the writer's SIGPIPE
# would end the script without a word.
for lib in $libs; do
  pkg=$(echo "$owners" | awk -v a="$lib" -v b="${lib#/usr}" -v c="/usr$lib" \
    '{ p = $NF } !found && (p == a || p == b || p == c) { sub(/:.*/, "", $1); print $1; found = 1 }')
  [ -n "$pkg" ] || { echo "no package owns $lib"; exit 1; }
  [[ "$known" == *" $pkg "* ]] || missing="$missing $pkg($lib)"
done
[ -z "$missing" ] || { echo "runtime stage lacks:$missing"; exit 1; }
echo "runtime packages cover every library"

# The image's layout in a directory an unprivileged user can read.
root=$(mktemp -d /tmp/container.XXXXXX)
trap 'kill -KILL ${daemon_pid:-} 2>/dev/null || true; rm -rf "$root"' EXIT
chmod 755 "$root"
mkdir -p "$root/usr/local/bin" "$root/etc/aggregator"
for b in "${bins[@]}"; do install -m 0755 "$b" "$root/usr/local/bin/"; done
# aggregatord's DT_AUDIT names it beside the binary (daemon/BUILD).
module=daemon/libaggregatord_signals.so
grep -q "install -m 0644 bazel-bin/$module /out/usr/local/bin/" "$dockerfile" ||
  { echo "$dockerfile does not install $module beside aggregatord"; exit 1; }
install -m 0644 "$module" "$root/usr/local/bin/"
# Free ports instead of 22272/22273/22300 (other tests may run beside this one).
ports=$(/usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
read -r port metrics_port worker_port <<<"$ports"
sed -f config/container.sed config/aggregator.yaml |
  sed -e "s|/usr/local/bin/|$root/usr/local/bin/|" \
      -e "s|0.0.0.0:22272|127.0.0.1:$port|" -e "s|0.0.0.0:22273|127.0.0.1:$metrics_port|" \
      -e "s|port_base: 22300|port_base: $worker_port|" \
      -e "s|replicas: 2|replicas: 1|" > "$root/etc/aggregator/aggregator.yaml"
grep -q "listen: \"127.0.0.1:$port\"" "$root/etc/aggregator/aggregator.yaml"

entrypoint=$(sed -n 's/^ENTRYPOINT \[\(.*\)\]/\1/p' "$dockerfile" | tr -d '",')
[ "${entrypoint%% *}" = /usr/bin/tini ] || { echo "ENTRYPOINT does not start with tini"; exit 1; }
entrypoint=${entrypoint#/usr/bin/tini -- }  # PID 1 in the image only: run what it runs
healthcheck=$(sed -n 's/^ *CMD \[\(.*\)\]/\1/p' "$dockerfile" | tr -d '",')
[ "$(sed -n 's/^STOPSIGNAL //p' "$dockerfile")" = SIGTERM ]
[ "$(sed -n 's/^USER //p' "$dockerfile")" = aggregator ]
echo "entrypoint: $entrypoint; healthcheck: $healthcheck"

as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
if [ "${EXPECT_AUDIT_MODULE:?set by tests/system/BUILD}" = 1 ]; then
  loaded=$(as_user env LD_DEBUG=files "$root/usr/local/bin/aggregatord" --version 2>&1)
  echo "$loaded" | grep -F "file=$root/usr/local/bin/libaggregatord_signals.so [1]; audit interface function la_version returned zero" >/dev/null ||
    { echo "$loaded" | grep -i audit; echo "ld.so did not load $module from beside aggregatord"; exit 1; }
  echo "ld.so loads $(basename $module) from beside aggregatord"
else
  echo "not checked: a sanitizer build of aggregatord names no loader-audit module"
fi

export PATH="$root/usr/local/bin:$PATH"
# Not through as_user: $! must be the daemon itself (setpriv and env exec it).
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --clear-groups -- env PATH="$PATH" \
  $(echo "$entrypoint" | sed "s|/etc/aggregator|$root/etc/aggregator|") \
  > "$root/daemon.log" 2>&1 &
daemon_pid=$!
healthy=""
for _ in $(seq 150); do  # up to 15 s
  # shellcheck disable=SC2086
  if as_user env PATH="$PATH" AGGREGATOR_TARGET="127.0.0.1:$port" $healthcheck >/dev/null 2>&1; then
    healthy=yes; break
  fi
  kill -0 $daemon_pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$healthy" ] || { echo "never healthy:"; cat "$root/daemon.log"; exit 1; }
echo "healthcheck passes"
! grep 'cannot be loaded as audit interface' "$root/daemon.log" ||
  { echo "ld.so did not load aggregatord's loader-audit module"; exit 1; }
worker_pids=$(pgrep -P $daemon_pid || true)
[ -n "$worker_pids" ] || { echo "no worker started"; cat "$root/daemon.log"; exit 1; }
[ "$(awk '/^Uid:/ {print $2}' /proc/$daemon_pid/status)" = 65534 ]  # unprivileged
kill -TERM $daemon_pid
rc=0
timeout 15 tail --pid=$daemon_pid -f /dev/null || { echo "no exit after SIGTERM"; exit 1; }
wait $daemon_pid || rc=$?
[ $rc -eq 0 ] || { echo "exit $rc after SIGTERM"; cat "$root/daemon.log"; exit 1; }
for pid in $worker_pids; do
  ! kill -0 "$pid" 2>/dev/null || { echo "worker $pid outlived the daemon"; exit 1; }
done
echo "stopped cleanly by SIGTERM"
