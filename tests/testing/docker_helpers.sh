# shellcheck shell=bash
# Sourced by the tests that need a real Docker engine (container_image_test.sh,
# systemd_boot_test.sh): the packages, the engine, the Debian base images, timed phases
# and clean-up on every exit path. Where no engine can start, the test fails.
#
# After sourcing: $DOCKER is the client to use (Debian's, which matches the engine it
# installs and builds with BuildKit; the preinstalled /usr/local/bin/docker has no
# buildx), $WORKSPACE the source tree (a build context must be real files, not the
# runfiles' symlinks), $WORK a scratch directory.

set -euo pipefail

# --- clean-up and reporting ----------------------------------------------------
_cleanups=()
# on_exit CMD: run CMD (a string) when the test exits, the last registered first.
on_exit() { _cleanups+=("$1"); }
_run_cleanups() {
  local rc=$? i
  set +e
  for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[$i]}"; done
  exit "$rc"
}
trap _run_cleanups EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

_phase_name=""
_phase_start=0
_test_start=$(date +%s.%N)
# phase NAME: ends the running phase (printing its time) and starts NAME.
phase() {
  local now
  now=$(date +%s.%N)
  [ -z "$_phase_name" ] ||
    awk -v n="$_phase_name" -v t="$now" -v s="$_phase_start" \
      'BEGIN { printf "== %-34s %6.1f s\n", n, t - s }'
  _phase_name=$1
  _phase_start=$now
  [ -z "$1" ] || echo "-- $1"
}
# phases_done: ends the last phase and prints the total.
phases_done() {
  phase ""
  awk -v t="$(date +%s.%N)" -v s="$_test_start" \
    'BEGIN { printf "== %-34s %6.1f s\n", "total", t - s }'
}

# wait_for DEADLINE_S CMD...: runs CMD (quiet by itself) every 0.2 s until it
# succeeds; returns 1 when DEADLINE_S passes first.
wait_for() {
  local deadline=$(($(date +%s) + $1))
  shift
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# --- workspace ------------------------------------------------------------------
# Under `bazel test` the data files are symlinks into the source tree.
WORKSPACE=$(cd "$(dirname "$(readlink -f config/Dockerfile)")/.." && pwd)
WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/docker.XXXXXX")
on_exit 'rm -rf "$WORK"'
[ "$(id -u)" -eq 0 ] || fail "needs root (to run dockerd and debootstrap)"

# One test at a time on this machine, whichever clone runs it: they share the engine,
# its images and the loopback ports.
mkdir -p /run/lock
exec 8>/run/lock/learner-aggregator-docker.lock
flock -w 1800 8 || fail "another container test held the lock for 30 min"

# --- packages and engine --------------------------------------------------------
ensure_packages() {
  local missing=() p
  for p in docker.io debootstrap; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends "${missing[@]}"
  } >>"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log"; fail "cannot install ${missing[*]}"; }
}

