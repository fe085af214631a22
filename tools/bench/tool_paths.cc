#include "tools/bench/tool_paths.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

constexpr char kWorkspace[] = "learner_aggregator";

}  // namespace

ToolPaths::ToolPaths(const char* argv0, std::string tool)
    : tool_(std::move(tool)),
      runfiles_(bazel::tools::cpp::runfiles::Runfiles::Create(
          argv0, &runfiles_error_)) {}

std::string ToolPaths::Locate(const std::string& workspace_path) const {
  if (runfiles_ == nullptr) return "";
  const std::string found =
      runfiles_->Rlocation(absl::StrCat(kWorkspace, "/", workspace_path));
  return Executable(found) ? found : "";
}

absl::StatusOr<std::string> ToolPaths::Require(const std::string& path,
                                               const std::string& what,
                                               const std::string& flag) const {
  if (!Executable(path)) {
    return absl::NotFoundError(absl::StrCat(
        "no ", what, " at '", path, "': run under `bazel run //tools:", tool_,
        "` or pass ", flag, " PATH",
        runfiles_ == nullptr
            ? absl::StrCat(" (runfiles: ", runfiles_error_, ")")
            : ""));
  }
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved)
                                                     : path;
}

absl::Status ToolPaths::Resolve(std::string& path,
                                const std::string& workspace_path,
                                const std::string& what,
                                const std::string& flag) const {
  if (path.empty()) path = Locate(workspace_path);
  absl::StatusOr<std::string> found = Require(path, what, flag);
  if (!found.ok()) return found.status();
  path = *std::move(found);
  return absl::OkStatus();
}

absl::Status ResolveDaemonAndLearner(const ToolPaths& paths,
                                     std::string& daemon,
                                     std::string& learner) {
  if (absl::Status s = paths.Resolve(daemon, "daemon/aggregatord",
                                     "aggregatord", "--daemon");
      !s.ok()) {
    return s;
  }
  return paths.Resolve(learner, "tools/examples/example_learner",
                       "example_learner", "--learner");
}

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

std::string UserPath(const std::string& path) {
  const char* working = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path.front() == '/' || working == nullptr) return path;
  return absl::StrCat(working, "/", path);
}

}  // namespace aggregator
