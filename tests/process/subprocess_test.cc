// Subprocess against real children (/bin/sh scripts): exit reporting, exec
// failures, environment, cwd, output capture, deadlines, group kills, fd
// passing, signal state and reaping. Every wait has a deadline; nothing sleeps
// to sync.
#include "lib/process/subprocess.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "lib/process/adopted.h"
#include "tests/testing/process_helpers.h"
// glibc 2.36's <sys/pidfd.h> lacks extern "C" (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Generous bound for anything that should happen at once on a loaded machine.
constexpr seconds kLongWait(10);

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return options;
}

std::unique_ptr<Subprocess> StartOrDie(const SubprocessOptions& options) {
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(options);
  INFO(process.status().ToString());
  REQUIRE(process.ok());
  return std::move(*process);
}

std::string ReadLineOrDie(Subprocess& process, bool from_stderr = false) {
  absl::StatusOr<std::string> line =
      process.ReadLine(Steady::now() + kLongWait, from_stderr);
  INFO(line.status().ToString());
  REQUIRE(line.ok());
  return *line;
}

ExitStatus WaitOrDie(Subprocess& process) {
  absl::StatusOr<ExitStatus> status = process.Wait(Steady::now() + kLongWait);
  INFO(status.status().ToString());
  REQUIRE(status.ok());
  return *status;
}

// Reads everything from `fd` until EOF, within kLongWait.
std::string ReadAll(int fd) {
  const Steady::time_point deadline = Steady::now() + kLongWait;
  std::string data;
  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    REQUIRE(left.count() > 0);
    REQUIRE(poll(&pfd, 1, static_cast<int>(left.count())) == 1);
    char chunk[256];
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    REQUIRE(n >= 0);
    if (n == 0) return data;
    data.append(chunk, n);
  }
}

TEST_CASE("Subprocess reports exit codes") {
  auto process = StartOrDie(Shell("exit 3"));
  const ExitStatus status = WaitOrDie(*process);
  CHECK(status.exit_code == 3);
  CHECK(status.signal == 0);
  CHECK_FALSE(status.ok());
  CHECK(status.ToString() == "exit code 3");
  // Cached: the same answer again, without blocking.
  REQUIRE(process->Poll().has_value());
  CHECK(process->Poll()->exit_code == 3);
  CHECK(WaitOrDie(*process).exit_code == 3);
  CHECK_FALSE(process->running());

  auto clean = StartOrDie(Shell("exit 0"));
  CHECK(WaitOrDie(*clean).ok());
}

TEST_CASE("Subprocess reports the terminating signal") {
  auto process = StartOrDie(Shell("kill -KILL $$"));
  const ExitStatus status = WaitOrDie(*process);
  CHECK(status.signal == SIGKILL);
  CHECK(status.ToString() == "killed by SIGKILL");
  CHECK((ExitStatus{-1, SIGTERM}).ToString() == "killed by SIGTERM");
}

TEST_CASE("Start reports exec failures with the program and the reason") {
  SubprocessOptions missing;
  missing.argv = {"nosuchprog-subprocess-test", "arg"};
  auto result = Subprocess::Start(missing);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(result.status().message()) ==
        "cannot execute 'nosuchprog-subprocess-test': No such file or "
        "directory");

  SubprocessOptions not_executable;
  not_executable.argv = {"/etc/passwd"};
  result = Subprocess::Start(not_executable);
  REQUIRE_FALSE(result.ok());
  CHECK(std::string(result.status().message()) ==
        "cannot execute '/etc/passwd': Permission denied");

  SubprocessOptions empty;
  CHECK(Subprocess::Start(empty).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Start looks a bare program name up on PATH") {
  SubprocessOptions options;
  options.argv = {"echo", "found"};
  auto process = StartOrDie(options);
  CHECK(ReadLineOrDie(*process) == "found");
  CHECK(WaitOrDie(*process).ok());
}

