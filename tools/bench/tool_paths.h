// ToolPaths: where a tool under tools/ finds the binaries it runs (in its Bazel
// runfiles, so `bazel run //tools:X` needs no flags) and what the paths its
// user passes mean.
#ifndef TOOLS_BENCH_TOOL_PATHS_H_
#define TOOLS_BENCH_TOOL_PATHS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace aggregator {

class ToolPaths {
 public:
  // `tool` names the tool in errors ("soak": `bazel run //tools:soak`).
  ToolPaths(const char* argv0, std::string tool);

  // The executable at `workspace_path` ("daemon/aggregatord") in the runfiles,
  // or "" when there is none.
  std::string Locate(const std::string& workspace_path) const;

  // `path` made absolute, or NOT_FOUND saying how to give the binary (the
  // option `flag`) when nothing executable is there.
  absl::StatusOr<std::string> Require(const std::string& path,
                                      const std::string& what,
                                      const std::string& flag) const;

  // `path` (the user's, or when empty the runfiles' `workspace_path`) through
  // Require: what every tool does for each binary it runs.
  absl::Status Resolve(std::string& path, const std::string& workspace_path,
                       const std::string& what, const std::string& flag) const;

 private:
  const std::string tool_;
  std::string runfiles_error_;
  std::unique_ptr<bazel::tools::cpp::runfiles::Runfiles> runfiles_;
};

// aggregatord (--daemon) and example_learner (--learner) through Resolve: the
// pair the bench and the soak both run.
absl::Status ResolveDaemonAndLearner(const ToolPaths& paths,
                                     std::string& daemon, std::string& learner);

bool Executable(const std::string& path);

// Relative paths are the user's: under `bazel run` they mean the directory
// bazel was run from.
std::string UserPath(const std::string& path);

}  // namespace aggregator

#endif  // TOOLS_BENCH_TOOL_PATHS_H_
