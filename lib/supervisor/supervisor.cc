#include "lib/supervisor/supervisor.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
// glibc 2.36's <sys/pidfd.h> lacks extern "C" (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <future>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace aggregator {
namespace supervisor_internal {

using RealClock = std::chrono::steady_clock;

// CondVar takes absl::Time: a steady deadline as wall-clock time.
std::chrono::system_clock::time_point ToSystem(RealClock::time_point when) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             when - RealClock::now());
}

// Lets the thread blocked in ppoll() for everyone know that something other
// than a process channel changed: a thread child replied, a result was added,
// the set of channels changed. seq() tells whether anything happened since a
// given moment; the eventfd is written only while the reader is blocked, so a
// reply that arrives while it spins costs no system call.
class Waker {
 public:
  Waker() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Waker() {
    if (fd_ >= 0) close(fd_);
  }
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;

  int fd() const { return fd_; }
  uint64_t seq() const { return seq_.load(std::memory_order_seq_cst); }

  void Signal() {
    // seq_cst on both sides (here and in the reader's SetBlocked/seq) so that
    // either the reader sees the new seq before blocking, or this sees it
    // blocked and writes the eventfd.
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (blocked_.load(std::memory_order_seq_cst)) {
      const uint64_t one = 1;
      ssize_t n;
      do {
        n = write(fd_, &one, sizeof(one));
      } while (n < 0 && errno == EINTR);
    }
  }
  void SetBlocked(bool blocked) {
    blocked_.store(blocked, std::memory_order_seq_cst);
  }
  void Drain() {
    uint64_t value;
    ssize_t n;
    do {
      n = read(fd_, &value, sizeof(value));
    } while (n < 0 && errno == EINTR);
  }

 private:
  const int fd_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> blocked_{false};
};

// One step of a spin-wait: sched_yield, not a pause instruction. The thread
// we wait for is often on this very CPU (the scheduler puts a woken thread
// next to its waker), and only a yield lets it run; alone on a CPU, a yield
// returns at once.
inline void SpinPause() { sched_yield(); }

// A thread child's channel: a request queue and a reply queue under the
// child's own mutex. The child spins on `queued_` for a while before it
// blocks, so back-to-back requests skip the futex wake-up.
//
// Thread-safety: all methods are thread-safe; the Push/Take pairs are used by
// the supervisor on one side and the child thread on the other. Ownership:
// shared by the supervisor and the child thread (which may outlive the
// supervisor when it had to be detached).
class ThreadChannel {
 public:
  ThreadChannel(std::shared_ptr<Waker> waker, std::chrono::nanoseconds spin)
      : waker_(std::move(waker)), spin_(spin) {}

  // Supervisor side.
  void PushRequest(v1::WorkerRequest request) {
    bool wake;
    {
      MutexLock lock(&mu_);
      requests_.push_back(std::move(request));
      queued_.fetch_add(1, std::memory_order_release);
      wake = child_waiting_;
    }
    if (wake) cv_.SignalAll();
  }
  bool has_replies() const {
    return has_replies_.load(std::memory_order_acquire);
  }
  // Moves the replies into `out`, which must be empty.
  void TakeReplies(std::vector<v1::WorkerReply>& out) {
    MutexLock lock(&mu_);
    out.swap(replies_);
    has_replies_.store(false, std::memory_order_release);
  }
  // Ends the serving loop after the current request and asks a method
  // waiting in WorkerObject::SleepFor to return.
  void RequestStop() {
    std::shared_ptr<WorkerObject> object;
    {
      MutexLock lock(&mu_);
      stop_ = true;
      stopping_.store(true, std::memory_order_release);
      object = object_;
    }
    cv_.SignalAll();
    if (object != nullptr) object->RequestStop();
  }
  bool WaitExited(RealClock::time_point deadline) {
    MutexLock lock(&mu_);
    while (!exited_) {
      if (cv_.WaitWithDeadline(&mu_, absl::FromChrono(ToSystem(deadline)))) {
        return exited_;
      }
    }
    return true;
  }

  // Child side. False once a stop was requested.
  bool PopRequest(v1::WorkerRequest* request) {
    if (spin_.count() > 0 && queued_.load(std::memory_order_acquire) == 0) {
      const RealClock::time_point end = RealClock::now() + spin_;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             !stopping_.load(std::memory_order_acquire) &&
             RealClock::now() < end) {
        SpinPause();
      }
    }
    MutexLock lock(&mu_);
    while (requests_.empty() && !stop_) {
      child_waiting_ = true;
      cv_.Wait(&mu_);
      child_waiting_ = false;
    }
    if (stop_) return false;
    *request = std::move(requests_.front());
    requests_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    return true;
  }
  void PushReply(v1::WorkerReply reply) {
    {
      MutexLock lock(&mu_);
      replies_.push_back(std::move(reply));
      has_replies_.store(true, std::memory_order_release);
    }
    waker_->Signal();
  }
  void SetObject(std::shared_ptr<WorkerObject> object) {
    bool stop;
    {
      MutexLock lock(&mu_);
      object_ = object;
      stop = stop_;
    }
    if (stop && object != nullptr) object->RequestStop();
  }
  void MarkExited() {
    {
      MutexLock lock(&mu_);
      exited_ = true;
    }
    cv_.SignalAll();
  }

 private:
  const std::shared_ptr<Waker> waker_;
  const std::chrono::nanoseconds spin_;

  Mutex mu_;
  // With mu_: requests arrived or a stop (for the child), exit (for the
  // supervisor).
  CondVar cv_;
  std::deque<v1::WorkerRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerReply> replies_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<WorkerObject> object_ ABSL_GUARDED_BY(mu_);
  bool child_waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  // Lock-free views for spinning.
  std::atomic<size_t> queued_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> has_replies_{false};
};

// One start of a child: its process or thread and its channel. Replaced as a
// whole by a restart, so nothing of an old start can reach a new one.
//
// Ownership: shared by the Child record and the reader's poll targets; fds are
// closed when the last reference goes.
struct Incarnation {
  ~Incarnation() {
    // Stop paths join; a thread that did not stop owns what it uses.
    if (thread.joinable()) thread.detach();
  }

  bool is_process = false;
  int generation = 0;  // set before the incarnation is visible

  // A process child. pid, pidfd (the Subprocess's own) and channel are fixed
  // once visible.
  pid_t pid = -1;
  int pidfd = -1;
  std::unique_ptr<WorkerChannel> channel;  // reads: the reader role only
  Mutex write_mu;                    // serializes writes to `channel`
  v1::WorkerRequest request ABSL_GUARDED_BY(write_mu);  // reused
  // Guards `process`; held only for calls that do not block.
  Mutex process_mu;
  std::unique_ptr<Subprocess> process ABSL_GUARDED_BY(process_mu);

  // A thread child.
  std::shared_ptr<ThreadChannel> thread_channel;
  std::thread thread;  // joined or detached under Supervisor::lifecycle_mu_

  // Guarded by Supervisor::mu_.
  bool initialized = false;  // the init handshake (or any reply) arrived
  bool ended = false;        // recorded as over; its pending requests failed
  std::string stop_reason;   // "was restarted": a stop is under way
  std::string kill_reason;   // why the supervisor killed it on its own
  std::optional<ExitStatus> exit_status;

  // The reader role's own state.
  bool channel_closed = false;  // end of stream or error seen: stop polling
  bool reaped = false;
  // Set when the channel closed and the process had not yet ended: it is
  // killed if still running then.
  std::optional<RealClock::time_point> exit_grace_end;
};

}  // namespace supervisor_internal

