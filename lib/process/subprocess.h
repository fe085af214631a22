// Subprocess: one child process started with fork/exec, and everything needed
// to supervise it without ever blocking forever: waiting with a deadline
// (its pidfd, which callers may poll too), signalling it or its whole process
// group, one stop escalation (SIGTERM to the group, SIGKILL at a deadline),
// reading its output line by line with a deadline. The process core under both
// supervisors (lib/supervisor, lib/workers).
//
// Every child is forked by one long-lived spawner thread of the process:
// PR_SET_PDEATHSIG fires when the *thread* that forked a child exits, so a
// child forked by a caller's short-lived thread would die with that thread.
// Forked there, a die_with_parent child dies with the process, even when the
// process is SIGKILLed.
//
// Thread-safety: a Subprocess is used by one thread at a time. Ownership: the
// object owns the child; its destructor SIGKILLs the process group (if still
// running) and reaps the child, so no zombie and no orphan outlives it.
#ifndef LIB_PROCESS_SUBPROCESS_H_
#define LIB_PROCESS_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace aggregator {

// The argument (argv[1]) that makes a guard program run RunProcessGuard
// (lib/process/process_guard.h).
inline constexpr char kProcessGuardFlag[] = "--process-guard";

struct SubprocessOptions {
  // argv[0] is looked up on PATH when it has no '/'. Must not be empty.
  std::vector<std::string> argv;
  // Added to (or replacing entries of) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Working directory; empty keeps the parent's.
  std::string cwd;
  // The child leads a new process group, so a signal can reach its descendants.
  bool new_process_group = true;
  // PR_SET_PDEATHSIG(SIGKILL): the child dies with this process, even after
  // its SIGKILL.
  bool die_with_parent = true;
  // Parent fds to hand to the child at the given child fd numbers
  // ({parent_fd, child_fd}); every other fd above 2 is closed in the child.
  std::vector<std::pair<int, int>> fds;
  // stdout and stderr go to pipes the parent reads (stdout_fd(), stderr_fd());
  // otherwise they are inherited.
  bool capture_output = true;
  // When set: a program that runs RunProcessGuard (lib/process/process_guard.h)
  // when given `--process-guard`, started in the child's place to start argv
  // and make sure no descendant outlives the child. pid() is then the
  // guard's; its exit status is the child's; Start still fails, naming the
  // program, when argv cannot be executed.
  std::string guard_program;
};

// How a child ended.
struct ExitStatus {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the terminating signal, or 0
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string ToString() const;  // "exit code 3", "killed by SIGKILL"
};

class Subprocess {
 public:
  // Forks and execs. Fails (naming argv[0] and the errno text) when the program
  // cannot be executed: exec failures are reported here, not as a mysterious
  // exit.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const SubprocessOptions& options);

  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Readable once the child has exited (poll it with the output pipes); owned
  // by this object.
  int pidfd() const { return pidfd_; }

  // Waits until the child exits or the deadline passes; reaps it. Returns
  // DEADLINE_EXCEEDED (child still running) on timeout. After the first success
  // every call returns the same ExitStatus at once.
  absl::StatusOr<ExitStatus> Wait(
      std::chrono::steady_clock::time_point deadline);
  // The exit status if the child has exited (reaping it), without blocking.
  std::optional<ExitStatus> Poll();
  bool running() { return !Poll().has_value(); }

  // Sends a signal to the child (group = false) or to its process group.
  // A child that already exited is not an error.
  absl::Status Signal(int signo, bool group = false);
  // The stop escalation, for callers that wait on their own (poll loops, an
  // injected clock). BeginStop sends SIGTERM to the group (and the child
  // itself, in case it left it) and makes SIGKILL due at `kill_at`; again
  // while stopping, it only keeps the earlier deadline. EnforceStop sends the
  // SIGKILL once `now` has reached it, and says whether it did just now.
  // Kill sends it at once.
  using TimePoint = std::chrono::steady_clock::time_point;
  void BeginStop(TimePoint kill_at);
  bool EnforceStop(TimePoint now);
  void Kill();
  bool stopping() const { return kill_at_.has_value(); }
  bool killed() const { return killed_; }
  // When SIGKILL is due: set while stopping and not yet killed.
  std::optional<TimePoint> kill_due() const;

  // BeginStop, wait up to `grace`, then Kill and reap: the blocking form.
  ExitStatus Stop(std::chrono::milliseconds grace);

  // The read ends of the captured stdout / stderr pipes (-1 when not captured).
  // Non-blocking, close-on-exec.
  int stdout_fd() const { return stdout_fd_; }
  int stderr_fd() const { return stderr_fd_; }
  // Reads one line (without its '\n') from stdout, or stderr when from_stderr.
  // DEADLINE_EXCEEDED on timeout, OUT_OF_RANGE at end of file (a last line
  // without
  // '\n' is returned first).
  absl::StatusOr<std::string> ReadLine(
      std::chrono::steady_clock::time_point deadline, bool from_stderr = false);

 private:
  Subprocess() = default;
  // Start's work, on the spawner thread.
  static absl::StatusOr<std::unique_ptr<Subprocess>> StartOnThisThread(
      const SubprocessOptions& options);
  // Start through options.guard_program.
  static absl::StatusOr<std::unique_ptr<Subprocess>> StartGuarded(
      const SubprocessOptions& options);

  // Caches the status and notes whether the process group has emptied.
  void Reaped(const ExitStatus& status);
  // SIGTERM/SIGKILL for Stop and the destructor: the group while it may have
  // members, and the child while it is unreaped.
  void SignalGroupOrChild(int signo);

  std::string name_;  // argv[0], for error messages
  pid_t pid_ = -1;
  bool own_group_ = false;    // the child leads process group pid_
  bool group_alive_ = false;  // and that group may still have members
  int pidfd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string stdout_buffer_;
  std::string stderr_buffer_;
  bool stdout_eof_ = false;
  bool stderr_eof_ = false;
  std::optional<ExitStatus> exit_status_;
  std::optional<TimePoint> kill_at_;  // set by BeginStop
  bool killed_ = false;               // SIGKILL sent
};

}  // namespace aggregator

#endif  // LIB_PROCESS_SUBPROCESS_H_
