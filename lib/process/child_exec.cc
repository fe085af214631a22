#include "lib/process/child_exec.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace aggregator {
namespace process_internal {
namespace {

// Marks every fd above 2 close-on-exec. close_range needs Linux 5.11 and may be
// filtered by seccomp; /proc/self/fd read with raw getdents64 is the fallback.
bool MarkAllCloexec() {
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return true;
  const int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char buffer[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buffer, sizeof(buffer));
    if (n < 0) {
      const int error = errno;
      close(dir);
      errno = error;
      return false;
    }
    if (n == 0) break;
    for (long offset = 0; offset < n;) {
      const auto* entry =
          reinterpret_cast<const struct dirent64*>(buffer + offset);
      offset += entry->d_reclen;
      int fd = 0;
      const char* p = entry->d_name;
      if (*p < '0' || *p > '9') continue;
      for (; *p >= '0' && *p <= '9'; ++p) fd = fd * 10 + (*p - '0');
      if (fd > 2) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  close(dir);
  return true;
}

[[noreturn]] void ChildFail(const ChildPlan& plan, ChildStage stage,
                            int error) {
  const ChildError report{stage, error};
  ssize_t n;
  do {
    n = write(plan.error_fd, &report, sizeof(report));
  } while (n < 0 && errno == EINTR);
  _exit(127);
}

}  // namespace

// Runs in the forked child: async-signal-safe calls only.
[[noreturn]] void RunChild(ChildPlan& plan) {
  // Before anything else, so a killpg from the parent already reaches the
  // child.
  if (plan.new_process_group && setpgid(0, 0) != 0) {
    ChildFail(plan, ChildStage::kSetpgid, errno);
  }
  if (plan.die_with_parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
      ChildFail(plan, ChildStage::kPdeathsig, errno);
    }
    // The parent may have died before prctl: then nobody would send the signal.
    if (getppid() != plan.parent_pid) _exit(127);
  }

  // Dispositions first, then the mask (blocked by the parent around fork), so
  // no inherited handler can run in the child. SIG_IGN survives exec, and the
  // daemon's blocked signals must not stay blocked in its children.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int signo = 1; signo < NSIG; ++signo) sigaction(signo, &dfl, nullptr);
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);

  for (size_t i = 0; i < plan.fds.size(); ++i) {
    plan.scratch[i] = fcntl(plan.fds[i].first, F_DUPFD_CLOEXEC, plan.fd_floor);
    if (plan.scratch[i] < 0) ChildFail(plan, ChildStage::kFds, errno);
  }
  for (size_t i = 0; i < plan.fds.size(); ++i) {
    if (dup2(plan.scratch[i], plan.fds[i].second) < 0) {
      ChildFail(plan, ChildStage::kFds, errno);
    }
  }
  // Every fd not mapped is closed by exec; the error pipe stays usable until
  // then.
  if (!MarkAllCloexec()) ChildFail(plan, ChildStage::kFds, errno);
  for (const auto& [source, target] : plan.fds) {
    if (target > 2 && fcntl(target, F_SETFD, 0) != 0) {
      ChildFail(plan, ChildStage::kFds, errno);
    }
  }

  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) {
    ChildFail(plan, ChildStage::kChdir, errno);
  }

  // The error rules of glibc's execvp: keep searching past missing entries,
  // report EACCES if any candidate had it, stop at any other error.
  bool saw_eacces = false;
  int error = ENOENT;
  for (const std::string& candidate : plan.candidates) {
    char* path = const_cast<char*>(candidate.c_str());
    execve(path, plan.argv.data(), plan.envp.data());
    error = errno;
    if (error == ENOEXEC) {
      plan.sh_argv[1] = path;
      execve(plan.sh_argv[0], plan.sh_argv.data(), plan.envp.data());
      error = errno;
    }
    if (error == EACCES) {
      saw_eacces = true;
    } else if (error != ENOENT && error != ENOTDIR && error != ESTALE &&
               error != ENODEV && error != ETIMEDOUT) {
      break;
    }
  }
  if (saw_eacces) error = EACCES;
  ChildFail(plan, ChildStage::kExec, error);
}

