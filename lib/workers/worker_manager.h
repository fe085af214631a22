// WorkerManager: runs the replicas of the `workers:` specs (lib/config/config.h) as
// child processes and keeps them running by their restart policy.
//
// Each replica is one Subprocess: its own process group, PR_SET_PDEATHSIG so it
// dies with the daemon, stdout and stderr captured and logged line by line
// through spdlog at info level as "[<name>-<index>] <line>" (both streams at
// info: programs print diagnostics to stderr, so the stream says nothing about
// severity). When a replica's main process exits, whatever is left of its
// process group is SIGKILLed, so a restart never races its own leftovers.
//
// Restarts follow the spec: `restart` (always / on-failure / never), a delay of
// backoff.initial * multiplier^n (capped at backoff.max; n counts the failed
// starts since the last start that ran min_uptime), and OTP-style intensity: a
// replica that would need more than max_restarts restarts within
// restart_window is FAILED with its last error and not restarted. An exit
// sooner than min_uptime is a failed start, whatever its exit code.
//
// Threading: one manager thread owns every child. It forks them (so
// PR_SET_PDEATHSIG, which fires when the forking *thread* exits, is tied to the
// manager's lifetime, not to a caller's thread), reaps them (no zombies), and
// sleeps in poll() on the children's pidfds and output pipes, an eventfd for
// commands, and the next due timer; it never busy-waits. Public methods may be
// called from any thread; they hand commands to the manager thread and read
// the state it publishes under mu_.
//
// Time: restart delays, min_uptime and stop_timeout are measured on an
// injected WorkerClock, so tests drive them exactly with FakeWorkerClock.
// Shutdown's deadline is real (steady_clock) time.
#ifndef LIB_WORKERS_WORKER_MANAGER_H_
#define LIB_WORKERS_WORKER_MANAGER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/process/subprocess.h"
#include "proto/admin.pb.h"

namespace aggregator {

// The time the worker manager's timers run on.
//
// Thread-safety: all methods may be called from any thread.
class WorkerClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~WorkerClock() = default;
  virtual TimePoint Now() const = 0;
  // How long, in real time, a waiter for `when` should sleep before looking at
  // the clock again. A fake clock answers "no timer needed": it calls its
  // wakers when it is advanced.
  virtual std::optional<std::chrono::milliseconds> RealDelayUntil(
      TimePoint when) const = 0;
  // `wake` is called (from the thread moving the clock) whenever the time
  // jumps; it must return quickly and not call the clock. Returns a token
  // for RemoveWaker, after which `wake` is never called again.
  virtual int AddWaker(std::function<void()> wake) = 0;
  virtual void RemoveWaker(int token) = 0;
};

// std::chrono::steady_clock. Never jumps, so it keeps no wakers.
WorkerClock& SteadyWorkerClock();

// A clock that only moves when told to, for tests.
class FakeWorkerClock : public WorkerClock {
 public:
  // Starts at an arbitrary fixed point.
  FakeWorkerClock();

  TimePoint Now() const override;
  std::optional<std::chrono::milliseconds> RealDelayUntil(
      TimePoint when) const override;
  int AddWaker(std::function<void()> wake) override;
  void RemoveWaker(int token) override;

  // Moves the time forward and wakes every waker.
  void Advance(std::chrono::milliseconds delta);

 private:
  mutable std::mutex mu_;
  TimePoint now_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::function<void()>> wakers_ ABSL_GUARDED_BY(mu_);
  int next_token_ ABSL_GUARDED_BY(mu_) = 1;
};

// `text` with "{index}", "{port}" (port_base + index) and "{name}" replaced;
// any other text in braces is kept as written.
std::string ExpandWorkerTemplate(std::string_view text, const WorkerSpec& spec,
                                 int index);

// The Bazel runfiles directories of this workspace that exist, in the order
// programs are looked up in them: "$RUNFILES_DIR/learner_aggregator" (set by
// `bazel test`, and by whatever launches aggregatord with its runfiles), then
// "<this executable>.runfiles/learner_aggregator" (next to
// bazel-bin/daemon/aggregatord). Empty for an installed binary.
std::vector<std::string> FindRunfilesDirs();

// Where a worker's program is run from. A name without '/' is left for the
// PATH lookup, and an absolute path is kept. A relative path with '/' is
// `working_dir`/program if that exists, else the first
// `runfiles_dirs`/program that exists; otherwise NOT_FOUND naming every place
// looked in. The result is absolute, so a worker's own `cwd` does not change
// what runs.
absl::StatusOr<std::string> ResolveWorkerProgram(
    const std::string& program, const std::string& working_dir,
    const std::vector<std::string>& runfiles_dirs);

// The Subprocess options of replica `index` of `spec`: templates expanded, the
// program resolved (against the daemon's working directory, then
// `runfiles_dirs`), output captured, own process group, dies with the parent.
absl::StatusOr<SubprocessOptions> ReplicaSubprocessOptions(
    const WorkerSpec& spec, int index,
    const std::vector<std::string>& runfiles_dirs);

struct WorkerManagerOptions {
  // Not owned; must outlive the manager. nullptr: SteadyWorkerClock().
  WorkerClock* clock = nullptr;
  // Where relative programs are looked up after the working directory.
  // nullopt: FindRunfilesDirs().
  std::optional<std::vector<std::string>> runfiles_dirs;
  // Called on the manager thread, without the manager's lock held, whenever
  // what Status() or LearnerEndpoints() return has changed. It may call the
  // manager's const methods; it must not call Apply, Sync or Shutdown.
  std::function<void()> on_change;
};