using supervisor_internal::Incarnation;
using supervisor_internal::RealClock;
using supervisor_internal::ThreadChannel;
using supervisor_internal::ToSystem;
using supervisor_internal::Waker;

namespace {

// Requests a RecvAll that fails lists in its message.
constexpr size_t kListedRequests = 5;
// Frames read from one channel per round, so a child that never stops writing
// cannot keep the reader from the others.
constexpr size_t kFramesPerRound = 64;
// How long a process that closed its channel may take to exit before it is
// killed.
constexpr std::chrono::milliseconds kExitGrace(100);
// A bound for waits given absurd timeouts (the arithmetic must not overflow).
constexpr std::chrono::hours kLongestWait(24 * 365);

std::string FormatDuration(std::chrono::nanoseconds d) {
  return absl::FormatDuration(absl::FromChrono(d));
}

// "exited with exit code 3", "was killed by SIGKILL".
std::string DescribeExit(const ExitStatus& status) {
  if (status.signal == 0)
    return absl::StrCat("exited with ", status.ToString());
  return absl::StrCat("was ", status.ToString());
}

// Waits for a process to end (its pidfd readable) until `deadline`.
bool WaitPidfd(int pidfd, RealClock::time_point deadline) {
  for (;;) {
    const RealClock::time_point now = RealClock::now();
    const auto left = std::max(RealClock::duration::zero(), deadline - now);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left);
    struct timespec timeout = {static_cast<time_t>(ns.count() / 1000000000),
                               static_cast<long>(ns.count() % 1000000000)};
    struct pollfd pfd = {pidfd, POLLIN, 0};
    const int n = ppoll(&pfd, 1, &timeout, nullptr);
    if (n > 0) return true;
    if (n == 0 || (n < 0 && errno != EINTR)) return false;
  }
}

}  // namespace

struct Supervisor::Child {
  int proc_id = -1;
  std::variant<ProcessChildSpec, ThreadChildSpec> spec;
  bool is_process() const { return spec.index() == 0; }
  // Guarded by Supervisor::mu_.
  ChildState state = ChildState::kRegistered;
  std::string last_error;
  int restarts = 0;
  int generation = 0;
  std::shared_ptr<Incarnation> current;
};

struct RecvAllHandle::Call {
  struct Wanted {
    int proc_id;
    std::string method;
    int index;  // in the caller's payloads; -1 for added requests
  };
  Supervisor* supervisor;
  // Guarded by supervisor->mu_.
  std::unordered_map<std::string, Wanted> wanted;
};

absl::string_view ChildStateName(ChildState state) {
  switch (state) {
    case ChildState::kRegistered:
      return "registered";
    case ChildState::kStarting:
      return "starting";
    case ChildState::kRunning:
      return "running";
    case ChildState::kStopping:
      return "stopping";
    case ChildState::kExited:
      return "exited";
    case ChildState::kFailed:
      return "failed";
  }
  return "unknown";
}

absl::Status WorkerErrorToStatus(const v1::WorkerError& error) {
  switch (error.kind()) {
    case v1::WorkerError::KIND_NO_SUCH_METHOD:
      return absl::UnimplementedError(error.message());
    case v1::WorkerError::KIND_NO_SUCH_ATTRIBUTE:
      return absl::NotFoundError(error.message());
    case v1::WorkerError::KIND_TIMEOUT:
      return absl::DeadlineExceededError(error.message());
    case v1::WorkerError::KIND_CHILD_EXITED:
      return absl::UnavailableError(error.message());
    case v1::WorkerError::KIND_INIT_FAILED:
      return absl::FailedPreconditionError(error.message());
    default:
      return absl::UnknownError(error.message());
  }
}

Supervisor::Supervisor(SupervisorOptions options)
    : options_(std::move(options)),
      clock_(&ClockOrSteady(options_.clock)),
      waker_(std::make_shared<Waker>()) {
  // A fake clock's jump wakes the reader, which sees what became due.
  std::weak_ptr<Waker> waker = waker_;
  clock_token_ = clock_->AddWaker([waker] {
    if (auto w = waker.lock()) w->Signal();
  });
}

Supervisor::~Supervisor() {
  (void)Shutdown(options_.stop_timeout);
  clock_->RemoveWaker(clock_token_);
}

Supervisor::TimePoint Supervisor::DeadlineAfter(
    std::optional<Duration> timeout) const {
  Duration d = timeout.value_or(options_.default_timeout);
  d = std::clamp<Duration>(d, Duration::zero(), kLongestWait);
  return Now() + d;
}

RealClock::time_point Supervisor::RealDeadline(TimePoint deadline) const {
  // A fake clock (no real delay) wakes waiters through the waker instead.
  const Duration left = std::clamp<Duration>(
      clock_->RealDelayUntil(deadline).value_or(kLongestWait), Duration::zero(),
      kLongestWait);
  return RealClock::now() + left;
}

absl::StatusOr<int> Supervisor::Register(ProcessChildSpec spec) {
  if (spec.argv.empty()) {
    return absl::InvalidArgumentError("supervisor: a process child needs argv");
  }
  return AddChild(std::move(spec));
}

absl::StatusOr<int> Supervisor::Register(ThreadChildSpec spec) {
  if (!spec.init) {
    return absl::InvalidArgumentError("supervisor: a thread child needs init");
  }
  return AddChild(std::move(spec));
}

absl::StatusOr<int> Supervisor::AddChild(
    std::variant<ProcessChildSpec, ThreadChildSpec> spec) {
  MutexLock lock(&mu_);
  if (running_) {
    return absl::FailedPreconditionError(
        "supervisor: Register after StartLink (register every child first)");
  }
  auto child = std::make_unique<Child>();
  child->proc_id = static_cast<int>(children_.size());
  child->spec = std::move(spec);
  children_.push_back(std::move(child));
  return children_.back()->proc_id;
}

int Supervisor::size() const {
  MutexLock lock(&mu_);
  return static_cast<int>(children_.size());
}

absl::Status Supervisor::CheckProcId(int proc_id) const {
  if (proc_id < 0 || proc_id >= static_cast<int>(children_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("supervisor: no child ",
                                                   proc_id, " (there are ",
                                                   children_.size(), ")"));
  }
  return absl::OkStatus();
}

std::string Supervisor::LabelLocked(const Child& child,
                                    const Incarnation* inc) const {
  if (inc == nullptr) inc = child.current.get();
  if (const auto* process = std::get_if<ProcessChildSpec>(&child.spec)) {
    if (inc != nullptr && inc->pid > 0) {
      return absl::StrCat("child ", child.proc_id, " (pid ", inc->pid,
                          ", argv[0] '", process->argv[0], "')");
    }
    return absl::StrCat("child ", child.proc_id, " (argv[0] '",
                        process->argv[0], "')");
  }
  const auto& thread = std::get<ThreadChildSpec>(child.spec);
  if (thread.name.empty())
    return absl::StrCat("child ", child.proc_id, " (thread)");
  return absl::StrCat("child ", child.proc_id, " (thread '", thread.name, "')");
}

ChildStatus Supervisor::StatusLocked(const Child& child) const {
  ChildStatus status;
  status.proc_id = child.proc_id;
  status.is_process = child.is_process();
  status.state = child.state;
  status.restarts = child.restarts;
  status.last_error = child.last_error;
  if (child.current != nullptr) {
    status.pid = child.current->pid;
    status.exit_status = child.current->exit_status;
  }
  return status;
}

