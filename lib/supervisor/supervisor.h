// Supervisor: starts child workers (processes or in-process threads), sends
// them requests and collects their replies, restarts and stops them. A port of
// DI-engine's ding.framework.supervisor that fixes what the original gets
// wrong (design.md, "Seed defects" item 6):
//
// - Each child has its own channel (a process: a socketpair end at fd 3,
//   announced in AGGREGATOR_WORKER_FD; a thread: an in-memory queue pair), and
//   no lock is shared between children, so a child killed mid-write cannot
//   stall the others. The partial frame it leaves behind is discarded.
// - Every wait has a deadline, and a call's timeout is the total for the call,
//   not per read.
// - A child that exits, crashes or fails in init is reported: its pending
//   requests complete with CHILD_EXITED or INIT_FAILED errors naming the child
//   and its exit status, and GetChildStatus() tells its state and last error.
//
// Receiving works without helper threads: the thread waiting for a result
// reads every channel itself (ppoll over the process channels, their pidfds
// and an eventfd that thread children signal), so a reply costs no extra
// thread hop. When several threads wait at once, one of them reads for all and
// hands results to the others through the supervisor's mutex and condition
// variable. Waiters spin briefly (SupervisorOptions::spin) before blocking.
// Exits are noticed (and processes reaped) when some call reads: any Recv,
// RecvAll, Wait* or GetChildStatus. Processes are Subprocesses (lib/process):
// forked by the process's spawner thread, stopped by its escalation.
//
// Requests and results (worker.proto): a request names a registered method,
// or "_getattr"; each request yields exactly one result, either the child's
// reply or an error standing in for it (TIMEOUT, CHILD_EXITED, INIT_FAILED). A
// reply that arrives after its request already got a result is dropped and
// counted (SupervisorStats::dropped_replies).
//
// Thread-safety: every method may be called from any thread (RecvAll
// callbacks run on the caller's thread, with no lock held, and must not
// throw). StartLink, Shutdown and Restart are serialized with each other; the
// supervisor must outlive every call into it. Ownership: the
// supervisor owns its children; its destructor shuts them down (with
// SupervisorOptions::stop_timeout). A thread child that does not stop in time
// is detached (it owns what it uses) and reported.
#ifndef LIB_SUPERVISOR_SUPERVISOR_H_
#define LIB_SUPERVISOR_SUPERVISOR_H_

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/process/child_loop.h"
#include "lib/process/subprocess.h"
#include "lib/supervisor/worker_channel.h"
#include "lib/supervisor/worker_runtime.h"
#include "proto/worker.pb.h"

namespace aggregator {

namespace supervisor_internal {
struct Incarnation;
class ThreadChannel;
}  // namespace supervisor_internal

// A child that is a program speaking the worker protocol (for a C++ program:
// main() calls RunWorkerProcess()). It runs in its own process group, dies
// with the supervisor (PR_SET_PDEATHSIG) and inherits stdout and stderr.
struct ProcessChildSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH
  // Added to the supervisor's environment (AGGREGATOR_WORKER_FD is set too).
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;  // empty: the supervisor's
};

// A child that is a thread of this process serving the object `init` creates;
// `init` runs on the child's thread, and its failure is the child's init
// failure.
struct ThreadChildSpec {
  WorkerInit init;
  std::string name;  // for messages only
};

enum class ChildState {
  kRegistered,  // StartLink not called yet
  kStarting,    // started, the init handshake not received yet
  kRunning,     // serving
  kStopping,    // being restarted or shut down
  kExited,      // ended after serving (crash, kill, or a requested stop)
  kFailed,      // never served: could not be started, or init failed
};
absl::string_view ChildStateName(ChildState state);

struct ChildStatus {
  int proc_id = -1;
  bool is_process = false;
  ChildState state = ChildState::kRegistered;
  pid_t pid = -1;    // the current or last process; -1 for a thread
  int restarts = 0;  // Restart() calls that started it again
  // How the last incarnation ended or failed ("... was killed by SIGKILL");
  // empty while it runs, or after it exited with code 0 when asked to.
  std::string last_error;
  std::optional<ExitStatus> exit_status;  // processes, once reaped
};

struct SendPayload {
  int proc_id = 0;
  // Unique among requests in flight. Send() assigns one when empty.
  std::string req_id;
  std::string method;
  WorkerArgs args;
};

struct RecvPayload {
  int proc_id = -1;
  std::string req_id;
  std::string method;
  WorkerValue data;
  // Set when the request failed; the message names the child and request.
  std::optional<v1::WorkerError> error;
  bool ok() const { return !error.has_value(); }
};

