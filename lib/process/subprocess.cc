#include "lib/process/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
// glibc 2.36's <sys/pidfd.h> lacks extern "C" (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/mutex.h"
#include "lib/process/adopted.h"
#include "lib/process/child_exec.h"

namespace aggregator {
namespace {

using process_internal::BuildPlan;
using process_internal::ChildError;
using process_internal::ChildErrorToStatus;
using process_internal::ChildPlan;
using process_internal::RunChild;
using Steady = std::chrono::steady_clock;

// How long the destructor and Stop wait for a SIGKILLed child to be reaped.
constexpr std::chrono::seconds kKillWait(5);
// How long a process guard may take to start its child.
constexpr std::chrono::seconds kGuardStartTimeout(30);

// Closes its fd on scope exit unless released.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Milliseconds until `deadline` for poll(), rounded up so a wake-up is never
// early.
int PollTimeoutMs(Steady::time_point deadline) {
  const Steady::time_point now = Steady::now();
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
  return static_cast<int>(
      std::min<std::chrono::milliseconds::rep>(ms.count(), INT_MAX));
}

ExitStatus FromWaitStatus(int wstatus) {
  ExitStatus status;
  if (WIFSIGNALED(wstatus)) {
    status.signal = WTERMSIG(wstatus);
  } else {
    status.exit_code = WEXITSTATUS(wstatus);
  }
  return status;
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (signal == 0) return absl::StrCat("exit code ", exit_code);
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev == nullptr) return absl::StrCat("killed by signal ", signal);
  return absl::StrCat("killed by SIG", abbrev);
}

namespace {

// The one thread that forks every child (see the header). It lives as long as
// the process and never takes a signal.
class SpawnerThread {
 public:
  // The spawner of this process. A process forked without exec (a test, a
  // daemonising wrapper) has none of its parent's threads: it gets its own.
  static SpawnerThread& Get() {
    static Mutex mu;
    static SpawnerThread* spawner ABSL_GUARDED_BY(mu) = nullptr;
    MutexLock lock(&mu);
    if (spawner == nullptr || spawner->pid_ != getpid()) {
      spawner = new SpawnerThread();  // never destroyed
    }
    return *spawner;
  }

  // Runs `job` on the spawner thread and returns its result. Bounded by fork
  // and exec: Start returns once the child has exec'd or failed to.
  absl::StatusOr<std::unique_ptr<Subprocess>> Run(
      const std::function<absl::StatusOr<std::unique_ptr<Subprocess>>()>& job) {
    std::promise<absl::StatusOr<std::unique_ptr<Subprocess>>> promise;
    auto future = promise.get_future();
    {
      MutexLock lock(&mu_);
      jobs_.push_back([&] { promise.set_value(job()); });
    }
    return future.get();
  }

 private:
  SpawnerThread() {
    std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      std::function<void()> job;
      {
        MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<std::function<void()>>* jobs) {
              return !jobs->empty();
            },
            &jobs_));
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  const pid_t pid_ = getpid();
  Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const SubprocessOptions& options) {
  if (!options.guard_program.empty()) return StartGuarded(options);
  return SpawnerThread::Get().Run(
      [&options] { return StartOnThisThread(options); });
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::StartGuarded(
    const SubprocessOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("subprocess: argv is empty");
  }
  // The guard reports through this pipe why the child could not start, and
  // closes it once the child runs.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("report pipe for '", options.argv[0], "'"));
  }
  UniqueFd report_read(report[0]);
  UniqueFd report_write(report[1]);
  int report_target = 3;
  for (const auto& [source, target] : options.fds) {
    report_target = std::max(report_target, target + 1);
  }
  SubprocessOptions guarded = options;
  guarded.guard_program.clear();
  guarded.argv = {options.guard_program, kProcessGuardFlag,
                  absl::StrCat("--report-fd=", report_target)};
  for (const auto& [source, target] : options.fds) {
    guarded.argv.push_back(absl::StrCat("--keep-fd=", target));
  }
  guarded.argv.push_back("--");
  guarded.argv.insert(guarded.argv.end(), options.argv.begin(),
                      options.argv.end());
  guarded.fds.emplace_back(report_write.get(), report_target);
  absl::StatusOr<std::unique_ptr<Subprocess>> guard = Start(guarded);
  report_write.Reset();
  if (!guard.ok()) return guard.status();