void Supervisor::NotifyLocked() {
  if (waiters_ > 0) cv_.SignalAll();
  waker_->Signal();
}

void Supervisor::CompleteLocked(RecvPayload result) {
  ready_.push_back(std::move(result));
  NotifyLocked();
}

// ---------------------------------------------------------------------------
// Starting and stopping.

absl::Status Supervisor::StartLink() {
  MutexLock lifecycle(&lifecycle_mu_);
  std::vector<Child*> children;
  {
    MutexLock lock(&mu_);
    if (waker_->fd() < 0) {
      return absl::ResourceExhaustedError(
          "supervisor: could not create its eventfd");
    }
    if (running_) return absl::OkStatus();
    running_ = true;
    for (auto& child : children_) children.push_back(child.get());
  }
  absl::Status first_error;
  for (Child* child : children) {
    absl::Status status = StartChild(*child);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

absl::Status Supervisor::StartChild(Child& child) {
  auto inc = std::make_shared<Incarnation>();
  const absl::Status status =
      std::holds_alternative<ProcessChildSpec>(child.spec)
          ? StartProcess(std::get<ProcessChildSpec>(child.spec), *inc)
          : StartThread(std::get<ThreadChildSpec>(child.spec), *inc);
  return InstallIncarnation(child, std::move(inc), status);
}

absl::Status Supervisor::StartProcess(const ProcessChildSpec& spec,
                                      Incarnation& inc) {
  inc.is_process = true;
  auto pair = WorkerChannel::CreatePair(options_.max_frame_bytes);
  if (!pair.ok()) return pair.status();
  SubprocessOptions options;
  options.argv = spec.argv;
  options.env = spec.env;
  options.env.emplace_back(kWorkerFdEnv, std::to_string(kWorkerChildFd));
  options.cwd = spec.cwd;
  options.new_process_group = true;
  options.die_with_parent = true;
  options.capture_output = false;
  options.fds = {{pair->second, kWorkerChildFd}};
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(options);
  close(pair->second);
  if (!process.ok()) return process.status();
  inc.pid = (*process)->pid();
  inc.pidfd = (*process)->pidfd();
  inc.channel = std::move(pair->first);
  MutexLock lock(&inc.process_mu);
  inc.process = *std::move(process);
  return absl::OkStatus();
}

absl::Status Supervisor::StartThread(const ThreadChildSpec& spec,
                                     Incarnation& inc) {
  inc.thread_channel = std::make_shared<ThreadChannel>(waker_, options_.spin);
  try {
    inc.thread = std::thread([channel = inc.thread_channel, init = spec.init] {
      ServeThread(channel, init);
    });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot create a thread: ", e.what()));
  }
  return absl::OkStatus();
}

void Supervisor::ServeThread(std::shared_ptr<ThreadChannel> channel,
                             const WorkerInit& init) {
  absl::StatusOr<std::unique_ptr<WorkerObject>> made = RunWorkerInit(init);
  if (!made.ok()) {
    channel->PushReply(InitReply(made.status()));
    channel->MarkExited();
    return;
  }
  std::shared_ptr<WorkerObject> object = std::move(*made);
  channel->SetObject(object);
  channel->PushReply(InitReply(absl::OkStatus()));
  v1::WorkerRequest request;
  while (channel->PopRequest(&request)) {
    if (request.method() == kShutdownMethod) break;
    v1::WorkerReply reply;
    object->Handle(request, &reply);
    channel->PushReply(std::move(reply));
  }
  channel->SetObject(nullptr);
  object.reset();  // before MarkExited: a joiner sees it destroyed
  channel->MarkExited();
}

absl::Status Supervisor::InstallIncarnation(Child& child,
                                            std::shared_ptr<Incarnation> inc,
                                            const absl::Status& started) {
  // Declared before the lock so the old incarnation is released after it.
  std::shared_ptr<Incarnation> old;
  MutexLock lock(&mu_);
  old = std::move(child.current);
  if (!started.ok()) {
    child.state = ChildState::kFailed;
    child.current = nullptr;
    child.last_error = absl::StrCat(
        LabelLocked(child), ": could not be started: ", started.message());
    spdlog::error("supervisor: {}", child.last_error);
    return absl::Status(started.code(), child.last_error);
  }
  inc->generation = ++child.generation;
  child.current = std::move(inc);
  child.state = ChildState::kStarting;
  child.last_error.clear();
  ++poll_version_;
  NotifyLocked();
  return absl::OkStatus();
}

// One child being stopped by StopChildren.
struct Supervisor::ChildStop {
  Child* child;
  std::shared_ptr<Incarnation> inc;
  bool was_ended;  // already over before this stop (nothing to signal)
  std::optional<ExitStatus> exit_status;
  std::string escalation;  // what it took, for the record
  bool detached = false;

  // A process this stop still has to end.
  bool process_running() const {
    return inc->is_process && !was_ended &&
           !WaitPidfd(inc->pidfd, RealClock::now());
  }
};

absl::Status Supervisor::StopChildren(const std::vector<Child*>& children,
                                      Duration timeout,
                                      const std::string& reason) {
  timeout = std::clamp<Duration>(timeout, Duration::zero(), kLongestWait);
  const RealClock::time_point start = RealClock::now();
  std::vector<ChildStop> stops = BeginStops(children, reason);
  AskToStop(stops);
  EscalateStops(stops, start, timeout);
  CollectStops(stops, start + timeout);
  return RecordStops(stops, reason, timeout);
}

std::vector<Supervisor::ChildStop> Supervisor::BeginStops(
    const std::vector<Child*>& children, const std::string& reason) {
  std::vector<ChildStop> stops;
  MutexLock lock(&mu_);
  for (Child* child : children) {
    if (child->current == nullptr) continue;
    ChildStop stop{child, child->current, child->current->ended, {}, {}};
    if (!stop.was_ended) {
      child->state = ChildState::kStopping;
      stop.inc->stop_reason = reason;
    }
    stops.push_back(std::move(stop));
  }
  return stops;
}

void Supervisor::AskToStop(std::vector<ChildStop>& stops) {
  // "_shutdown" to processes (never waiting behind a Send that holds the
  // channel, nor for buffer space), a stop request to threads.
  v1::WorkerRequest shutdown_request;
  shutdown_request.set_method(kShutdownMethod);
  for (ChildStop& stop : stops) {
    Incarnation& inc = *stop.inc;
    if (!inc.is_process) {
      inc.thread_channel->RequestStop();
      continue;
    }
    if (stop.was_ended) continue;
    if (!stop.process_running()) {
      stop.escalation = "had already ended: ";  // nobody had noticed yet
      continue;
    }
    if (inc.write_mu.TryLock()) {
      if (!inc.channel->broken()) {
        (void)inc.channel->Write(shutdown_request, RealClock::now());
      }
      inc.write_mu.Unlock();
    }
  }
}

void Supervisor::EscalateStops(std::vector<ChildStop>& stops,
                               RealClock::time_point start, Duration timeout) {
  // Half the time to follow "_shutdown", half after SIGTERM, each step
  // against a deadline shared by all children.
  const RealClock::time_point ask_deadline = start + timeout / 2;
  const RealClock::time_point term_deadline = start + timeout;
  auto wait_all = [&stops](RealClock::time_point deadline) {
    bool all = true;
    for (ChildStop& stop : stops) {
      if (!stop.inc->is_process || stop.was_ended) continue;
      if (!WaitPidfd(stop.inc->pidfd, deadline)) all = false;
    }
    return all;
  };
  if (wait_all(ask_deadline)) return;
  for (ChildStop& stop : stops) {
    if (!stop.process_running()) continue;
    stop.escalation =
        absl::StrCat("did not follow _shutdown within ",
                     FormatDuration(timeout / 2), ", so SIGTERM; ");
    MutexLock lock(&stop.inc->process_mu);
    stop.inc->process->BeginStop(term_deadline);
  }
  if (wait_all(term_deadline)) return;
  for (ChildStop& stop : stops) {
    if (!stop.process_running()) continue;
    stop.escalation = absl::StrCat("ignored _shutdown and SIGTERM for ",
                                   FormatDuration(timeout), ", so SIGKILL; ");
    MutexLock lock(&stop.inc->process_mu);
    stop.inc->process->Kill();
  }
  wait_all(RealClock::now() + options_.kill_wait);
}

void Supervisor::CollectStops(std::vector<ChildStop>& stops,
                              RealClock::time_point thread_deadline) {
  for (ChildStop& stop : stops) {
    Incarnation& inc = *stop.inc;
    if (inc.is_process) {
      MutexLock lock(&inc.process_mu);
      stop.exit_status = inc.process->Poll();
      // Descendants left in its group go too.
      (void)inc.process->Signal(SIGKILL, /*group=*/true);
      continue;
    }
    if (!inc.thread.joinable()) continue;
    if (inc.thread_channel->WaitExited(thread_deadline)) {
      inc.thread.join();
    } else {
      inc.thread.detach();
      stop.detached = true;
    }
  }
}

absl::Status Supervisor::RecordStops(std::vector<ChildStop>& stops,
                                     const std::string& reason,
                                     Duration timeout) {
  std::vector<std::string> detached;
  MutexLock lock(&mu_);
  for (ChildStop& stop : stops) {
    Incarnation& inc = *stop.inc;
    if (stop.was_ended) continue;
    std::string how = reason;
    bool clean = true;
    if (stop.detached) {
      how = absl::StrCat(reason, " but did not stop within ",
                         FormatDuration(timeout),
                         " (a method still running); its thread was detached");
      clean = false;
      detached.push_back(LabelLocked(*stop.child));
    } else if (inc.is_process) {
      inc.exit_status = stop.exit_status;
      if (!stop.exit_status.has_value()) {
        how = absl::StrCat(reason, " but is still running after SIGKILL");
        clean = false;
      } else if (!stop.escalation.empty() || !stop.exit_status->ok()) {
        how = absl::StrCat(reason, " (", stop.escalation,
                           stop.exit_status->ToString(), ")");
        clean = false;
      }
    }
    EndIncarnationLocked(*stop.child, inc, how, clean);
  }
  if (detached.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("supervisor: ", absl::StrJoin(detached, ", "),
                   " did not stop within ", FormatDuration(timeout), " and ",
                   detached.size() == 1 ? "was" : "were", " detached"));
}

absl::Status Supervisor::Restart(int proc_id, std::optional<Duration> timeout) {
  MutexLock lifecycle(&lifecycle_mu_);
  Child* child;
  {
    MutexLock lock(&mu_);
    if (absl::Status status = CheckProcId(proc_id); !status.ok()) return status;
    if (!running_) {
      return absl::FailedPreconditionError(
          "supervisor: Restart before StartLink or after Shutdown");
    }
    child = children_[proc_id].get();
  }
  absl::Status stopped = StopChildren(
      {child}, timeout.value_or(options_.stop_timeout), "was restarted");
  {
    MutexLock lock(&mu_);
    ++child->restarts;
    ++stats_.restarts;
  }
  absl::Status started = StartChild(*child);
  return started.ok() ? stopped : started;
}

absl::Status Supervisor::Shutdown(std::optional<Duration> timeout) {
  MutexLock lifecycle(&lifecycle_mu_);
  std::vector<Child*> children;
  {
    MutexLock lock(&mu_);
    if (!running_) return absl::OkStatus();
    running_ = false;
    for (auto& child : children_) children.push_back(child.get());
  }
  absl::Status status = StopChildren(
      children, timeout.value_or(options_.stop_timeout), "was shut down");
  MutexLock lock(&mu_);
  // As the original: what nobody waits for goes. A RecvAll still waiting keeps
  // its results.
  ready_.erase(std::remove_if(ready_.begin(), ready_.end(),
                              [this](const RecvPayload& result)
                                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                    return claimed_.count(result.req_id) == 0;
                                  }),
               ready_.end());
  return status;
}

// ---------------------------------------------------------------------------
// Recording what happened to children.

void Supervisor::FailPendingLocked(Child& child, Incarnation& inc,
                                   v1::WorkerError::Kind kind,
                                   const std::string& how) {
  std::vector<std::pair<uint64_t, std::string>> failed;
  for (const auto& [req_id, request] : pending_) {
    if (request.proc_id == child.proc_id &&
        request.generation == inc.generation) {
      failed.emplace_back(request.seq, req_id);
    }
  }
  std::sort(failed.begin(), failed.end());
  const std::string label = LabelLocked(child, &inc);
  for (auto& [seq, req_id] : failed) {
    auto it = pending_.find(req_id);
    RecvPayload result;
    result.proc_id = child.proc_id;
    result.method = std::move(it->second.method);
    result.error.emplace();
    result.error->set_kind(kind);
    result.error->set_message(absl::StrCat(label, ": ", how,
                                           " before replying to req '", req_id,
                                           "' (", result.method, ")"));
    pending_.erase(it);
    result.req_id = std::move(req_id);
    ready_.push_back(std::move(result));
  }
  if (!failed.empty()) NotifyLocked();
}

void Supervisor::InitFailedLocked(Child& child, Incarnation& inc,
                                  const std::string& reason) {
  const std::string how = absl::StrCat("failed in init: ", reason);
  child.state = ChildState::kFailed;
  child.last_error = absl::StrCat(LabelLocked(child, &inc), ": ", how);
  spdlog::error("supervisor: {}", child.last_error);
  FailPendingLocked(child, inc, v1::WorkerError::KIND_INIT_FAILED, how);
  if (!inc.is_process) {
    // The thread has returned; a process is recorded when it is reaped.
    inc.ended = true;
    ++poll_version_;
    ++stats_.child_exits;
  }
  NotifyLocked();
}

void Supervisor::EndIncarnationLocked(Child& child, Incarnation& inc,
                                      const std::string& how, bool clean) {
  if (inc.ended) return;
  inc.ended = true;
  ++poll_version_;
  ++stats_.child_exits;
  const std::string label = LabelLocked(child, &inc);
  v1::WorkerError::Kind kind = v1::WorkerError::KIND_CHILD_EXITED;
  std::string what = how;
  if (child.current.get() == &inc) {
    if (!inc.stop_reason.empty()) {
      child.state = ChildState::kExited;
      child.last_error = clean ? "" : absl::StrCat(label, ": ", how);
    } else if (!inc.initialized) {
      kind = v1::WorkerError::KIND_INIT_FAILED;
      what = absl::StrCat(how, " during init");
      if (child.state != ChildState::kFailed) {
        child.state = ChildState::kFailed;
        child.last_error = absl::StrCat(label, ": ", what);
        spdlog::error("supervisor: {}", child.last_error);
      }
    } else {
      child.state = ChildState::kExited;
      child.last_error = absl::StrCat(label, ": ", how);
      spdlog::warn("supervisor: {}", child.last_error);
    }
  }
  FailPendingLocked(child, inc, kind, what);
  NotifyLocked();
}

// ---------------------------------------------------------------------------
// Sending.

absl::Status Supervisor::SendLocked(SendPayload& payload,
                                    std::shared_ptr<Incarnation>* incarnation) {
  if (!running_) {
    return absl::FailedPreconditionError(
        "supervisor: Send before StartLink or after Shutdown");
  }
  if (absl::Status status = CheckProcId(payload.proc_id); !status.ok()) {
    return status;
  }
  if (payload.method.empty() || payload.method == kShutdownMethod ||
      payload.method == kInitMethod) {
    return absl::InvalidArgumentError(absl::StrCat(
        "supervisor: cannot send method '", payload.method,
        "' (empty or reserved; use Restart or Shutdown to stop a child)"));
  }
  if (payload.req_id.empty()) {
    do {
      payload.req_id = absl::StrCat("#", next_req_id_++);
    } while (pending_.count(payload.req_id) != 0);
  } else if (pending_.count(payload.req_id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "supervisor: req_id '", payload.req_id, "' is already in flight"));
  }
  Child& child = *children_[payload.proc_id];
  const uint64_t seq = next_seq_++;
  const bool serving = child.current != nullptr && !child.current->ended &&
                       (child.state == ChildState::kStarting ||
                        child.state == ChildState::kRunning);
  if (!serving) {
    RecvPayload result;
    result.proc_id = payload.proc_id;
    result.req_id = payload.req_id;
    result.method = payload.method;
    result.error.emplace();
    result.error->set_kind(child.state == ChildState::kFailed
                               ? v1::WorkerError::KIND_INIT_FAILED
                               : v1::WorkerError::KIND_CHILD_EXITED);
    const std::string why = child.last_error.empty()
                                ? absl::StrCat(LabelLocked(child), ": is ",
                                               ChildStateName(child.state))
                                : child.last_error;
    result.error->set_message(absl::StrCat(why, "; req '", payload.req_id,
                                           "' (", payload.method,
                                           ") was not sent"));
    CompleteLocked(std::move(result));
    return absl::OkStatus();
  }
  pending_.emplace(payload.req_id,
                   PendingRequest{payload.proc_id, child.current->generation,
                                  seq, payload.method});
  *incarnation = child.current;
  return absl::OkStatus();
}