TEST_CASE("Start runs an executable file without #! through /bin/sh") {
  const std::string dir = testing::TempDir();
  const std::string script = dir + "/script";
  {
    std::ofstream out(script);
    out << "echo \"from script $1\"\n";
  }
  REQUIRE(chmod(script.c_str(), 0755) == 0);
  SubprocessOptions options;
  options.argv = {"script", "arg"};
  options.env = {{"PATH", "/nonexistent-subprocess-test-dir:" + dir}};
  auto process = StartOrDie(options);
  CHECK(ReadLineOrDie(*process) == "from script arg");
  CHECK(WaitOrDie(*process).ok());
  unlink(script.c_str());
  rmdir(dir.c_str());
}

TEST_CASE(
    "The child gets the parent's environment with additions and overrides") {
  REQUIRE(setenv("SUBPROCESS_TEST_KEPT", "kept", 1) == 0);
  REQUIRE(setenv("SUBPROCESS_TEST_CHANGED", "parent", 1) == 0);
  SubprocessOptions options = Shell(
      "echo \"$SUBPROCESS_TEST_KEPT $SUBPROCESS_TEST_CHANGED "
      "$SUBPROCESS_TEST_ADDED\"");
  options.env = {{"SUBPROCESS_TEST_CHANGED", "child"},
                 {"SUBPROCESS_TEST_ADDED", "added"}};
  auto process = StartOrDie(options);
  // The raw environment too: an override replaces the entry rather than
  // following it, where which duplicate wins would depend on the program.
  options.argv = {"env"};
  auto env = StartOrDie(options);
  unsetenv("SUBPROCESS_TEST_KEPT");
  unsetenv("SUBPROCESS_TEST_CHANGED");

  CHECK(ReadLineOrDie(*process) == "kept child added");
  CHECK(WaitOrDie(*process).ok());
  std::vector<std::string> changed;
  for (;;) {
    absl::StatusOr<std::string> line = env->ReadLine(Steady::now() + kLongWait);
    if (!line.ok()) {
      CHECK(line.status().code() == absl::StatusCode::kOutOfRange);
      break;
    }
    if (line->rfind("SUBPROCESS_TEST_CHANGED=", 0) == 0)
      changed.push_back(*line);
  }
  CHECK(changed == std::vector<std::string>{"SUBPROCESS_TEST_CHANGED=child"});
  CHECK(WaitOrDie(*env).ok());
}

TEST_CASE("The child runs in the given working directory") {
  // A fresh directory, so it cannot be the one the test runs in.
  const std::string dir = testing::TempDir();
  SubprocessOptions options = Shell("pwd -P");
  options.cwd = dir;
  auto process = StartOrDie(options);
  CHECK(ReadLineOrDie(*process) == dir);
  CHECK(WaitOrDie(*process).ok());
  rmdir(dir.c_str());

  options.cwd = "/nonexistent-subprocess-test-dir";
  auto result = Subprocess::Start(options);
  REQUIRE_FALSE(result.ok());
  CHECK(std::string(result.status().message()) ==
        "cannot change directory to '/nonexistent-subprocess-test-dir' for "
        "'/bin/sh': No such file or directory");
}

TEST_CASE(
    "ReadLine returns lines, then a partial last line, then OUT_OF_RANGE") {
  auto process = StartOrDie(Shell("printf 'one\\ntwo\\n\\nthree'"));
  CHECK(ReadLineOrDie(*process) == "one");
  CHECK(ReadLineOrDie(*process) == "two");
  CHECK(ReadLineOrDie(*process) == "");
  CHECK(ReadLineOrDie(*process) == "three");
  auto end = process->ReadLine(Steady::now() + kLongWait);
  CHECK(end.status().code() == absl::StatusCode::kOutOfRange);
  end = process->ReadLine(Steady::now() + kLongWait);
  CHECK(end.status().code() == absl::StatusCode::kOutOfRange);
  CHECK(WaitOrDie(*process).ok());
}