  std::string message;
  const Steady::time_point deadline = Steady::now() + kGuardStartTimeout;
  for (;;) {
    pollfd pfd = {report_read.get(), POLLIN, 0};
    const int ready = poll(&pfd, 1, PollTimeoutMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the process guard for '", options.argv[0],
          "' did not start it within ", kGuardStartTimeout.count(), "s"));
    }
    char chunk[512];
    const ssize_t n = read(report_read.get(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    message.append(chunk, static_cast<size_t>(n));
  }
  if (message.empty()) return guard;
  (void)(*guard)->Wait(Steady::now() + kKillWait);
  // "<code>:<message>", as the guard's Report writes it.
  const size_t colon = message.find(':');
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(message).substr(0, colon), &code)) {
    return absl::UnknownError(message);
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      message.substr(colon + 1));
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::StartOnThisThread(
    const SubprocessOptions& options) {
  ChildPlan plan;
  if (absl::Status status = BuildPlan(options, plan); !status.ok()) {
    return status;
  }
  const std::string& name = options.argv[0];

  UniqueFd out_read, out_write, err_read, err_write;
  if (options.capture_output) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("stdout pipe for '", name, "'"));
    }
    out_read.Reset(out[0]);
    out_write.Reset(out[1]);
    if (pipe2(err, O_CLOEXEC) != 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("stderr pipe for '", name, "'"));
    }
    err_read.Reset(err[0]);
    err_write.Reset(err[1]);
    // Only the parent's ends: the child writes to blocking pipes.
    for (int fd : {out_read.get(), err_read.get()}) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    plan.fds.emplace_back(out_write.get(), 1);
    plan.fds.emplace_back(err_write.get(), 2);
    plan.fd_floor =
        std::max({plan.fd_floor, out_write.get() + 1, err_write.get() + 1});
  }
  plan.fds.insert(plan.fds.end(), options.fds.begin(), options.fds.end());
  plan.scratch.resize(plan.fds.size());

  // EOF on this CLOEXEC pipe means exec succeeded; otherwise the child writes a
  // ChildError. Its write end sits above every fd the child dup2s onto.
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("exec-error pipe for '", name, "'"));
  }
  UniqueFd error_read(error_pipe[0]);
  UniqueFd error_write(fcntl(error_pipe[1], F_DUPFD_CLOEXEC, plan.fd_floor));
  const int dup_errno = errno;
  close(error_pipe[1]);
  if (error_write.get() < 0) {
    return absl::ErrnoToStatus(
        dup_errno, absl::StrCat("exec-error pipe for '", name, "'"));
  }
  plan.error_fd = error_write.get();
  plan.fd_floor = error_write.get() + 1;

  // Signals stay blocked across fork so no handler of the daemon runs in the
  // child before it resets the dispositions.
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  // Registered as ours while forked, so an adopted-children scan never takes
  // it for an orphan (lib/process/adopted.h).
  int fork_errno = 0;
  const pid_t pid = process_internal::ForkRegistered([&] {
    const pid_t forked = fork();
    if (forked == 0) RunChild(plan);
    fork_errno = errno;
    return forked;
  });
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    return absl::ErrnoToStatus(fork_errno,
                               absl::StrCat("fork for '", name, "'"));
  }
  // Also from the parent, so a signal to the group right after Start cannot
  // miss the child; EACCES once the child has exec'd is expected and harmless.
  if (options.new_process_group) setpgid(pid, pid);
  error_write.Reset();
  out_write.Reset();
  err_write.Reset();

  ChildError report;
  size_t got = 0;
  while (got < sizeof(report)) {
    const ssize_t n =
        read(error_read.get(), reinterpret_cast<char*>(&report) + got,
             sizeof(report) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  if (got > 0) {
    // The child _exits right after reporting, so this wait is short.
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    process_internal::Unregister(pid);
    if (got < sizeof(report)) {
      return absl::InternalError(
          absl::StrCat("subprocess '", name, "': truncated exec-error report"));
    }
    return ChildErrorToStatus(report, options);
  }

  const int pidfd = pidfd_open(pid, 0);
  if (pidfd < 0) {
    const int error = errno;
    if (options.new_process_group) killpg(pid, SIGKILL);
    kill(pid, SIGKILL);
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    process_internal::Unregister(pid);
    return absl::ErrnoToStatus(
        error, absl::StrCat("pidfd_open for '", name, "' (pid ", pid, ")"));
  }

  std::unique_ptr<Subprocess> process(new Subprocess());
  process->name_ = name;
  process->pid_ = pid;
  process->pidfd_ = pidfd;
  process->own_group_ = options.new_process_group;
  process->group_alive_ = options.new_process_group;
  process->stdout_fd_ = out_read.Release();
  process->stderr_fd_ = err_read.Release();
  return process;
}

Subprocess::~Subprocess() {
  if (!exit_status_.has_value()) {
    SignalGroupOrChild(SIGKILL);
    (void)Wait(Steady::now() + kKillWait);
  }
  // Descendants may still hold the group after the leader is gone.
  if (group_alive_) killpg(pid_, SIGKILL);
  for (int fd : {pidfd_, stdout_fd_, stderr_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void Subprocess::Reaped(const ExitStatus& status) {
  exit_status_ = status;
  process_internal::Unregister(pid_);
  // Once the group is empty it never gains members again, while its number
  // could be reused: never signal it after that.
  if (group_alive_ && killpg(pid_, 0) != 0 && errno == ESRCH) {
    group_alive_ = false;
  }
}

std::optional<ExitStatus> Subprocess::Poll() {
  if (exit_status_.has_value()) return exit_status_;
  int wstatus;
  pid_t result;
  do {
    result = waitpid(pid_, &wstatus, WNOHANG);
  } while (result < 0 && errno == EINTR);
  if (result == pid_) {
    Reaped(FromWaitStatus(wstatus));
  } else if (result < 0 && errno == ECHILD) {
    // Reaped behind our back (SIGCHLD set to SIG_IGN, or a waitpid(-1)
    // elsewhere): gone, with the status lost.
    Reaped(ExitStatus{});
  }
  return exit_status_;
}

absl::StatusOr<ExitStatus> Subprocess::Wait(Steady::time_point deadline) {
  for (;;) {
    if (std::optional<ExitStatus> status = Poll()) return *status;
    const int timeout = PollTimeoutMs(deadline);
    if (timeout == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "subprocess '", name_, "' (pid ", pid_, ") is still running"));
    }
    struct pollfd pfd = {pidfd_, POLLIN, 0};
    if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
      return absl::ErrnoToStatus(
          errno,
          absl::StrCat("poll on the pidfd of '", name_, "' (pid ", pid_, ")"));
    }
  }
}

void Subprocess::SignalGroupOrChild(int signo) {
  if (group_alive_) killpg(pid_, signo);
  // Also the child itself, in case it moved to another group or session.
  if (!exit_status_.has_value()) kill(pid_, signo);
}

absl::Status Subprocess::Signal(int signo, bool group) {
  int result = 0;
  if (group) {
    if (!own_group_) {
      return absl::FailedPreconditionError(
          absl::StrCat("subprocess '", name_, "' (pid ", pid_,
                       ") has no process group of its own"));
    }
    if (!group_alive_) return absl::OkStatus();
    result = killpg(pid_, signo);
  } else {
    // After reaping, the pid may belong to someone else.
    if (exit_status_.has_value()) return absl::OkStatus();
    result = kill(pid_, signo);
  }
  if (result != 0 && errno != ESRCH) {
    return absl::ErrnoToStatus(
        errno,
        absl::StrCat("signal ", signo, " to ", group ? "the group of " : "",
                     "'", name_, "' (pid ", pid_, ")"));
  }
  return absl::OkStatus();
}

void Subprocess::BeginStop(TimePoint kill_at) {
  if (kill_at_.has_value()) return;
  kill_at_ = kill_at;
  SignalGroupOrChild(SIGTERM);
}

bool Subprocess::EnforceStop(TimePoint now) {
  if (!kill_at_.has_value() || killed_ || now < *kill_at_) return false;
  Kill();
  return true;
}

void Subprocess::Kill() {
  if (!kill_at_.has_value()) kill_at_ = Steady::now();
  killed_ = true;
  SignalGroupOrChild(SIGKILL);
}

std::optional<Subprocess::TimePoint> Subprocess::kill_due() const {
  if (!kill_at_.has_value() || killed_) return std::nullopt;
  return kill_at_;
}

ExitStatus Subprocess::Stop(std::chrono::milliseconds grace) {
  if (!exit_status_.has_value()) {
    BeginStop(Steady::now() + grace);
    if (!Wait(*kill_at_).ok()) {
      Kill();
      (void)Wait(Steady::now() + kKillWait);
    }
  }
  // Descendants may outlive the leader in its group: they go too. Once the
  // leader is reaped that group is finished, so its number is never signalled
  // again.
  if (group_alive_) {
    killpg(pid_, SIGKILL);
    if (exit_status_.has_value()) group_alive_ = false;
  }
  // Still unreaped only if SIGKILL did not take effect within kKillWait (a task
  // stuck in the kernel); the destructor tries once more.
  return exit_status_.value_or(ExitStatus{});
}

absl::StatusOr<std::string> Subprocess::ReadLine(Steady::time_point deadline,
                                                 bool from_stderr) {
  const int fd = from_stderr ? stderr_fd_ : stdout_fd_;
  std::string& buffer = from_stderr ? stderr_buffer_ : stdout_buffer_;
  bool& eof = from_stderr ? stderr_eof_ : stdout_eof_;
  const char* stream = from_stderr ? "stderr" : "stdout";
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", stream, " of subprocess '", name_, "' is not captured"));
  }
  for (;;) {
    const size_t newline = buffer.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      return line;
    }
    if (eof) {
      if (!buffer.empty()) return std::exchange(buffer, std::string());
      return absl::OutOfRangeError(
          absl::StrCat("end of the ", stream, " of subprocess '", name_, "'"));
    }
    char chunk[4096];
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      buffer.append(chunk, n);
      continue;
    }
    if (n == 0) {
      eof = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("read from the ", stream, " of subprocess '",
                              name_, "'"));
    }
    const int timeout = PollTimeoutMs(deadline);
    if (timeout == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no complete line on the ", stream, " of subprocess '",
                       name_, "' (pid ", pid_, ") before the deadline"));
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
      return absl::ErrnoToStatus(
          errno,
          absl::StrCat("poll on the ", stream, " of subprocess '", name_, "'"));
    }
  }
}

}  // namespace aggregator