absl::Status Supervisor::Send(SendPayload& payload) {
  std::shared_ptr<Incarnation> inc;
  {
    MutexLock lock(&mu_);
    absl::Status status = SendLocked(payload, &inc);
    if (!status.ok() || inc == nullptr) return status;
  }
  if (!inc->is_process) {
    v1::WorkerRequest request;
    request.set_req_id(payload.req_id);
    request.set_method(payload.method);
    *request.mutable_args() = payload.args;
    inc->thread_channel->PushRequest(std::move(request));
    return absl::OkStatus();
  }

  absl::Status status;
  bool broken;
  {
    MutexLock write_lock(&inc->write_mu);
    inc->request.set_req_id(payload.req_id);
    inc->request.set_method(payload.method);
    *inc->request.mutable_args() = payload.args;
    status = inc->channel->Write(inc->request,
                                 RealDeadline(Now() + options_.send_timeout));
    broken = inc->channel->broken();
  }
  if (status.ok()) return absl::OkStatus();

  {
    MutexLock lock(&mu_);
    Child& child = *children_[payload.proc_id];
    if (absl::IsDeadlineExceeded(status) && !broken) {
      // Nothing was written: the stream is intact and the caller may retry.
      auto it = pending_.find(payload.req_id);
      if (it == pending_.end() || it->second.generation != inc->generation) {
        return absl::OkStatus();  // it already has a result (the child ended)
      }
      pending_.erase(it);
      return absl::DeadlineExceededError(
          absl::StrCat(LabelLocked(child), ": its channel did not accept req '",
                       payload.req_id, "' (", payload.method, ") within ",
                       FormatDuration(options_.send_timeout),
                       " (the child is not reading); it was not sent"));
    }
    if (absl::IsUnavailable(status)) {
      // The child closed its end: it is ending, and the request completes
      // with CHILD_EXITED once that is noticed.
      return absl::OkStatus();
    }
    // Cut short mid-frame, or an unexpected error: the child would misread
    // the stream, so it goes, and the request completes with CHILD_EXITED.
    if (inc->kill_reason.empty() && inc->stop_reason.empty()) {
      inc->kill_reason = absl::StrCat(
          "was killed by the supervisor: sending req '", payload.req_id,
          "' failed mid-frame (", status.message(), ")");
    }
  }
  MutexLock process_lock(&inc->process_mu);
  (void)inc->process->Signal(SIGKILL, /*group=*/true);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Reading the channels.

template <typename Predicate>
bool Supervisor::WaitLocked(TimePoint deadline, Predicate done) {
  for (;;) {
    if (done()) return true;
    if (Now() >= deadline) return false;
    if (!reading_) {
      reading_ = true;
      // Read under mu_, so a result completed after `done` was checked
      // counts as news for PollOnce.
      const uint64_t seen = waker_->seq();
      mu_.Unlock();
      PollOnce(deadline, seen);
      mu_.Lock();
      reading_ = false;
      // Another waiter may need to take the reader role over.
      if (waiters_ > 0) cv_.SignalAll();
    } else {
      ++waiters_;
      cv_.WaitWithDeadline(&mu_,
                           absl::FromChrono(ToSystem(RealDeadline(deadline))));
      --waiters_;
    }
  }
}

void Supervisor::PollNow() {
  uint64_t seen;
  {
    MutexLock lock(&mu_);
    if (reading_) return;  // the reader keeps everything current
    reading_ = true;
    seen = waker_->seq();
  }
  PollOnce(Now(), seen);
  MutexLock lock(&mu_);
  reading_ = false;
  if (waiters_ > 0) cv_.SignalAll();
}

void Supervisor::RebuildPollTargets() {
  std::vector<PollTarget> old;
  MutexLock lock(&mu_);
  if (poll_targets_version_ == poll_version_) return;
  old.swap(poll_targets_);  // released after the lock
  for (auto& child : children_) {
    if (child->current != nullptr && !child->current->ended) {
      poll_targets_.push_back(PollTarget{child.get(), child->current});
    }
  }
  poll_targets_version_ = poll_version_;
}

void Supervisor::PollOnce(TimePoint deadline, uint64_t seen) {
  RebuildPollTargets();

  // pollfds_: per process target its channel (unless closed) and its pidfd
  // (until reaped), then the waker.
  std::vector<struct pollfd>& fds = pollfds_;
  std::vector<std::pair<size_t, bool>>& fd_targets = pollfd_targets_;
  fds.clear();
  fd_targets.clear();
  // The blocking wait also ends when an exit grace does.
  RealClock::time_point wake_by = RealDeadline(deadline);
  for (size_t i = 0; i < poll_targets_.size(); ++i) {
    Incarnation& inc = *poll_targets_[i].incarnation;
    if (!inc.is_process) continue;
    if (inc.exit_grace_end.has_value()) {
      wake_by = std::min(wake_by, *inc.exit_grace_end);
    }
    if (!inc.channel_closed) {
      fds.push_back({inc.channel->fd(), POLLIN, 0});
      fd_targets.emplace_back(i, false);
    }
    if (!inc.reaped) {
      fds.push_back({inc.pidfd, POLLIN, 0});
      fd_targets.emplace_back(i, true);
    }
  }
  const size_t process_fds = fds.size();
  fds.push_back({waker_->fd(), POLLIN, 0});

  // A thread child that replied before `seen` was taken left its flag set.
  bool ready = false;
  for (const PollTarget& target : poll_targets_) {
    if (!target.incarnation->is_process &&
        target.incarnation->thread_channel->has_replies()) {
      ready = true;
      break;
    }
  }
  if (!ready && options_.spin.count() > 0 && Now() < deadline) {
    const RealClock::time_point spin_end = RealClock::now() + options_.spin;
    struct timespec zero = {0, 0};
    for (;;) {
      if (waker_->seq() != seen) {
        ready = true;
        break;
      }
      if (process_fds > 0 &&
          ppoll(fds.data(), process_fds, &zero, nullptr) > 0) {
        ready = true;
        break;
      }
      if (RealClock::now() >= spin_end || Now() >= deadline) break;
      supervisor_internal::SpinPause();
    }
  }
  if (!ready) {
    waker_->SetBlocked(true);
    if (waker_->seq() == seen) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
          wake_by - RealClock::now());
      const int64_t ns = std::max<int64_t>(0, left.count());
      struct timespec timeout = {static_cast<time_t>(ns / 1000000000),
                                 static_cast<long>(ns % 1000000000)};
      if (ppoll(fds.data(), fds.size(), &timeout, nullptr) < 0) {
        for (struct pollfd& pfd : fds) pfd.revents = 0;
      }
    }
    waker_->SetBlocked(false);
    if (fds.back().revents != 0) waker_->Drain();
  }

  for (size_t k = 0; k < process_fds; ++k) {
    if (fds[k].revents == 0) continue;
    PollTarget& target = poll_targets_[fd_targets[k].first];
    // Replies written before an exit are in the channel: read them first.
    ReadProcessChannel(target);
    if (fd_targets[k].second) ReapProcess(target);
  }
  for (PollTarget& target : poll_targets_) {
    if (target.incarnation->is_process) {
      KillIfGraceOver(target);
    } else if (target.incarnation->thread_channel->has_replies()) {
      ReadThreadChannel(target);
    }
  }
}