TEST_CASE("ReadLine gives up at its deadline on a silent child") {
  auto process = StartOrDie(Shell("echo started; exec sleep 1000"));
  REQUIRE(ReadLineOrDie(*process) == "started");
  const Steady::time_point start = Steady::now();
  auto line = process->ReadLine(start + milliseconds(300));
  const Steady::duration elapsed = Steady::now() - start;
  CHECK(line.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(elapsed >= milliseconds(300));
  CHECK(elapsed < milliseconds(1300));
  CHECK(process->Stop(seconds(5)).signal == SIGTERM);
}

TEST_CASE("ReadLine reads stderr separately from stdout") {
  auto process = StartOrDie(Shell("echo to-stderr >&2; echo to-stdout"));
  CHECK(ReadLineOrDie(*process, /*from_stderr=*/true) == "to-stderr");
  CHECK(ReadLineOrDie(*process) == "to-stdout");
  CHECK(process->ReadLine(Steady::now() + kLongWait, true).status().code() ==
        absl::StatusCode::kOutOfRange);
  CHECK(WaitOrDie(*process).ok());
}

TEST_CASE("Wait returns DEADLINE_EXCEEDED promptly on a running child") {
  auto process = StartOrDie(Shell("exec sleep 1000"));
  CHECK(process->running());
  const Steady::time_point start = Steady::now();
  auto status = process->Wait(start + milliseconds(300));
  const Steady::duration elapsed = Steady::now() - start;
  CHECK(status.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(elapsed >= milliseconds(300));
  CHECK(elapsed < milliseconds(1300));
  CHECK(process->running());

  const ExitStatus stopped = process->Stop(seconds(5));
  CHECK(stopped.ToString() == "killed by SIGTERM");
  CHECK_FALSE(process->running());
}

TEST_CASE("Stop SIGKILLs a child that ignores SIGTERM after the grace period") {
  auto process = StartOrDie(
      Shell("trap '' TERM; echo ready; while :; do sleep 0.1; done"));
  REQUIRE(ReadLineOrDie(*process) == "ready");
  const milliseconds grace(500);
  const Steady::time_point start = Steady::now();
  const ExitStatus status = process->Stop(grace);
  const Steady::duration elapsed = Steady::now() - start;
  CHECK(status.ToString() == "killed by SIGKILL");
  CHECK(elapsed >= grace);
  CHECK(elapsed < grace + seconds(1));
}

TEST_CASE("Stop kills the child's descendants") {
  auto process = StartOrDie(Shell("sleep 1000 & echo $!; wait"));
  const pid_t grandchild = std::stoi(ReadLineOrDie(*process));
  REQUIRE(grandchild > 0);
  REQUIRE(kill(grandchild, 0) == 0);
  process->Stop(seconds(5));
  CHECK(testing::ExitsWithin(grandchild, kLongWait));
}

TEST_CASE("Stop and the destructor kill descendants after the leader exited") {
  // The leader exits at once; its background child stays in the group.
  const char* script = "sleep 1000 & echo $!";
  SECTION("Stop") {
    auto process = StartOrDie(Shell(script));
    const pid_t grandchild = std::stoi(ReadLineOrDie(*process));
    REQUIRE(WaitOrDie(*process).ok());
    REQUIRE(kill(grandchild, 0) == 0);
    CHECK(process->Stop(seconds(5)).ok());
    CHECK(testing::ExitsWithin(grandchild, kLongWait));
  }
  SECTION("destructor") {
    auto process = StartOrDie(Shell(script));
    const pid_t grandchild = std::stoi(ReadLineOrDie(*process));
    REQUIRE(WaitOrDie(*process).ok());
    REQUIRE(kill(grandchild, 0) == 0);
    process.reset();
    CHECK(testing::ExitsWithin(grandchild, kLongWait));
  }
}

TEST_CASE("Signal reaches the child or its whole group") {
  auto process = StartOrDie(Shell("sleep 1000 & echo $!; wait"));
  const pid_t grandchild = std::stoi(ReadLineOrDie(*process));
  REQUIRE(process->Signal(SIGUSR1, /*group=*/true).ok());
  CHECK(WaitOrDie(*process).signal == SIGUSR1);
  CHECK(testing::ExitsWithin(grandchild, kLongWait));
  // Signalling a child that has exited is not an error.
  CHECK(process->Signal(SIGTERM).ok());
  CHECK(process->Signal(SIGTERM, /*group=*/true).ok());

  SubprocessOptions shared = Shell("exec sleep 1000");
  shared.new_process_group = false;
  auto in_our_group = StartOrDie(shared);
  CHECK(getpgid(in_our_group->pid()) == getpgrp());
  CHECK(in_our_group->Signal(SIGTERM, /*group=*/true).code() ==
        absl::StatusCode::kFailedPrecondition);
  REQUIRE(in_our_group->Signal(SIGTERM).ok());
  CHECK(WaitOrDie(*in_our_group).signal == SIGTERM);
}

TEST_CASE("Mapped fds reach the child at their target numbers") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  SubprocessOptions options = Shell("echo hi >&3");
  options.fds = {{sv[1], 3}};
  auto process = StartOrDie(options);
  close(sv[1]);
  CHECK(ReadAll(sv[0]) == "hi\n");
  close(sv[0]);
  CHECK(WaitOrDie(*process).ok());
}

TEST_CASE("Mapped fds may swap numbers") {
  // Two pipes passed as each other's fd numbers: a naive dup2 loop would
  // clobber the second source before using it.
  int a[2], b[2];
  REQUIRE(pipe2(a, O_CLOEXEC) == 0);
  REQUIRE(pipe2(b, O_CLOEXEC) == 0);
  // dash only redirects single-digit fds, so write through /proc/self/fd.
  SubprocessOptions options =
      Shell("echo to-a > /proc/self/fd/" + std::to_string(b[1]) +
            "; echo to-b > /proc/self/fd/" + std::to_string(a[1]));
  options.fds = {{a[1], b[1]}, {b[1], a[1]}};
  auto process = StartOrDie(options);
  close(a[1]);
  close(b[1]);
  CHECK(ReadAll(a[0]) == "to-a\n");
  CHECK(ReadAll(b[0]) == "to-b\n");
  close(a[0]);
  close(b[0]);
  CHECK(WaitOrDie(*process).ok());
}

TEST_CASE("Fds that are not mapped are not inherited") {
  int leaked[2];
  REQUIRE(pipe(leaked) == 0);  // deliberately without O_CLOEXEC
  int passed[2];
  REQUIRE(pipe2(passed, O_CLOEXEC) == 0);
  const std::string leak = std::to_string(leaked[1]);
  SubprocessOptions options = Shell(
      "for fd in 3 " + leak +
      "; do if [ -e /proc/self/fd/$fd ]; then echo open; else echo closed; "
      "fi; done");
  options.fds = {{passed[1], 3}};
  auto process = StartOrDie(options);
  close(passed[1]);
  CHECK(ReadLineOrDie(*process) == "open");
  CHECK(ReadLineOrDie(*process) == "closed");
  CHECK(WaitOrDie(*process).ok());
  for (int fd : {leaked[0], leaked[1], passed[0]}) close(fd);
}

TEST_CASE(
    "The child starts with an empty signal mask and default dispositions") {
  // As in the daemon: SIGTERM blocked in this thread, SIGUSR1 ignored.
  sigset_t term, saved_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &term, &saved_mask) == 0);
  struct sigaction ignore = {}, saved_usr1 = {};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGUSR1, &ignore, &saved_usr1) == 0);

  SubprocessOptions options;
  options.argv = {"sleep", "1000"};
  auto result_term = Subprocess::Start(options);
  auto result_usr1 = Subprocess::Start(options);

  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  sigaction(SIGUSR1, &saved_usr1, nullptr);

  REQUIRE(result_term.ok());
  REQUIRE(result_usr1.ok());
  Subprocess& for_term = **result_term;
  Subprocess& for_usr1 = **result_usr1;
  REQUIRE(for_term.Signal(SIGTERM).ok());
  REQUIRE(for_usr1.Signal(SIGUSR1).ok());
  CHECK(WaitOrDie(for_term).signal == SIGTERM);
  CHECK(WaitOrDie(for_usr1).signal == SIGUSR1);
}