// The status for a child's error: NO_SUCH_METHOD is UNIMPLEMENTED,
// NO_SUCH_ATTRIBUTE NOT_FOUND, TIMEOUT DEADLINE_EXCEEDED, CHILD_EXITED
// UNAVAILABLE, INIT_FAILED FAILED_PRECONDITION, FAILED (the method's own error)
// UNKNOWN.
absl::Status WorkerErrorToStatus(const v1::WorkerError& error);

// What a RecvAll callback may do besides looking at the result: send more
// requests, or add requests to wait for, within the same total deadline.
// Valid only during the callback.
class RecvAllHandle {
 public:
  // Sends `payload` (assigning its req_id when empty) and waits for it too.
  absl::Status Send(SendPayload& payload);
  // Waits for a request without sending it (it was sent another way, or will
  // only ever time out). INVALID_ARGUMENT when it is already awaited.
  absl::Status Add(const SendPayload& payload);
  // Requests still awaited, including the ones added.
  size_t remaining() const;

 private:
  friend class Supervisor;
  struct Call;
  explicit RecvAllHandle(Call* call) : call_(call) {}
  Call* call_;
};

using RecvAllCallback =
    std::function<void(const RecvPayload& result, RecvAllHandle& handle)>;

struct SupervisorOptions {
  // The time call deadlines are measured on (lib/base/clock.h); not owned,
  // must outlive the supervisor. nullptr: SteadyClock(). A fake clock that
  // jumps past a deadline wakes the waiting call at once.
  Clock* clock = nullptr;
  // The timeout of Recv, RecvAll, GetAttr and the Wait calls when given none.
  std::chrono::nanoseconds default_timeout = std::chrono::seconds(60);
  // How long a child's channel may refuse a request before Send gives up.
  std::chrono::nanoseconds send_timeout = std::chrono::seconds(10);
  // Restart/Shutdown/destructor default: the time a child has to stop (half to
  // follow "_shutdown", half after SIGTERM) before SIGKILL.
  std::chrono::nanoseconds stop_timeout = std::chrono::seconds(5);
  // After SIGKILL, how long to wait for the kernel to end the process.
  std::chrono::nanoseconds kill_wait = std::chrono::seconds(5);
  // How long a waiting thread (a receiver, or an idle thread child) polls
  // before it blocks. Replies that come sooner skip a wake-up (several µs on
  // a VM); 0 disables spinning.
  std::chrono::nanoseconds spin = std::chrono::microseconds(50);
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
};

struct SupervisorStats {
  uint64_t dropped_replies = 0;  // late, unsolicited or for an older start
  uint64_t partial_frames_discarded = 0;  // frames cut short by a child's end
  uint64_t child_exits = 0;  // incarnations that ended, for any reason
  uint64_t restarts = 0;
};

class Supervisor {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit Supervisor(SupervisorOptions options = {});
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Adds a child and returns its proc_id (0, 1, ... in order). Only before
  // StartLink (FAILED_PRECONDITION after); INVALID_ARGUMENT for an empty argv
  // or a missing init.
  absl::StatusOr<int> Register(ProcessChildSpec spec);
  absl::StatusOr<int> Register(ThreadChildSpec spec);
  int size() const;

  // Starts every child without waiting for their init (requests sent before
  // it completes are served after it; see WaitRunning). A child that cannot
  // be started is marked failed and the first such error is returned; the
  // others run. Again after Shutdown: starts them all anew. No-op while
  // running.
  absl::Status StartLink();

  // Sends a request. Caller errors are returned: not running, unknown
  // proc_id, empty or reserved method, duplicate req_id, or the child's
  // channel refusing the request for send_timeout (DEADLINE_EXCEEDED; nothing
  // was sent). A child that is not running does not fail the Send: the
  // request completes at once with CHILD_EXITED or INIT_FAILED.
  absl::Status Send(SendPayload& payload);

  // The next result of any request not awaited by a RecvAll in progress.
  // With ignore_err, a failed request is returned with `error` set; otherwise
  // its error is returned as a status (WorkerErrorToStatus). DEADLINE_EXCEEDED
  // when nothing arrives in time.
  absl::StatusOr<RecvPayload> Recv(bool ignore_err = false,
                                   std::optional<Duration> timeout = {});

  // Waits for the results of `payloads` (already sent) and returns them in
  // the order of `payloads`. Results of other requests that arrive meanwhile
  // are kept for later Recv calls. `callback`, if given, sees each result as
  // it arrives and may send or add more requests to wait for (their results
  // go to the callback, not into the returned list). `timeout` bounds the
  // whole call. Without ignore_err the first failed request or the timeout
  // fails the call (results already collected go back for later Recv calls);
  // with ignore_err, every request still awaited at the deadline gets a
  // TIMEOUT error result. A callback that adds a request on every timeout
  // keeps the call going: requests added after the deadline time out at once.
  absl::StatusOr<std::vector<RecvPayload>> RecvAll(
      const std::vector<SendPayload>& payloads, bool ignore_err = false,
      const RecvAllCallback& callback = nullptr,
      std::optional<Duration> timeout = {});