void Supervisor::ReadProcessChannel(PollTarget& target) {
  Incarnation& inc = *target.incarnation;
  if (inc.channel_closed) return;
  size_t count = 0;
  absl::Status error;
  while (count < kFramesPerRound) {
    if (frames_.size() <= count) frames_.emplace_back();
    absl::StatusOr<bool> got = inc.channel->TryRead(&frames_[count]);
    if (!got.ok()) {
      error = got.status();
      break;
    }
    if (!*got) break;
    ++count;
  }
  if (count == 0 && error.ok()) return;

  if (!DispatchFrames(target, count, error)) return;
  MutexLock process_lock(&inc.process_mu);
  (void)inc.process->Signal(SIGKILL, /*group=*/true);
}

bool Supervisor::DispatchFrames(PollTarget& target, size_t count,
                                const absl::Status& error) {
  Incarnation& inc = *target.incarnation;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < count; ++i) {
    DispatchLocked(*target.child, inc, frames_[i]);
  }
  if (error.ok()) return false;
  inc.channel_closed = true;
  const std::string label = LabelLocked(*target.child);
  if (inc.channel->peer_closed()) {
    if (inc.channel->partial_bytes() > 0) {
      ++stats_.partial_frames_discarded;
      spdlog::warn(
          "supervisor: {}: discarded a partial frame of {} bytes left by its "
          "end",
          label, inc.channel->partial_bytes());
    }
  } else if (inc.kill_reason.empty() && inc.stop_reason.empty()) {
    inc.kill_reason =
        absl::StrCat("was killed by the supervisor: its channel failed (",
                     error.message(), ")");
  }
  if (!inc.stop_reason.empty()) return false;
  // A child without its channel cannot serve. One that is exiting closes its
  // fds a moment before it can be reaped, so it gets a short grace (enforced
  // by PollOnce, which keeps reading the others meanwhile); a broken channel
  // means the child goes now. Either way it is recorded once reaped.
  if (inc.kill_reason.empty()) {
    inc.exit_grace_end = RealClock::now() + kExitGrace;
    return false;
  }
  return true;
}

