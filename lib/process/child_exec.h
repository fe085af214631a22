// The child side of Subprocess::Start: the plan built before fork (argv, the
// environment, the PATH candidates, the fd moves), what the forked child runs
// until exec, and how its report of a failure reads. Private to lib/process.
#ifndef LIB_PROCESS_CHILD_EXEC_H_
#define LIB_PROCESS_CHILD_EXEC_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "lib/process/subprocess.h"

namespace aggregator {
namespace process_internal {

// What the child reports through the exec-error pipe before it _exits.
enum class ChildStage : int { kSetpgid, kPdeathsig, kFds, kChdir, kExec };

struct ChildError {
  ChildStage stage;
  int error;
};

// Everything the child needs, built before fork: after fork only
// async-signal-safe calls may run, so no allocation happens there.
struct ChildPlan {
  // execvp semantics: every PATH candidate in order, each tried with execve.
  std::vector<std::string> candidates;
  std::vector<char*> argv;
  // For a candidate that execve rejects with ENOEXEC, run it with /bin/sh as
  // execvp does; slot 1 is filled in by the child.
  std::vector<char*> sh_argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  // {source fd, target fd}; sources are first moved above `fd_floor` so that no
  // dup2 clobbers a source still to be used.
  std::vector<std::pair<int, int>> fds;
  std::vector<int> scratch;  // the moved sources, written by the child
  int fd_floor = 3;
  const char* cwd = nullptr;
  bool new_process_group = true;
  bool die_with_parent = true;
  pid_t parent_pid = -1;
  int error_fd = -1;
};

// Fills `plan` from `options` (before fork). INVALID_ARGUMENT for an empty
// argv, a bad environment name or fd mapping.
absl::Status BuildPlan(const SubprocessOptions& options, ChildPlan& plan);

// Runs in the forked child: async-signal-safe calls only. Execs or reports a
// ChildError on plan.error_fd and _exits.
[[noreturn]] void RunChild(ChildPlan& plan);

// The status for the child's report, naming the program.
absl::Status ChildErrorToStatus(const ChildError& report,
                                const SubprocessOptions& options);

}  // namespace process_internal
}  // namespace aggregator

#endif  // LIB_PROCESS_CHILD_EXEC_H_