  // The value of attribute `key` of one child, or of every child in proc_id
  // order (the original's `supervisor.<key>`).
  absl::StatusOr<WorkerValue> GetAttr(int proc_id, const std::string& key,
                                      std::optional<Duration> timeout = {});
  absl::StatusOr<std::vector<WorkerValue>> GetAttrAll(
      const std::string& key, std::optional<Duration> timeout = {});

  // Stops the child (asks with "_shutdown", then SIGTERM, then SIGKILL its
  // process group; a thread is asked and joined) within `timeout`, completes
  // its pending requests with CHILD_EXITED, and starts it again. Returns the
  // start's error, or DEADLINE_EXCEEDED for a thread that did not stop (it is
  // detached and a new one started).
  absl::Status Restart(int proc_id, std::optional<Duration> timeout = {});

  // Stops every child as Restart does, in parallel, within `timeout`. Pending
  // requests complete with CHILD_EXITED; results nobody waits for are
  // discarded. Returns DEADLINE_EXCEEDED naming thread children that had to be
  // detached. No-op when not running.
  absl::Status Shutdown(std::optional<Duration> timeout = {});

  // The child's state. Notices exits without blocking first.
  absl::StatusOr<ChildStatus> GetChildStatus(int proc_id);
  // Waits until the child has completed its init handshake (OK), or has
  // failed or exited (FAILED_PRECONDITION with its last error), or the timeout
  // (DEADLINE_EXCEEDED).
  absl::Status WaitRunning(int proc_id, std::optional<Duration> timeout = {});
  // Waits until the child has exited or failed, and returns its status.
  absl::StatusOr<ChildStatus> WaitExited(int proc_id,
                                         std::optional<Duration> timeout = {});

  SupervisorStats stats() const;

 private:
  // Appends a child (Register's shared part); FAILED_PRECONDITION once
  // running.
  absl::StatusOr<int> AddChild(
      std::variant<ProcessChildSpec, ThreadChildSpec> spec);
  friend class RecvAllHandle;
  struct Child;
  struct PendingRequest {
    int proc_id;
    int generation;
    uint64_t seq;  // send order, so exit errors complete in that order
    std::string method;
  };
  // What the thread that reads for everyone knows about one incarnation.
  struct PollTarget {
    Child* child;
    std::shared_ptr<supervisor_internal::Incarnation> incarnation;
  };

  TimePoint Now() const { return clock_->Now(); }
  TimePoint DeadlineAfter(std::optional<Duration> timeout) const;