void Supervisor::KillIfGraceOver(PollTarget& target) {
  Incarnation& inc = *target.incarnation;
  if (!inc.exit_grace_end.has_value() || inc.reaped ||
      RealClock::now() < *inc.exit_grace_end) {
    return;
  }
  inc.exit_grace_end.reset();
  {
    MutexLock lock(&mu_);
    if (!inc.stop_reason.empty()) return;  // a stop takes care of it
    inc.kill_reason = absl::StrCat(
        "was killed by the supervisor: it closed its channel and was still "
        "running ",
        FormatDuration(kExitGrace), " later");
  }
  MutexLock process_lock(&inc.process_mu);
  (void)inc.process->Signal(SIGKILL, /*group=*/true);
}

void Supervisor::ReapProcess(PollTarget& target) {
  Incarnation& inc = *target.incarnation;
  std::optional<ExitStatus> status;
  {
    MutexLock process_lock(&inc.process_mu);
    status = inc.process->Poll();
    if (status.has_value()) (void)inc.process->Signal(SIGKILL, /*group=*/true);
  }
  if (!status.has_value()) return;
  inc.reaped = true;
  MutexLock lock(&mu_);
  inc.exit_status = status;
  // A stop under way records the end itself, with what it took.
  if (!inc.stop_reason.empty()) return;
  std::string how;
  if (!inc.kill_reason.empty() && status->signal == SIGKILL) {
    how = inc.kill_reason;
  } else {
    how = DescribeExit(*status);
  }
  EndIncarnationLocked(*target.child, inc, how, /*clean=*/false);
}

void Supervisor::ReadThreadChannel(PollTarget& target) {
  Incarnation& inc = *target.incarnation;
  thread_replies_.clear();
  inc.thread_channel->TakeReplies(thread_replies_);
  if (thread_replies_.empty()) return;
  MutexLock lock(&mu_);
  for (v1::WorkerReply& reply : thread_replies_) {
    DispatchLocked(*target.child, inc, reply);
  }
  thread_replies_.clear();
}

void Supervisor::DispatchLocked(Child& child, Incarnation& inc,
                                v1::WorkerReply& reply) {
  if (inc.ended || child.current.get() != &inc) {
    ++stats_.dropped_replies;
    reply.clear_data();  // the reused buffer keeps no large value
    return;
  }
  if (reply.req_id().empty() && reply.method() == kInitMethod) {
    if (reply.has_error()) {
      InitFailedLocked(child, inc, reply.error().message());
    } else if (!inc.initialized) {
      inc.initialized = true;
      if (child.state == ChildState::kStarting) {
        child.state = ChildState::kRunning;
      }
      NotifyLocked();
    }
    return;
  }
  if (!inc.initialized) {
    // A child without the handshake: its first reply shows it serves.
    inc.initialized = true;
    if (child.state == ChildState::kStarting)
      child.state = ChildState::kRunning;
  }
  auto it = pending_.find(reply.req_id());
  if (it == pending_.end() || it->second.proc_id != child.proc_id ||
      it->second.generation != inc.generation) {
    ++stats_.dropped_replies;
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug(
          "supervisor: {}: dropped a reply to req '{}' ({}): no such request "
          "in flight",
          LabelLocked(child), reply.req_id(), reply.method());
    }
    reply.clear_data();
    return;
  }
  RecvPayload result;
  result.proc_id = child.proc_id;
  result.method = std::move(it->second.method);
  pending_.erase(it);
  result.req_id = std::move(*reply.mutable_req_id());
  if (reply.has_error()) {
    result.error.emplace();
    result.error->set_kind(reply.error().kind());
    const bool failed = reply.error().kind() == v1::WorkerError::KIND_FAILED;
    result.error->set_message(absl::StrCat(
        LabelLocked(child), ": req '", result.req_id, "' (", result.method,
        failed ? ") failed: " : "): ", reply.error().message()));
  } else {
    result.data.Swap(reply.mutable_data());
  }
  CompleteLocked(std::move(result));
}