TEST_CASE("A child outlives the thread that started it") {
  // Every child is forked by the spawner thread, so PR_SET_PDEATHSIG ties it
  // to the process, not to the caller's thread.
  absl::StatusOr<std::unique_ptr<Subprocess>> result;
  std::thread([&] {
    result = Subprocess::Start(Shell("exec sleep 1000"));
  }).join();
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  CHECK((*result)->Wait(Steady::now() + milliseconds(200)).status().code() ==
        absl::StatusCode::kDeadlineExceeded);
  CHECK((*result)->Stop(seconds(5)).signal == SIGTERM);
}

TEST_CASE("die_with_parent kills the child when its parent process dies") {
  auto grandchild_of = [](bool die_with_parent) {
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    const pid_t parent = fork();
    REQUIRE(parent >= 0);
    if (parent == 0) {
      // The forked copy starts a child, reports its pid, and dies at once.
      SubprocessOptions options = Shell("exec sleep 1000");
      options.die_with_parent = die_with_parent;
      auto child = Subprocess::Start(options);
      const pid_t pid = child.ok() ? (*child)->pid() : -1;
      (void)!write(pipe_fds[1], &pid, sizeof(pid));
      _exit(0);  // no destructor: the child is left to the kernel's rules
    }
    close(pipe_fds[1]);
    pid_t pid = -1;
    REQUIRE(read(pipe_fds[0], &pid, sizeof(pid)) == sizeof(pid));
    close(pipe_fds[0]);
    REQUIRE(waitpid(parent, nullptr, 0) == parent);
    REQUIRE(pid > 0);
    return pid;
  };
  CHECK(testing::ExitsWithin(grandchild_of(true), kLongWait));
  // The control: without it the orphan lives on (until this test kills it).
  const pid_t orphan = grandchild_of(false);
  CHECK_FALSE(testing::ExitsWithin(orphan, milliseconds(200)));
  kill(orphan, SIGKILL);
  CHECK(testing::ExitsWithin(orphan, kLongWait));
}

