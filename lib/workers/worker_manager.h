// WorkerManager: runs the replicas of the `workers:` specs
// (lib/config/config.h) as child processes and keeps them running by their
// restart policy.
//
// Each replica is one Subprocess (lib/process): its own process group, dies
// with the daemon, SIGTERM then SIGKILL after stop_timeout when stopped, stdout
// and stderr captured and logged line by line
// through spdlog at info level as "[<name>-<index>] <line>" (both streams at
// info: programs print diagnostics to stderr, so the stream says nothing about
// severity). When a replica's main process exits, whatever is left of its
// process group is SIGKILLed, so a restart never races its own leftovers.
//
// Restarts follow the spec, as DecideRestart (lib/workers/restart_policy.h)
// says: `restart` (always / on-failure / never), the backoff, min_uptime and
// OTP-style intensity (more than max_restarts restarts within restart_window:
// FAILED with its last error, not restarted).
//
// Threading: one manager thread owns every child. It starts them, reaps them
// (no zombies), and sleeps on its ChildLoop (lib/process/child_loop.h): the
// children's pidfds, channels and output pipes, the waker for commands, and
// the next due timer; it never busy-waits. Public methods may be
// called from any thread; they hand commands to the manager thread and read
// the state it publishes under mu_.
//
// Time: restart delays, min_uptime and stop_timeout are measured on an
// injected Clock (lib/base/clock.h), so tests drive them exactly with
// FakeClock. Shutdown's deadline is real (steady_clock) time.
#ifndef LIB_WORKERS_WORKER_MANAGER_H_
#define LIB_WORKERS_WORKER_MANAGER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/process/child_loop.h"
#include "lib/process/subprocess.h"
#include "lib/workers/restart_policy.h"
#include "proto/worker.pb.h"

namespace aggregator {

// Where a worker replica is in its life.
enum class WorkerState {
  kStarting,  // started, not yet running for min_uptime
  kRunning,
  kBackoff,  // exited; waiting out its restart backoff
  kStopped,
  // Restart intensity exceeded, or a failed exit under `restart: never`; not
  // restarted. (A clean exit that is not restarted is kStopped.)
  kFailed,
};

// "starting", "running", "backoff", "stopped", "failed".
const char* WorkerStateName(WorkerState state);

// One replica as status and metrics see it.
struct WorkerSnapshot {
  std::string name;
  int index = 0;
  int pid = 0;  // 0 when no process runs
  WorkerState state = WorkerState::kStarting;
  int restarts = 0;
  std::string last_error;

  bool operator==(const WorkerSnapshot& other) const {
    const auto& [a_name, a_index, a_pid, a_state, a_restarts, a_error] = *this;
    const auto& [b_name, b_index, b_pid, b_state, b_restarts, b_error] = other;
    return std::tie(a_name, a_index, a_pid, a_state, a_restarts, a_error) ==
           std::tie(b_name, b_index, b_pid, b_state, b_restarts, b_error);
  }
};

struct WorkerManagerOptions {
  // Not owned; must outlive the manager. nullptr: SteadyClock().
  Clock* clock = nullptr;
  // Where relative programs are looked up after the working directory
  // (lib/workers/worker_program.h); the daemon passes its runfiles.
  std::vector<std::string> program_dirs;
  // When set, every replica runs under this process guard
  // (SubprocessOptions::guard_program): none of its descendants outlives it.
  std::string guard_program;
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
  std::vector<WorkerSnapshot> Status() const;

  // {"<name>-<index>", "127.0.0.1:<port_base + index>"} for every replica of
  // every learner worker, whatever its state (the learner pool tracks whether
  // it answers), in spec order; for a `channel` worker only while its process
  // runs and once it has announced its port, which is the port used.
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
  // Starts the next few new replicas (kStartsPerRound), in worker order.
  void StartPending();
  void OnExit(Worker& worker, Replica& replica, const ExitStatus& status);
  // The replica's process ended (or never started), as `what` says: restarts
  // it after its backoff, or marks it STOPPED or FAILED.
  void AfterExit(Worker& worker, Replica& replica, const std::string& what,
                 const ReplicaExit& exit);
  void Stop(Worker& worker, Replica& replica, AfterStop after);
  // The replica's process is gone: removes, restarts or parks it.
  void Stopped(Worker& worker, Replica& replica);
  void RunDueTimers();
  // Logs the complete lines available on one stream, reading at most
  // `budget` bytes.
  void ReadOutput(Replica& replica, bool from_stderr, size_t budget);
  // Handles the frames available on a channel worker's channel.
  void ReadChannel(Replica& replica);
  // One frame from a channel worker: a failed init, or the port it announced.
  void HandleFrame(Replica& replica, const v1::WorkerReply& reply);
  void CloseProcess(Replica& replica);
  bool AnyProcess() const;
  // Waits for the next event or due timer (or a wake-up after `seen`) and
  // handles what happened.
  void PollOnce(uint64_t seen);
  // Publishes Status() and LearnerEndpoints(); true when they changed.
  bool Publish(uint64_t handled_seq);
  // Waits until the manager thread has handled command `seq` (or ended).
  bool AwaitHandled(uint64_t seq,
                    std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerManagerOptions options_;
  Clock* const clock_;
  // The manager thread's wait; woken by commands and clock jumps.
  ChildLoop loop_;

  // Owned by the manager thread alone (not guarded).
  std::map<std::string, std::unique_ptr<Worker>> workers_;
  std::vector<std::string> order_;  // names in spec order
  bool stopping_all_ = false;
  std::chrono::steady_clock::time_point stop_deadline_;

  mutable Mutex mu_;
  // Commands for the manager thread.
  std::optional<std::vector<WorkerSpec>> pending_specs_ ABSL_GUARDED_BY(mu_);
  std::optional<std::chrono::steady_clock::time_point> shutdown_deadline_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;     // last command number
  uint64_t handled_seq_ ABSL_GUARDED_BY(mu_) = 0;  // last one handled
  bool done_ ABSL_GUARDED_BY(mu_) = false;         // manager thread ended
  // What the manager thread publishes.
  std::vector<WorkerSnapshot> status_ ABSL_GUARDED_BY(mu_);
  std::vector<LearnerEndpoint> endpoints_ ABSL_GUARDED_BY(mu_);
  // The longest stop_timeout of the specs applied, for the destructor.
  std::chrono::milliseconds longest_stop_timeout_ ABSL_GUARDED_BY(mu_){0};

  Mutex shutdown_mu_;  // serializes Shutdown calls (and the join)
  std::thread thread_;
};

}  // namespace aggregator

#endif  // LIB_WORKERS_WORKER_MANAGER_H_