// ---------------------------------------------------------------------------
// Receiving.

absl::StatusOr<RecvPayload> Supervisor::TakeResult(RecvPayload result,
                                                   bool ignore_err) {
  if (result.error.has_value() && !ignore_err) {
    return WorkerErrorToStatus(*result.error);
  }
  return result;
}

absl::StatusOr<RecvPayload> Supervisor::Recv(bool ignore_err,
                                             std::optional<Duration> timeout) {
  const TimePoint deadline = DeadlineAfter(timeout);
  ReleasableMutexLock lock(&mu_);
  auto next = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (claimed_.empty()) return ready_.begin();
    return std::find_if(ready_.begin(), ready_.end(),
                        [this](const RecvPayload& result)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                              return claimed_.count(result.req_id) == 0;
                            });
  };
  if (!running_ && next() == ready_.end()) {
    return absl::FailedPreconditionError(
        "supervisor: Recv with nothing to receive and no child running");
  }
  if (!WaitLocked(deadline, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return next() != ready_.end();
      })) {
    return absl::DeadlineExceededError(
        absl::StrCat("supervisor: Recv: no result within ",
                     FormatDuration(timeout.value_or(options_.default_timeout)),
                     " (", pending_.size(), " request(s) in flight)"));
  }
  auto it = next();
  RecvPayload result = std::move(*it);
  ready_.erase(it);
  lock.Release();
  return TakeResult(std::move(result), ignore_err);
}

absl::Status RecvAllHandle::Send(SendPayload& payload) {
  Supervisor& supervisor = *call_->supervisor;
  {
    MutexLock lock(&supervisor.mu_);
    if (payload.req_id.empty()) {
      do {
        payload.req_id = absl::StrCat("#", supervisor.next_req_id_++);
      } while (supervisor.pending_.count(payload.req_id) != 0);
    }
    if (call_->wanted.count(payload.req_id) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "supervisor: req '", payload.req_id, "' is already awaited"));
    }
    // Claimed before it is sent, so a concurrent Recv cannot take its result.
    call_->wanted.emplace(payload.req_id,
                          Call::Wanted{payload.proc_id, payload.method, -1});
    supervisor.claimed_.insert(payload.req_id);
  }
  absl::Status status = supervisor.Send(payload);
  if (!status.ok()) {
    MutexLock lock(&supervisor.mu_);
    call_->wanted.erase(payload.req_id);
    supervisor.claimed_.erase(payload.req_id);
  }
  return status;
}

absl::Status RecvAllHandle::Add(const SendPayload& payload) {
  Supervisor& supervisor = *call_->supervisor;
  MutexLock lock(&supervisor.mu_);
  if (payload.req_id.empty()) {
    return absl::InvalidArgumentError(
        "supervisor: RecvAll can only wait for a request with a req_id");
  }
  if (!call_->wanted
           .emplace(payload.req_id,
                    Call::Wanted{payload.proc_id, payload.method, -1})
           .second) {
    return absl::InvalidArgumentError(absl::StrCat(
        "supervisor: req '", payload.req_id, "' is already awaited"));
  }
  supervisor.claimed_.insert(payload.req_id);
  return absl::OkStatus();
}

size_t RecvAllHandle::remaining() const {
  MutexLock lock(&call_->supervisor->mu_);
  return call_->wanted.size();
}

// What one RecvAll is collecting: results by payload, and each round's
// arrivals with what was awaited.
struct Supervisor::RecvAllState {
  RecvAllHandle::Call call;
  std::vector<std::optional<RecvPayload>> results;
  std::vector<std::pair<RecvPayload, RecvAllHandle::Call::Wanted>> arrived;
};

absl::StatusOr<std::vector<RecvPayload>> Supervisor::RecvAll(
    const std::vector<SendPayload>& payloads, bool ignore_err,
    const RecvAllCallback& callback, std::optional<Duration> timeout) {
  if (payloads.empty()) {
    return absl::InvalidArgumentError("supervisor: RecvAll of no requests");
  }
  const TimePoint deadline = DeadlineAfter(timeout);
  const std::string within =
      FormatDuration(timeout.value_or(options_.default_timeout));
  RecvAllState state;
  state.call.supervisor = this;
  state.results.resize(payloads.size());
  RecvAllHandle handle(&state.call);

  MutexLock lock(&mu_);
  if (absl::Status claimed = ClaimLocked(payloads, state.call); !claimed.ok()) {
    return claimed;
  }
  auto has_arrival = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const RecvPayload& result : ready_) {
      if (state.call.wanted.count(result.req_id) != 0) return true;
    }
    return false;
  };
  while (!state.call.wanted.empty()) {
    state.arrived.clear();
    if (WaitLocked(deadline, has_arrival)) {
      TakeArrivalsLocked(state);
    } else if (!ignore_err) {
      const absl::Status status = TimeoutLocked(state, payloads.size(), within);
      GiveBackLocked(state, 0);
      return status;
    } else {
      TimeOutAwaitedLocked(state, within);
    }
    // The callback runs without the lock: it may send more requests.
    mu_.Unlock();
    const absl::Status delivered = Deliver(state, ignore_err, callback, handle);
    mu_.Lock();
    if (!delivered.ok()) return delivered;
  }
  std::vector<RecvPayload> ordered;
  ordered.reserve(state.results.size());
  for (std::optional<RecvPayload>& result : state.results) {
    ordered.push_back(std::move(*result));
  }
  return ordered;
}

absl::Status Supervisor::ClaimLocked(const std::vector<SendPayload>& payloads,
                                     RecvAllHandle::Call& call) {
  for (size_t i = 0; i < payloads.size(); ++i) {
    const SendPayload& payload = payloads[i];
    absl::Status invalid;
    if (payload.req_id.empty()) {
      invalid = absl::InvalidArgumentError(absl::StrCat(
          "supervisor: RecvAll: payload ", i,
          " has no req_id (Send assigns one; send before waiting)"));
    } else if (!call.wanted
                    .emplace(payload.req_id,
                             RecvAllHandle::Call::Wanted{payload.proc_id,
                                                         payload.method,
                                                         static_cast<int>(i)})
                    .second) {
      invalid = absl::InvalidArgumentError(absl::StrCat(
          "supervisor: RecvAll: req_id '", payload.req_id, "' appears twice"));
    }
    if (!invalid.ok()) {
      for (const auto& [req_id, wanted] : call.wanted) claimed_.erase(req_id);
      return invalid;
    }
    claimed_.insert(payload.req_id);
  }
  return absl::OkStatus();
}

void Supervisor::TakeArrivalsLocked(RecvAllState& state) {
  auto& wanted_by_id = state.call.wanted;
  for (auto it = ready_.begin(); it != ready_.end();) {
    auto wanted = wanted_by_id.find(it->req_id);
    if (wanted == wanted_by_id.end()) {
      ++it;
      continue;
    }
    state.arrived.emplace_back(std::move(*it), std::move(wanted->second));
    claimed_.erase(wanted->first);
    wanted_by_id.erase(wanted);
    it = ready_.erase(it);
  }
}