absl::Status ChildErrorToStatus(const ChildError& report,
                                const SubprocessOptions& options) {
  const std::string& name = options.argv[0];
  switch (report.stage) {
    case ChildStage::kSetpgid:
      return absl::ErrnoToStatus(
          report.error, absl::StrCat("setpgid in the child for '", name, "'"));
    case ChildStage::kPdeathsig:
      return absl::ErrnoToStatus(
          report.error,
          absl::StrCat("prctl(PR_SET_PDEATHSIG) in the child for '", name,
                       "'"));
    case ChildStage::kFds:
      return absl::ErrnoToStatus(
          report.error,
          absl::StrCat("setting up the fds of the child for '", name, "'"));
    case ChildStage::kChdir:
      return absl::ErrnoToStatus(
          report.error, absl::StrCat("cannot change directory to '",
                                     options.cwd, "' for '", name, "'"));
    case ChildStage::kExec:
      break;
  }
  return absl::ErrnoToStatus(report.error,
                             absl::StrCat("cannot execute '", name, "'"));
}

absl::Status BuildPlan(const SubprocessOptions& options, ChildPlan& plan) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("subprocess: argv is empty");
  }
  const std::string& name = options.argv[0];

  // Environment: the parent's, with overrides replacing entries of the same
  // name.
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const auto& [key, value] : options.env) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("subprocess '", name,
                       "': invalid environment variable name '", key, "'"));
    }
    auto it =
        std::find_if(overrides.begin(), overrides.end(),
                     [&key = key](const auto& kv) { return kv.first == key; });
    if (it != overrides.end()) {
      it->second = value;
    } else {
      overrides.emplace_back(key, value);
    }
  }
  const char* path_env = nullptr;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = strchr(*entry, '=');
    const std::string key(*entry, eq == nullptr ? strlen(*entry) : eq - *entry);
    const bool overridden =
        std::any_of(overrides.begin(), overrides.end(),
                    [&key](const auto& kv) { return kv.first == key; });
    if (overridden) continue;
    plan.env_storage.emplace_back(*entry);
    if (key == "PATH" && eq != nullptr) path_env = eq + 1;
  }
  std::string path_override;
  bool has_path_override = false;
  for (const auto& [key, value] : overrides) {
    plan.env_storage.push_back(absl::StrCat(key, "=", value));
    if (key == "PATH") {
      path_override = value;
      has_path_override = true;
    }
  }
  for (std::string& entry : plan.env_storage) plan.envp.push_back(entry.data());
  plan.envp.push_back(nullptr);

  // The child's PATH decides the lookup, like `env PATH=... prog`; glibc's
  // default applies when there is none.
  if (name.find('/') != std::string::npos) {
    plan.candidates.push_back(name);
  } else if (!name.empty()) {
    const std::string search = has_path_override     ? path_override
                               : path_env != nullptr ? path_env
                                                     : "/bin:/usr/bin";
    for (absl::string_view dir : absl::StrSplit(search, ':')) {
      plan.candidates.push_back(dir.empty() ? name
                                            : absl::StrCat(dir, "/", name));
    }
  }

  for (const std::string& arg : options.argv) {
    plan.argv.push_back(const_cast<char*>(arg.c_str()));
  }
  plan.argv.push_back(nullptr);
  plan.sh_argv.push_back(const_cast<char*>("/bin/sh"));
  plan.sh_argv.push_back(nullptr);  // the script path, set by the child
  plan.sh_argv.insert(plan.sh_argv.end(), plan.argv.begin() + 1,
                      plan.argv.end());

  std::set<int> targets;
  if (options.capture_output) targets = {1, 2};
  int highest = 2;
  for (const auto& [source, target] : options.fds) {
    if (target < 0 || !targets.insert(target).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "subprocess '", name, "': child fd ", target,
          " is invalid or mapped twice (fds 1 and 2 are taken when capturing "
          "output)"));
    }
    if (fcntl(source, F_GETFD) < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("subprocess '", name, "': fd ", source,
                              " to pass as child fd ", target));
    }
    highest = std::max({highest, source, target});
  }
  plan.fd_floor = highest + 1;

  if (!options.cwd.empty()) plan.cwd = options.cwd.c_str();
  plan.new_process_group = options.new_process_group;
  plan.die_with_parent = options.die_with_parent;
  plan.parent_pid = getpid();
  return absl::OkStatus();
}

}  // namespace process_internal
}  // namespace aggregator
