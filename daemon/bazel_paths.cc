#include "daemon/bazel_paths.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace aggregator {
namespace {

// The workspace name in WORKSPACE: the runfiles tree's top directory.
constexpr char kWorkspaceName[] = "learner_aggregator";

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

std::vector<std::string> FindRunfilesDirs() {
  std::vector<std::string> dirs;
  if (const char* runfiles = getenv("RUNFILES_DIR");
      runfiles != nullptr && runfiles[0] != '\0') {
    const std::string dir = absl::StrCat(runfiles, "/", kWorkspaceName);
    if (IsDirectory(dir)) dirs.push_back(dir);
  }
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    const std::string dir =
        absl::StrCat(absl::string_view(exe, n), ".runfiles/", kWorkspaceName);
    if (IsDirectory(dir) &&
        std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) {
      dirs.push_back(dir);
    }
  }
  return dirs;
}

std::string ResolveUserPath(const std::string& path) {
  const char* working_directory = getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path.front() == '/' || working_directory == nullptr) {
    return path;
  }
  return absl::StrCat(working_directory, "/", path);
}

}  // namespace aggregator