absl::Status Supervisor::TimeoutLocked(const RecvAllState& state,
                                       size_t payloads,
                                       const std::string& within) const {
  std::vector<std::string> listed;
  for (const auto& [req_id, wanted] : state.call.wanted) {
    if (listed.size() == kListedRequests) {
      listed.push_back("...");
      break;
    }
    listed.push_back(absl::StrCat("'", req_id, "' (child ", wanted.proc_id,
                                  ", ", wanted.method, ")"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "supervisor: RecvAll: no reply within ", within,
      " (the call's total timeout) to ", state.call.wanted.size(), " of ",
      payloads, " request(s): ", absl::StrJoin(listed, ", ")));
}

void Supervisor::TimeOutAwaitedLocked(RecvAllState& state,
                                      const std::string& within) {
  // Every request still awaited times out now; its late reply, if any, is
  // dropped (each request has exactly one result).
  for (auto& [req_id, wanted] : state.call.wanted) {
    RecvPayload result;
    result.proc_id = wanted.proc_id;
    result.req_id = req_id;
    result.method = wanted.method;
    result.error.emplace();
    result.error->set_kind(v1::WorkerError::KIND_TIMEOUT);
    std::string label = absl::StrCat("child ", wanted.proc_id);
    if (CheckProcId(wanted.proc_id).ok()) {
      label = LabelLocked(*children_[wanted.proc_id]);
    }
    result.error->set_message(
        absl::StrCat(label, ": no reply to req '", req_id, "' (", wanted.method,
                     ") within ", within, " (the call's total timeout)"));
    auto pending = pending_.find(req_id);
    if (pending != pending_.end() &&
        pending->second.proc_id == wanted.proc_id) {
      pending_.erase(pending);
    }
    claimed_.erase(req_id);
    state.arrived.emplace_back(std::move(result), std::move(wanted));
  }
  state.call.wanted.clear();
}

absl::Status Supervisor::Deliver(RecvAllState& state, bool ignore_err,
                                 const RecvAllCallback& callback,
                                 RecvAllHandle& handle) {
  for (size_t k = 0; k < state.arrived.size(); ++k) {
    RecvPayload& result = state.arrived[k].first;
    if (result.error.has_value() && !ignore_err) {
      const absl::Status status = WorkerErrorToStatus(*result.error);
      MutexLock lock(&mu_);
      GiveBackLocked(state, k + 1);
      return status;
    }
    const int index = state.arrived[k].second.index;
    const RecvPayload* seen = &result;
    if (index >= 0) {
      state.results[index] = std::move(result);
      seen = &*state.results[index];
    }
    if (callback) callback(*seen, handle);
  }
  return absl::OkStatus();
}

void Supervisor::GiveBackLocked(RecvAllState& state, size_t from) {
  // Ends the call early: every result it took goes back for Recv, and nothing
  // stays claimed.
  for (size_t k = state.arrived.size(); k > from; --k) {
    ready_.push_front(std::move(state.arrived[k - 1].first));
  }
  for (size_t i = state.results.size(); i > 0; --i) {
    if (state.results[i - 1].has_value()) {
      ready_.push_front(std::move(*state.results[i - 1]));
    }
  }
  for (const auto& [req_id, wanted] : state.call.wanted) claimed_.erase(req_id);
  state.call.wanted.clear();
  NotifyLocked();
}

absl::StatusOr<WorkerValue> Supervisor::GetAttr(
    int proc_id, const std::string& key, std::optional<Duration> timeout) {
  std::vector<SendPayload> payloads(1);
  payloads[0].proc_id = proc_id;
  payloads[0].method = kGetAttrMethod;
  *payloads[0].args.add_values() = StringValue(key);
  if (absl::Status status = Send(payloads[0]); !status.ok()) return status;
  absl::StatusOr<std::vector<RecvPayload>> results =
      RecvAll(payloads, /*ignore_err=*/false, nullptr, timeout);
  if (!results.ok()) return results.status();
  return std::move((*results)[0].data);
}

absl::StatusOr<std::vector<WorkerValue>> Supervisor::GetAttrAll(
    const std::string& key, std::optional<Duration> timeout) {
  std::vector<SendPayload> payloads(size());
  for (size_t i = 0; i < payloads.size(); ++i) {
    payloads[i].proc_id = static_cast<int>(i);
    payloads[i].method = kGetAttrMethod;
    *payloads[i].args.add_values() = StringValue(key);
  }
  if (payloads.empty()) return std::vector<WorkerValue>();
  std::vector<SendPayload> sent;
  for (SendPayload& payload : payloads) {
    absl::Status status = Send(payload);
    if (!status.ok()) {
      // Collect what was sent so no result is left behind for Recv.
      if (!sent.empty())
        (void)RecvAll(sent, /*ignore_err=*/true, nullptr, timeout);
      return status;
    }
    sent.push_back(payload);
  }
  absl::StatusOr<std::vector<RecvPayload>> results =
      RecvAll(payloads, /*ignore_err=*/false, nullptr, timeout);
  if (!results.ok()) return results.status();
  std::vector<WorkerValue> values;
  values.reserve(results->size());
  for (RecvPayload& result : *results) values.push_back(std::move(result.data));
  return values;
}

// ---------------------------------------------------------------------------
// Child state.

absl::StatusOr<ChildStatus> Supervisor::GetChildStatus(int proc_id) {
  {
    MutexLock lock(&mu_);
    if (absl::Status status = CheckProcId(proc_id); !status.ok()) return status;
  }
  PollNow();
  MutexLock lock(&mu_);
  return StatusLocked(*children_[proc_id]);
}

absl::Status Supervisor::WaitRunning(int proc_id,
                                     std::optional<Duration> timeout) {
  const TimePoint deadline = DeadlineAfter(timeout);
  MutexLock lock(&mu_);
  if (absl::Status status = CheckProcId(proc_id); !status.ok()) return status;
  const Child& child = *children_[proc_id];
  auto settled = [&child]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return child.state == ChildState::kRunning ||
           child.state == ChildState::kExited ||
           child.state == ChildState::kFailed ||
           child.state == ChildState::kRegistered;
  };
  if (!WaitLocked(deadline, settled)) {
    return absl::DeadlineExceededError(
        absl::StrCat(LabelLocked(child), ": not running within ",
                     FormatDuration(timeout.value_or(options_.default_timeout)),
                     " (state ", ChildStateName(child.state), ")"));
  }
  if (child.state == ChildState::kRunning) return absl::OkStatus();
  if (!child.last_error.empty()) {
    return absl::FailedPreconditionError(child.last_error);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(LabelLocked(child), ": is ", ChildStateName(child.state)));
}

absl::StatusOr<ChildStatus> Supervisor::WaitExited(
    int proc_id, std::optional<Duration> timeout) {
  const TimePoint deadline = DeadlineAfter(timeout);
  MutexLock lock(&mu_);
  if (absl::Status status = CheckProcId(proc_id); !status.ok()) return status;
  const Child& child = *children_[proc_id];
  auto ended = [&child]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return child.state == ChildState::kExited ||
           child.state == ChildState::kFailed ||
           child.state == ChildState::kRegistered;
  };
  if (!WaitLocked(deadline, ended)) {
    return absl::DeadlineExceededError(absl::StrCat(
        LabelLocked(child), ": still ", ChildStateName(child.state), " after ",
        FormatDuration(timeout.value_or(options_.default_timeout))));
  }
  return StatusLocked(child);
}

SupervisorStats Supervisor::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace aggregator