DOCKER=docker
# ensure_engine: uses a running engine, or starts dockerd (stopped again on exit).
ensure_engine() {
  ensure_packages
  [ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker
  if ! $DOCKER info >/dev/null 2>&1; then
    echo "starting dockerd"
    dockerd >"$WORK/dockerd.log" 2>&1 8>&- &
    local pid=$!
    on_exit "stop_dockerd $pid"
    local deadline=$(($(date +%s) + 60))
    until $DOCKER info >/dev/null 2>&1; do
      if ! kill -0 "$pid" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
        tail -20 "$WORK/dockerd.log"
        fail "no Docker engine: dockerd did not start (log above)"
      fi
      sleep 0.2
    done
  fi
  echo "engine: $($DOCKER version -f 'server {{.Server.Version}}, client {{.Client.Version}}'), $($DOCKER info -f 'storage {{.Driver}}, cgroup v{{.CgroupVersion}}')"
}

stop_dockerd() {
  kill -TERM "$1" 2>/dev/null || return 0
  timeout 60 tail --pid="$1" -f /dev/null || kill -KILL "$1"
  wait "$1" 2>/dev/null
  echo "stopped the dockerd this test started"
}

# --- Debian base images ---------------------------------------------------------
# debian_sources: the machine's Debian 12 apt sources, one "URI SUITE COMPONENTS"
# a line, from /etc/apt/sources.list and sources.list.d (one-line and deb822 files).
debian_sources() {
  local files=() f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ ! -f "$f" ] || files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk '
    function flush(   n, m, i, j, u, s) {
      if (types ~ /(^| )deb( |$)/ && enabled != "no") {
        n = split(uris, u, " "); m = split(suites, s, " ")
        for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j], comps
      }
      types = uris = suites = comps = ""; enabled = ""
    }
    FNR == 1 { flush() }
    /^[ \t]*#/ { next }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      key = tolower($1); sub(/^[^:]*:[ \t]*/, "")
      if (key == "types:") types = $0
      else if (key == "uris:") uris = $0
      else if (key == "suites:") suites = $0
      else if (key == "components:") comps = $0
      else if (key == "enabled:") enabled = tolower($0)
      next
    }
    $1 == "deb" {
      line = $0; sub(/\[[^]]*\]/, "", line); split(line, f, " ")
      c = ""; for (i = 4; i in f; i++) c = c (c == "" ? "" : " ") f[i]
      print f[2], f[3], c
    }
    END { flush() }' "${files[@]}" | awk '$2 ~ /^bookworm(-updates|-security)?$/'
}

# ensure_base_images: debian:bookworm and debian:bookworm-slim, made with debootstrap
# from the machine's own Debian mirror when the engine has none (no registry is
# reachable). Made once: they stay tagged in the engine.
ensure_base_images() {
  if $DOCKER image inspect debian:bookworm debian:bookworm-slim >/dev/null 2>&1; then
    echo "base images: present"
    return
  fi
  local sources mirror root="$WORK/rootfs"
  sources=$(debian_sources)
  mirror=$(echo "$sources" | awk '$2 == "bookworm" { print $1; exit }')
  [ -n "$mirror" ] || fail "no Debian bookworm source in /etc/apt/sources.list*"
  echo "debootstrap bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; fail "debootstrap failed"; }
  echo "$sources" | sed 's/^/deb /' >"$root/etc/apt/sources.list"
  # The settings this machine's apt needs to use its archive (a proxy, an archive
  # snapshot whose Release files have expired).
  apt-config dump | grep -iE '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' \
    >"$root/etc/apt/apt.conf.d/90host" || true
  rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
    "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
  local changes=(--change 'CMD ["bash"]' --change 'LABEL org.learner-aggregator.stand-in=debootstrap')
  tar -C "$root" -c . | $DOCKER import "${changes[@]}" - debian:bookworm >/dev/null
  # -slim: the same without documentation, manual pages and translations, and dpkg
  # told to leave them out (as the official slim image does).
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/*
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  tar -C "$root" -c . | $DOCKER import "${changes[@]}" - debian:bookworm-slim >/dev/null
  rm -rf "$root"
  echo "base images: made debian:bookworm, debian:bookworm-slim"
}

# build_image TAG [docker build options...]: builds from $WORKSPACE with BuildKit;
# the log goes to $WORK/build-TAG.log and its tail to the output on failure.
build_image() {
  local tag=$1 log="$WORK/build-${1//[:\/]/_}.log"
  shift
  DOCKER_BUILDKIT=1 $DOCKER build --progress=plain -t "$tag" "$@" "$WORKSPACE" >"$log" 2>&1 ||
    { tail -40 "$log"; fail "docker build of $tag failed"; }
  # What an earlier build left behind under this tag.
  $DOCKER image prune -f --filter label=org.learner-aggregator.image >/dev/null
  echo "image $tag: $(($($DOCKER image inspect -f '{{.Size}}' "$tag") / 1000000)) MB"
}
