// The processes the bench measures: example learners and aggregatord, each a
// real child process (lib/process/subprocess.h), plus what the bench reads
// about them
// (/proc memory figures, log lines, health) and the aggregator.yaml it writes.
//
// Every wait takes a deadline. Ownership: each object owns its child; its
// destructor stops the child (SIGTERM, then SIGKILL after a grace period) and
// reaps it, so an error anywhere in the bench leaves no process behind.
// Thread-safety: each object is used by the bench's main thread only
// (DaemonProcess also runs an internal reader thread, see there).
#ifndef TOOLS_BENCH_BENCH_PROCESSES_H_
#define TOOLS_BENCH_BENCH_PROCESSES_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/mutex.h"
#include "lib/process/subprocess.h"

namespace aggregator {

using BenchClock = std::chrono::steady_clock;

// Extra environment for the daemon and the learners (allocator choices:
// LD_PRELOAD, GLIBC_TUNABLES, MALLOC_CONF ...).
struct ChildEnv {
  // Nothing added: the allocator the binaries link (tcmalloc).
  std::string label = "as built (tcmalloc)";
  std::vector<std::pair<std::string, std::string>> vars;
};

// One process serving the Learner API: an example_learner, or the
// minimal_relay over some.
class LearnerProcess {
 public:
  // Spawns `binary --listen HOST:0 --batch-size N`; does not wait.
  static absl::StatusOr<std::unique_ptr<LearnerProcess>> Spawn(
      const std::string& binary, int64_t batch_size, const ChildEnv& env,
      const std::string& host = "127.0.0.1");
  // Spawns `argv`, a program that prints "<name> listening on ADDR".
  static absl::StatusOr<std::unique_ptr<LearnerProcess>> SpawnServer(
      std::vector<std::string> argv, const ChildEnv& env, std::string name);
  ~LearnerProcess();

  // Reads its "<name> listening on ADDR" line.
  absl::Status WaitListening(BenchClock::time_point deadline);

  const std::string& address() const { return address_; }
  pid_t pid() const { return process_->pid(); }
  Subprocess& process() { return *process_; }

 private:
  LearnerProcess(std::unique_ptr<Subprocess> process, std::string name)
      : process_(std::move(process)), name_(std::move(name)) {}

  // Learners print one line and then (barring errors) nothing, so their pipes
  // never fill and need no reader thread.
  std::unique_ptr<Subprocess> process_;
  const std::string name_;
  std::string address_;
};

// N learners started together (their start-ups overlap) and stopped together.
class LearnerSet {
 public:
  LearnerSet() = default;
  ~LearnerSet() { StopAll(); }
  LearnerSet(LearnerSet&&) = default;
  LearnerSet& operator=(LearnerSet&&) = default;

  static absl::StatusOr<LearnerSet> Start(
      const std::string& binary, int count, int64_t batch_size,
      const ChildEnv& env, BenchClock::time_point deadline,
      const std::string& host = "127.0.0.1");

  size_t size() const { return learners_.size(); }
  LearnerProcess& operator[](size_t i) { return *learners_[i]; }
  // The addresses of the first `count` learners.
  std::vector<std::string> Addresses(size_t count) const;
  // SIGTERM to all, then wait for all (up to 5 s), then SIGKILL stragglers.
  void StopAll();

 private:
  std::vector<std::unique_ptr<LearnerProcess>> learners_;
};

// What aggregator.yaml the bench runs: the learners, min_learners = all of
// them, fast reconnect backoff, message limit 1 GiB, logging at info (the bench
// reads the "listening" and "serving" lines).
std::string BenchConfigYaml(const std::vector<std::string>& learner_addresses);

// aggregatord, with a thread reading its stdout and stderr continuously: it
// logs through a blocking pipe, and a full pipe would stall it mid-call.
class DaemonProcess {
 public:
  struct Line {
    std::string text;
    BenchClock::time_point arrived;
  };

  // Spawns `binary --config config_path --listen LISTEN`. spawned() is
  // taken just before the fork.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Spawn(
      const std::string& binary, const std::string& config_path,
      const ChildEnv& env, const std::string& listen = "127.0.0.1:0");
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  BenchClock::time_point spawned() const { return spawned_; }

  // The first line (stdout or stderr, in arrival order) containing `needle`,
  // including lines that arrived before the call.
  absl::StatusOr<Line> WaitForLine(const std::string& needle,
                                   BenchClock::time_point deadline);
  struct Listening {
    std::string address;
    BenchClock::time_point arrived;  // when the bench read the line
  };
  // Waits for "aggregatord listening on ADDR ...".
  absl::StatusOr<Listening> WaitListening(BenchClock::time_point deadline);
  // Then waits for "admin on ADDR ..." (admin.listen set); returns ADDR.
  absl::StatusOr<std::string> WaitAdmin(BenchClock::time_point deadline);
  // Watches grpc.health.v1 (a server stream: no polling interval to add
  // latency) until the server reports SERVING; returns when it arrived.
  absl::StatusOr<BenchClock::time_point> WaitServing(
      const std::string& address, BenchClock::time_point deadline);

  // SIGTERM, then waits for the exit; returns the time from the signal to the
  // exit being observed. Fails if the daemon does not exit by `deadline` or
  // exits non-zero.
  absl::StatusOr<std::chrono::nanoseconds> Terminate(
      BenchClock::time_point deadline);

  // Lines logged at warn level or above so far.
  int warnings() const;
  // The last lines read (for error messages).
  std::string Tail(size_t lines) const;

 private:
  DaemonProcess() = default;
  void ReadOutput();

  std::unique_ptr<Subprocess> process_;
  pid_t pid_ = -1;
  BenchClock::time_point spawned_;
  int stdout_fd_ = -1;  // owned by process_
  int stderr_fd_ = -1;  // owned by process_
  int wake_fd_ = -1;    // eventfd: tells the reader to finish
  std::thread reader_;

  mutable Mutex mu_;
  std::vector<Line> lines_ ABSL_GUARDED_BY(mu_);
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
};

// A field of /proc/<pid>/status in KiB ("VmHWM", "VmRSS").
absl::StatusOr<int64_t> ProcStatusKiB(pid_t pid, const std::string& field);
// Resets the peak resident set size (VmHWM) to the current RSS
// (`echo 5 > /proc/<pid>/clear_refs`, Linux 4.0+).
absl::Status ResetPeakRss(pid_t pid);

// Milliseconds since midnight of an aggregatord log line
// ("2024-05-01T12:34:56.789 info ..."), or nullopt for another format.
std::optional<double> LogTimeOfDayMs(const std::string& line);

// A directory under $TMPDIR (or /tmp), removed with its files on destruction.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create();
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name; returns the full path.
  absl::StatusOr<std::string> Write(const std::string& name,
                                    const std::string& content) const;

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace aggregator

#endif  // TOOLS_BENCH_BENCH_PROCESSES_H_