TEST_CASE("The destructor kills and reaps a running child") {
  SubprocessOptions options = Shell("exec sleep 1000");
  SECTION("in its own process group") {}
  SECTION("in the parent's process group") {
    options.new_process_group = false;
  }
  auto process = StartOrDie(options);
  const pid_t pid = process->pid();
  process.reset();
  errno = 0;
  CHECK(waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("Output is inherited when not captured") {
  SubprocessOptions options = Shell("exit 0");
  options.capture_output = false;
  auto process = StartOrDie(options);
  CHECK(process->stdout_fd() == -1);
  CHECK(process->stderr_fd() == -1);
  CHECK(process->ReadLine(Steady::now()).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(WaitOrDie(*process).ok());
}

// The daemon kills its workers' orphans, not a child a library forked in its
// own process group: under TSan that was the symbolizer, and the daemon then
// died of SIGPIPE as it exited.
TEST_CASE("KillAdopted for the daemon spares children in its own group") {
  const pid_t own_group_child = fork();
  REQUIRE(own_group_child >= 0);
  if (own_group_child == 0) {
    pause();
    _exit(0);
  }
  const pid_t other_group_child = fork();
  REQUIRE(other_group_child >= 0);
  if (other_group_child == 0) {
    setpgid(0, 0);
    pause();
    _exit(0);
  }
  setpgid(other_group_child, other_group_child);  // whichever runs first

  CHECK(KillAdopted(Steady::now() + kLongWait,
                    AdoptedScope::kOtherProcessGroups) == 1);
  errno = 0;
  CHECK(waitpid(other_group_child, nullptr, WNOHANG) == -1);  // reaped
  CHECK(errno == ECHILD);
  CHECK(waitpid(own_group_child, nullptr, WNOHANG) == 0);  // still running
  CHECK(ReapExitedAdopted(AdoptedScope::kOtherProcessGroups) == 0);

  kill(own_group_child, SIGKILL);
  int status = 0;
  CHECK(waitpid(own_group_child, &status, 0) == own_group_child);
  CHECK(WIFSIGNALED(status));
}

}  // namespace
}  // namespace aggregator