  absl::Status SendLocked(
      SendPayload& payload,
      std::shared_ptr<supervisor_internal::Incarnation>* incarnation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Waits until `done` holds (checked with mu_ held) or `deadline` passes,
  // reading the channels itself when no other thread does (releasing mu_
  // meanwhile). Returns whether `done` holds.
  template <typename Predicate>
  bool WaitLocked(TimePoint deadline, Predicate done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One round of reading: waits (spinning first) until any channel has
  // something, the waker moved past `seen`, or `deadline`; then handles it
  // all. Called only by the thread holding the reader role (reading_).
  void PollOnce(TimePoint deadline, uint64_t seen) ABSL_LOCKS_EXCLUDED(mu_);
  // Without blocking, when no other thread is reading.
  void PollNow() ABSL_LOCKS_EXCLUDED(mu_);
  void RebuildPollTargets() ABSL_LOCKS_EXCLUDED(mu_);
  void ReadProcessChannel(PollTarget& target) ABSL_LOCKS_EXCLUDED(mu_);
  // Dispatches the `count` frames read; `error` ended the reading. True when
  // the child must be killed for a broken channel.
  bool DispatchFrames(PollTarget& target, size_t count,
                      const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);
  void ReapProcess(PollTarget& target) ABSL_LOCKS_EXCLUDED(mu_);
  // Kills a process that closed its channel and outlived its exit grace.
  void KillIfGraceOver(PollTarget& target) ABSL_LOCKS_EXCLUDED(mu_);
  void ReadThreadChannel(PollTarget& target) ABSL_LOCKS_EXCLUDED(mu_);
  void DispatchLocked(Child& child, supervisor_internal::Incarnation& inc,
                      v1::WorkerReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Records that `inc` ended (`how`: "was killed by SIGKILL"; `clean`: it
  // stopped as asked, which is no error), completes its pending requests and
  // updates the child's state. Idempotent.
  void EndIncarnationLocked(Child& child, supervisor_internal::Incarnation& inc,
                            const std::string& how, bool clean)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InitFailedLocked(Child& child, supervisor_internal::Incarnation& inc,
                        const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes every pending request of `inc` with an error of `kind`.
  void FailPendingLocked(Child& child, supervisor_internal::Incarnation& inc,
                         v1::WorkerError::Kind kind, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteLocked(RecvPayload result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes waiting receivers after results or channels changed.
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "child 2 (pid 1234, argv[0] 'x')", for `inc` or else the current start.
  std::string LabelLocked(const Child& child,
                          const supervisor_internal::Incarnation* inc =
                              nullptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ChildStatus StatusLocked(const Child& child) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Starts a new incarnation of `child`. Called with lifecycle_mu_ held.
  absl::Status StartChild(Child& child) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status StartProcess(const ProcessChildSpec& spec,
                            supervisor_internal::Incarnation& inc);
  absl::Status StartThread(const ThreadChildSpec& spec,
                           supervisor_internal::Incarnation& inc);
  // The body of a thread child: init, then serve until stopped.
  static void ServeThread(
      std::shared_ptr<supervisor_internal::ThreadChannel> channel,
      const WorkerInit& init);
  // Makes `inc` the child's current start, or records why it failed.
  absl::Status InstallIncarnation(
      Child& child, std::shared_ptr<supervisor_internal::Incarnation> inc,
      const absl::Status& started) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops the given children's incarnations within `timeout`; each gets
  // `reason` ("was restarted"). Called with lifecycle_mu_ held. The steps:
  // mark them stopping, ask ("_shutdown"), escalate (SIGTERM, SIGKILL),
  // collect exits and threads, record how each ended.
  struct ChildStop;
  absl::Status StopChildren(const std::vector<Child*>& children,
                            Duration timeout, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<ChildStop> BeginStops(const std::vector<Child*>& children,
                                    const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  void AskToStop(std::vector<ChildStop>& stops);
  void EscalateStops(std::vector<ChildStop>& stops,
                     std::chrono::steady_clock::time_point start,
                     Duration timeout);
  void CollectStops(std::vector<ChildStop>& stops,
                    std::chrono::steady_clock::time_point thread_deadline);
  absl::Status RecordStops(std::vector<ChildStop>& stops,
                           const std::string& reason, Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // RecvAll's steps.
  struct RecvAllState;
  // Checks and claims the payloads' req_ids for this call.
  absl::Status ClaimLocked(const std::vector<SendPayload>& payloads,
                           RecvAllHandle::Call& call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the awaited results that are ready into state.arrived.
  void TakeArrivalsLocked(RecvAllState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DEADLINE_EXCEEDED naming the requests still awaited.
  absl::Status TimeoutLocked(const RecvAllState& state, size_t payloads,
                             const std::string& within) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives every request still awaited a TIMEOUT result.
  void TimeOutAwaitedLocked(RecvAllState& state, const std::string& within)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files this round's arrivals and shows them to the callback; without
  // ignore_err the first failure ends the call (its error is returned).
  absl::Status Deliver(RecvAllState& state, bool ignore_err,
                       const RecvAllCallback& callback, RecvAllHandle& handle)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call early: results taken go back for Recv (those of arrivals
  // from `from` on, and every filed one), nothing stays claimed.
  void GiveBackLocked(RecvAllState& state, size_t from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status CheckProcId(int proc_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<RecvPayload> TakeResult(RecvPayload result, bool ignore_err);

  const SupervisorOptions options_;
  Clock* const clock_;
  // The reader role's wait (its poll set, waker and deadlines), and the stop
  // escalation.
  ChildLoop loop_;

  // Serializes StartLink, Shutdown and Restart (never held while waiting for
  // a result, only while children start and stop).
  Mutex lifecycle_mu_;

  mutable Mutex mu_;
  CondVar cv_;  // with mu_: results arrived, or reading_ freed
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Child>> children_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, PendingRequest> pending_ ABSL_GUARDED_BY(mu_);
  // Results not yet taken, in arrival order.
  std::deque<RecvPayload> ready_ ABSL_GUARDED_BY(mu_);
  // req_ids awaited by a RecvAll in progress; Recv skips their results.
  std::unordered_set<std::string> claimed_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_req_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Some thread is reading the channels (the reader role).
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;  // threads blocked on cv_
  // Bumped when the set of channels to read changes.
  uint64_t poll_version_ ABSL_GUARDED_BY(mu_) = 0;
  SupervisorStats stats_ ABSL_GUARDED_BY(mu_);

  // Owned by the thread holding the reader role.
  uint64_t poll_targets_version_ = ~uint64_t{0};
  std::vector<PollTarget> poll_targets_;
  // For each fd of the loop's round: its poll target, and whether it is
  // the pidfd (else the channel).
  std::vector<std::pair<size_t, bool>> pollfd_targets_;
  std::vector<v1::WorkerReply> frames_;  // reused parse buffers
  std::vector<v1::WorkerReply> thread_replies_;
};

}  // namespace aggregator

#endif  // LIB_SUPERVISOR_SUPERVISOR_H_
