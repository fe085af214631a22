# The machine tests/system/systemd_boot_test.sh boots with systemd as PID 1:
# config/Dockerfile's build stage (Debian 12, the build packages, the sources in /src)
# plus systemd, on which README.md's "Running under systemd" steps run as written (the
# last one, systemctl, once systemd runs). Its context is only what tools/install reads
# beyond the build stage's sources (the .dockerignore beside this file).
ARG BUILD_IMAGE=learner-aggregator:build
FROM ${BUILD_IMAGE}
LABEL org.learner-aggregator.image=systemd
RUN apt-get update \
 && apt-get install -y --no-install-recommends systemd systemd-sysv \
 && rm -rf /var/lib/apt/lists/*
COPY . /src/
# The same Bazel cache as config/Dockerfile's build: the binaries are up to date.
RUN --mount=type=cache,target=/root/.cache,sharing=locked \
    tools/setup --build-deps && tools/install && bazel shutdown
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