class WorkerManager {
 public:
  // Starts the manager thread, with no workers.
  explicit WorkerManager(WorkerManagerOptions options = {});
  // Shutdown with a deadline of the longest stop_timeout of the current specs
  // (real time), if it has not been called.
  ~WorkerManager();
  WorkerManager(const WorkerManager&) = delete;
  WorkerManager& operator=(const WorkerManager&) = delete;

  // Makes `specs` the workers: starts new names, stops removed ones, starts or
  // stops replicas to match `replicas`, and restarts the replicas of a worker
  // whose spec changed in anything but `replicas` (with fresh restart counts).
  // An unchanged worker is left alone, even a FAILED one. Returns once the
  // manager thread has acted on it (new processes started, stops begun; it
  // does not wait for stopped processes to exit). INVALID_ARGUMENT for specs
  // the config parser would reject at their root (empty or duplicate names,
  // empty commands, negative replicas, "{port}" or learner without
  // port_base); FAILED_PRECONDITION after Shutdown.
  absl::Status Apply(std::vector<WorkerSpec> specs);

  // One entry per replica: workers in spec order (then removed workers still
  // stopping), replicas by index. A replica being stopped is STOPPED with its
  // pid until its process has exited.
  std::vector<aggregator::v1::WorkerStatus> Status() const;

  // {"<name>-<index>", "127.0.0.1:<port_base + index>"} for every replica of
  // every learner worker, whatever its state (the learner pool tracks whether
  // it answers), in spec order.
  std::vector<LearnerEndpoint> LearnerEndpoints() const;

  // Returns once the manager thread has handled every command sent and every
  // timer due (on the clock) before the call. DEADLINE_EXCEEDED otherwise. For
  // tests with a fake clock: Advance, then Sync, then look at Status.
  absl::Status Sync(std::chrono::steady_clock::time_point deadline);

  // Stops every replica: SIGTERM to each process group, SIGKILL after its
  // stop_timeout or at `deadline` (real time), whichever comes first; reaps
  // them and ends the manager thread. Idempotent; later calls return at once.
  void Shutdown(std::chrono::steady_clock::time_point deadline);

 private:
  struct Replica;
  struct Worker;
  enum class AfterStop { kRemove, kRestart, kStay };

  // Manager thread.
  void Run();
  void Reconcile(const std::vector<WorkerSpec>& specs);
  void StartReplica(Worker& worker, Replica& replica);
  void OnExit(Worker& worker, Replica& replica, const ExitStatus& status);
  // The replica's process ended (or never started), as `what` says: restarts
  // it after its backoff, or marks it STOPPED or FAILED.
  void AfterExit(Worker& worker, Replica& replica, const std::string& what,
                 bool failed);
  void Stop(Worker& worker, Replica& replica, AfterStop after);
  // The replica's process is gone: removes, restarts or parks it.
  void Stopped(Worker& worker, Replica& replica);
  void RunDueTimers();
  // Logs the complete lines available on one stream, reading at most
  // `budget` bytes.
  void ReadOutput(Replica& replica, bool from_stderr, size_t budget);
  void CloseProcess(Replica& replica);
  bool AnyProcess() const;
  // Waits for the next event or due timer and handles what happened.
  void PollOnce();
  // Publishes Status() and LearnerEndpoints(); true when they changed.
  bool Publish(uint64_t handled_seq);
  void Wake();

  const WorkerManagerOptions options_;
  WorkerClock* const clock_;
  const std::vector<std::string> runfiles_dirs_;
  const int wake_fd_;  // eventfd: commands, clock jumps
  int waker_token_ = 0;

  // Owned by the manager thread alone (not guarded).
  std::map<std::string, std::unique_ptr<Worker>> workers_;
  std::vector<std::string> order_;  // names in spec order
  bool stopping_all_ = false;
  std::chrono::steady_clock::time_point stop_deadline_;

  mutable std::mutex mu_;
  std::condition_variable handled_;  // handled_seq_ moved, or done_
  // Commands for the manager thread.
  std::optional<std::vector<WorkerSpec>> pending_specs_ ABSL_GUARDED_BY(mu_);
  std::optional<std::chrono::steady_clock::time_point> shutdown_deadline_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;     // last command number
  uint64_t handled_seq_ ABSL_GUARDED_BY(mu_) = 0;  // last one handled
  bool done_ ABSL_GUARDED_BY(mu_) = false;         // manager thread ended
  // What the manager thread publishes.
  std::vector<aggregator::v1::WorkerStatus> status_ ABSL_GUARDED_BY(mu_);
  std::vector<LearnerEndpoint> endpoints_ ABSL_GUARDED_BY(mu_);
  // The longest stop_timeout of the specs applied, for the destructor.
  std::chrono::milliseconds longest_stop_timeout_ ABSL_GUARDED_BY(mu_){0};

  std::mutex shutdown_mu_;  // serializes Shutdown calls (and the join)
  std::thread thread_;
};

}  // namespace aggregator

#endif  // LIB_WORKERS_WORKER_MANAGER_H_
