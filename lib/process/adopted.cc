#include "lib/process/adopted.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "lib/base/mutex.h"

namespace aggregator {
namespace {

// How long KillAdopted waits between rounds for SIGKILLed children to end.
constexpr std::chrono::milliseconds kRoundWait(5);

Mutex& RegistryMutex() {
  static Mutex* mu = new Mutex();
  return *mu;
}

std::set<pid_t>& Owned() ABSL_EXCLUSIVE_LOCKS_REQUIRED(RegistryMutex()) {
  static std::set<pid_t>* owned = new std::set<pid_t>();
  return *owned;
}

// /proc/<pid>/stat, or "" when it cannot be read. Plain read(2): a process
// may end between open and read (ESRCH), which std::ifstream's buffer turns
// into an exception that would end the caller.
std::string ReadStat(const char* pid) {
  const int fd = open(("/proc/" + std::string(pid) + "/stat").c_str(),
                      O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buffer[1024];  // pid, comm (at most 64 bytes), then numbers
  ssize_t n;
  do {
    n = read(fd, buffer, sizeof(buffer));
  } while (n < 0 && errno == EINTR);
  close(fd);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

// This process's unregistered children in `scope`: each /proc/<pid>/stat
// whose ppid is us, with its state ('Z' for a zombie).
std::vector<std::pair<pid_t, char>> Adopted(AdoptedScope scope)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(RegistryMutex()) {
  std::vector<std::pair<pid_t, char>> children;
  const pid_t self = getpid();
  const pid_t own_group = getpgrp();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    const std::string stat = ReadStat(entry->d_name);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    char state = 0;
    int ppid = 0;
    int pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (ppid != self || Owned().count(pid) != 0) continue;
    if (scope == AdoptedScope::kOtherProcessGroups && pgrp == own_group) {
      continue;
    }
    children.emplace_back(pid, state);
  }
  closedir(proc);
  return children;
}

}  // namespace

absl::Status BecomeChildSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return absl::ErrnoToStatus(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  }
  return absl::OkStatus();
}

int ReapExitedAdopted(AdoptedScope scope) {
  MutexLock lock(&RegistryMutex());
  int reaped = 0;
  for (const auto& [pid, state] : Adopted(scope)) {
    if (state != 'Z') continue;
    if (waitpid(pid, nullptr, WNOHANG) == pid) ++reaped;
  }
  return reaped;
}

int KillAdopted(std::chrono::steady_clock::time_point deadline,
                AdoptedScope scope) {
  int killed = 0;
  for (;;) {
    std::vector<pid_t> adopted;
    {
      MutexLock lock(&RegistryMutex());
      for (const auto& [pid, state] : Adopted(scope)) {
        if (state != 'Z') kill(pid, SIGKILL);
        adopted.push_back(pid);
      }
      for (pid_t pid : adopted) {
        if (waitpid(pid, nullptr, WNOHANG) == pid) ++killed;
      }
    }
    if (adopted.empty() || std::chrono::steady_clock::now() >= deadline) {
      return killed;
    }
    // Their children were adopted in turn, or a SIGKILL has not landed yet.
    std::this_thread::sleep_for(kRoundWait);
  }
}

namespace process_internal {

pid_t ForkRegistered(const std::function<pid_t()>& fork_child) {
  MutexLock lock(&RegistryMutex());
  const pid_t pid = fork_child();
  if (pid > 0) Owned().insert(pid);
  return pid;
}

void Unregister(pid_t pid) {
  MutexLock lock(&RegistryMutex());
  Owned().erase(pid);
}

}  // namespace process_internal
}  // namespace aggregator
