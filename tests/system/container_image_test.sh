#!/usr/bin/env bash
# config/Dockerfile built and run by a real Docker engine
# (tests/testing/docker_helpers.sh provides it, and the Debian base images): the image
# runs as a non-root user, its HEALTHCHECK turns healthy, `aggregatorctl status` shows
# the learners ready, the Learner API and metrics answer on ports published on
# 127.0.0.1, SIGHUP reloads, a worker's orphaned grandchildren are reaped, and
# `docker stop` exits 0 in time. Prints the image size and the time of each phase.
source tests/testing/docker_helpers.sh

image=learner-aggregator:test
name=learner-aggregator-test-$$
stop_timeout=45  # > drain_timeout (30 s) + a worker's stop_timeout (10 s)

phase "engine"
ensure_engine
phase "base images"
ensure_base_images
phase "docker build"
build_image "$image" -f "$WORKSPACE/config/Dockerfile"
[ "$($DOCKER run --rm --entrypoint id "$image")" = \
  "uid=10001(aggregator) gid=10001(aggregator) groups=10001(aggregator)" ] ||
  fail "the image user is not aggregator with uid = gid = 10001"

phase "start until healthy"
# The image's configuration plus a worker that leaves orphans behind: subshells
# that background a `sleep` and exit at once, so the sleeps are reparented to PID 1.
config="$WORK/aggregator.yaml"
cat >"$WORK/orphans.yaml" <<'EOF'
  - name: orphans
    command: [/bin/sh, -c, "for i in 1 2 3 4 5; do (sleep 0.5 &); done; echo orphans left; exec sleep 3600"]
    restart: never
EOF
sed -f config/container.sed config/aggregator.yaml |
  sed "/^workers:\$/r $WORK/orphans.yaml" >"$config"
# Mounted the way README.md says: readable by the image's group, not world-readable.
chown root:10001 "$config"
chmod 0640 "$config"
on_exit "$DOCKER rm -f $name >/dev/null 2>&1"
$DOCKER run -d --name "$name" --stop-timeout "$stop_timeout" \
  --health-interval 1s --health-start-period 60s \
  -p 127.0.0.1::22272 -p 127.0.0.1::22273 \
  -v "$config:/etc/aggregator/aggregator.yaml:ro" "$image" >/dev/null
healthy() {
  local state
  state=$($DOCKER inspect -f '{{.State.Status}} {{.State.Health.Status}}' "$name")
  [ "${state% *}" = running ] || { $DOCKER logs "$name" 2>&1 | tail -20; fail "container $state"; }
  [ "${state#* }" = healthy ]
}
wait_for 60 healthy || fail "not healthy within 60 s"
echo "healthy"

phase "checks"
learner_port=$($DOCKER port "$name" 22272/tcp | sed -n 1p)
metrics_port=$($DOCKER port "$name" 22273/tcp | sed -n 1p)
case "$learner_port $metrics_port" in
  127.0.0.1:*" "127.0.0.1:*) echo "published on $learner_port (Learner API), $metrics_port (metrics)" ;;
  *) fail "ports not published on 127.0.0.1 only: $learner_port $metrics_port" ;;
esac
# Every process in the container runs as the image user, none as root.
processes=$($DOCKER top "$name" -eo uid,pid,stat,args)
echo "$processes" | awk 'NR > 1 && $1 != 10001 { bad = 1 } END { exit bad }' ||
  { echo "$processes"; fail "a process in the container is not uid 10001"; }
echo "non-root: every process is uid 10001"
# aggregatord's loader-audit module sits beside it (config/Dockerfile): ld.so loads
# it instead of saying it cannot.
! $DOCKER logs "$name" 2>&1 | grep 'cannot be loaded as audit interface' ||
  fail "ld.so did not load aggregatord's loader-audit module in the image"
$DOCKER exec -e LD_DEBUG=files "$name" aggregatord --version 2>&1 |
  grep -F 'file=/usr/local/bin/libaggregatord_signals.so [1]; audit interface function la_version returned zero' >/dev/null ||
  fail "ld.so did not load /usr/local/bin/libaggregatord_signals.so in the image"
echo "ld.so loads libaggregatord_signals.so from beside aggregatord"

# Healthy is min_learners (1) ready; the second learner may still be between its
# first (refused) connection and the next attempt.
both_ready() {
  [ "$($DOCKER exec "$name" aggregatorctl status | grep -cE '^learner-[01] +[^ ]+ +ready ')" -eq 2 ]
}
wait_for 15 both_ready || { $DOCKER exec "$name" aggregatorctl status; fail "not both learners ready"; }
status=$($DOCKER exec "$name" aggregatorctl status)
echo "$status"
echo "$status" | sed -n 1p | grep ' ready ' >/dev/null || fail "status is not ready"

tools/cli/aggregatorctl --target "$learner_port" --timeout 5 resource | grep . >/dev/null ||
  fail "no GetResource answer on $learner_port"
echo "GetResource answers on $learner_port from the host"
/usr/bin/python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=5).read().decode())' \
  "$metrics_port" >"$WORK/metrics" || fail "no metrics on $metrics_port"
grep -q '^aggregator_learners' "$WORK/metrics" || fail "metrics lack aggregator_learners"
echo "metrics answer: $(grep -c '^aggregator_' "$WORK/metrics") aggregator_ samples"

# Orphans: the worker announces them; each sleep then exits within 0.5 s and must
# be reaped, never left a zombie.
logged() { $DOCKER logs "$name" 2>&1 | grep "$1" >/dev/null; }  # not -q: pipefail
wait_for 15 logged "orphans left" || fail "the orphans worker did not start"
# "PID STATE ARGS" of every process in the container, zombies included (docker top
# misses them: an exited process has left its cgroup).
processes() {
  $DOCKER exec "$name" sh -c 'for d in /proc/[0-9]*; do
    s=$(sed "s/.*) //" "$d/stat" 2>/dev/null) || continue
    printf "%s %s %s\n" "${d#/proc/}" "${s%% *}" "$(tr "\0" " " 2>/dev/null <"$d/cmdline")"; done'
}
# A zombie, or one of the backgrounded `sleep 0.5` (not the command lines that
# mention it: the worker's guard names the whole script).
no_orphans_left() { [ -z "$(processes | awk '$2 == "Z" || ($3 == "sleep" && $4 == "0.5")')" ]; }
if ! wait_for 10 no_orphans_left; then
  processes
  fail "zombies: the orphaned grandchildren were not reaped"
fi
echo "orphans reaped: no zombie, no sleep left"

$DOCKER kill -s HUP "$name" >/dev/null
generation2() { $DOCKER exec "$name" aggregatorctl status | sed -n 1p | grep '(generation 2)' >/dev/null; }
wait_for 15 generation2 || fail "not generation 2 within 15 s of SIGHUP"
logged "configuration reloaded (generation 2)" || fail "no reload in the log"
echo "SIGHUP reloaded: generation 2"

phase "docker stop"
start=$(date +%s.%N)
$DOCKER stop "$name" >/dev/null || fail "docker stop failed"
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
exit_code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$name")
[ "$exit_code" = 0 ] || { $DOCKER logs "$name" 2>&1 | tail -20; fail "exit code $exit_code"; }
awk -v t="$took" -v m="$stop_timeout" 'BEGIN { exit !(t < m) }' ||
  fail "docker stop took $took s (the timeout is $stop_timeout s: killed)"
echo "docker stop: exit 0 in $took s (timeout $stop_timeout s)"
phases_done
