# The container's aggregator.yaml is the default one with three changes: serve on
# every interface (the container's network is its boundary), and run the example
# learners from where the image installs them (an image has no Bazel runfiles).
s|^listen: "127.0.0.1:22272"|listen: "0.0.0.0:22272"|
s|^  listen: "127.0.0.1:22273"|  listen: "0.0.0.0:22273"|
s|command: \[tools/example_learner,|command: [/usr/local/bin/example_learner,|
