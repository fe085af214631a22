// What aggregatord knows of Bazel, kept at the edge: where its runfiles are
// (so the default configuration's relative worker commands run from
// `bazel run` and from bazel-bin), and the directory `bazel run` was started
// from (so relative --config paths mean what the user typed).
#ifndef DAEMON_BAZEL_PATHS_H_
#define DAEMON_BAZEL_PATHS_H_

#include <string>
#include <vector>

namespace aggregator {

// The runfiles directories of this workspace that exist, in the order programs
// are looked up in them: "$RUNFILES_DIR/learner_aggregator" (set by `bazel
// test`, and by whatever launches aggregatord with its runfiles), then
// "<this executable>.runfiles/learner_aggregator" (next to
// bazel-bin/daemon/aggregatord). Empty for an installed binary.
std::vector<std::string> FindRunfilesDirs();

// `path` as the user meant it: a relative path is resolved against
// $BUILD_WORKING_DIRECTORY when set (`bazel run` changes the working
// directory to the runfiles).
std::string ResolveUserPath(const std::string& path);

}  // namespace aggregator

#endif  // DAEMON_BAZEL_PATHS_H_
