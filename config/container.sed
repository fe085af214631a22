# The container's aggregator.yaml is the default one with these changes: serve the
# Learner API and metrics on every interface (the container's network is its
# boundary; publish the ports on 127.0.0.1, or set up TLS, to keep them private),
# allow that without TLS (a no-op until the configuration has `allow_insecure`), and
# run the example learners from where the image installs them (an image has no
# Bazel runfiles). The admin listener stays on the container's loopback: use
# `docker exec CONTAINER aggregatorctl status`.
s|^listen: "127.0.0.1:22272"|listen: "0.0.0.0:22272"|
s|^  listen: "127.0.0.1:22273"|  listen: "0.0.0.0:22273"|
s|^allow_insecure: false|allow_insecure: true|
s|command: \[tools/examples/example_learner,|command: [/usr/local/bin/example_learner,|
