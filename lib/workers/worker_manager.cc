#include "lib/workers/worker_manager.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/ops/logging.h"
#include "lib/supervisor/worker_channel.h"
#include "lib/workers/restart_policy.h"
#include "lib/workers/worker_output.h"
#include "lib/workers/worker_program.h"
#include "proto/worker.pb.h"
#include "proto/worker_names.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;
using TimePoint = Clock::TimePoint;

// Read at most this much of one stream per wake-up, so one chatty child cannot
// starve the others.
constexpr size_t kReadBudget = 64 * 1024;
// After an exit, what is already in the pipe is logged up to this much.
constexpr size_t kDrainBudget = 1024 * 1024;
// Channel frames handled per wake-up of one replica, so none starves another.
constexpr size_t kChannelBudget = 16;
// New replicas started per round of the loop: a worker of hundreds of replicas
// starts over many rounds, so Apply (and the listeners, at start-up) never
// waits for all of them, and exits and commands are handled in between.
constexpr int kStartsPerRound = 8;
// How long SIGKILLed processes get to be reaped once Shutdown's deadline has
// passed before the manager gives up waiting on them.
constexpr milliseconds kKillWait(5000);
// Nothing is due: look again this often anyway, so no wait is unbounded.
constexpr milliseconds kIdleWait(60000);
// Apply waits this long for the manager thread to take the new specs.
constexpr std::chrono::seconds kCommandTimeout(30);

// "1.5s", "250ms", "1m"; "0s" rather than absl's bare "0".
std::string FormatMs(std::chrono::nanoseconds duration) {
  const int64_t ms = std::chrono::duration_cast<milliseconds>(duration).count();
  if (ms == 0) return "0s";
  return absl::FormatDuration(absl::Milliseconds(ms));
}

bool UsesPort(const WorkerSpec& spec) {
  auto uses = [](const std::string& text) {
    return text.find("{port}") != std::string::npos;
  };
  if (std::any_of(spec.command.begin(), spec.command.end(), uses)) return true;
  if (uses(spec.cwd)) return true;
  return std::any_of(spec.env.begin(), spec.env.end(),
                     [&](const auto& kv) { return uses(kv.second); });
}

// Everything but `replicas` is the same: the running replicas can stay.
bool SameExceptReplicas(const WorkerSpec& a, const WorkerSpec& b) {
  return a.FieldsButReplicas() == b.FieldsButReplicas();
}

absl::Status ValidateSpecs(const std::vector<WorkerSpec>& specs) {
  std::set<std::string> names;
  for (const WorkerSpec& spec : specs) {
    const std::string where = absl::StrCat("worker \"", spec.name, "\"");
    if (spec.name.empty()) {
      return absl::InvalidArgumentError("a worker has an empty name");
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is given twice; names must be unique"));
    }
    if (spec.command.empty() || spec.command[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the command has no program"));
    }
    if (spec.replicas < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": replicas must not be negative, got ", spec.replicas));
    }
    if ((spec.learner || UsesPort(spec)) && spec.port_base <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       ": uses {port} or is a learner, but has no "
                       "port_base"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting:
      return "starting";
    case WorkerState::kRunning:
      return "running";
    case WorkerState::kBackoff:
      return "backoff";
    case WorkerState::kStopped:
      return "stopped";
    case WorkerState::kFailed:
      return "failed";
  }
  return "unknown";
}

// One replica: its process (if any) and its restart bookkeeping.
struct WorkerManager::Replica {
  Replica(const std::string& name, int index, const Clock* clock)
      : index(index),
        label(absl::StrCat(name, "-", index)),
        // Kept across restarts: a crash loop does not refill the bucket.
        output(
            WorkerOutputOptions{}, clock,
            [this, name](const std::string& line) {
              // log.format: json gives the worker and replica as fields.
              ScopedLogFields fields(
                  {{"worker", name}, {"replica", absl::StrCat(this->index)}});
              spdlog::info("[{}] {}", label, line);
            }) {}

  const int index;
  const std::string label;                 // "<name>-<index>", for logs
  std::shared_ptr<const WorkerSpec> spec;  // what it runs
  WorkerState state = WorkerState::kStarting;
  std::unique_ptr<Subprocess> process;  // stop escalation: see Subprocess
  bool out_open = false;
  bool err_open = false;
  WorkerOutput output;  // its stdout and stderr, as log lines
  TimePoint started_at{};
  // STARTING: when it counts as running. BACKOFF: when it restarts.
  TimePoint due{};
  // New, waiting for its turn to start (StartPending); STARTING meanwhile.
  bool start_pending = false;
  AfterStop after_stop = AfterStop::kStay;
  // channel: true: the daemon's end of the worker channel while it runs, and
  // the port it announced on it (a learner worker joins the pool then).
  std::unique_ptr<WorkerChannel> channel;
  std::optional<int> announced_port;
  int restarts = 0;
  RestartHistory history;
  std::string last_error;

  // SIGTERM sent, waiting for the exit.
  bool stopping() const { return process != nullptr && process->stopping(); }
};

struct WorkerManager::Worker {
  // nullptr once removed; kept until its replicas have stopped.
  std::shared_ptr<const WorkerSpec> spec;
  std::map<int, std::unique_ptr<Replica>> replicas;
};

WorkerManager::WorkerManager(WorkerManagerOptions options)
    : options_(std::move(options)),
      clock_(&ClockOrSteady(options_.clock)),
      loop_(ChildLoop::Options{options_.clock, std::chrono::nanoseconds(0),
                               kChannelBudget, kIdleWait}) {
  if (!loop_.ok()) {
    // Without it commands would wait for the idle timeout; say so loudly.
    spdlog::critical("worker manager: eventfd failed: {}",
                     std::string(strerror(loop_.waker()->error())));
  }
  thread_ = std::thread(&WorkerManager::Run, this);
}

WorkerManager::~WorkerManager() {
  milliseconds longest;
  {
    MutexLock lock(&mu_);
    longest = longest_stop_timeout_;
  }
  Shutdown(Steady::now() + longest);
}

bool WorkerManager::AwaitHandled(uint64_t seq, Steady::time_point deadline) {
  auto handled = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return handled_seq_ >= seq || done_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&handled), TimeUntil(deadline));
}

absl::Status WorkerManager::Apply(std::vector<WorkerSpec> specs) {
  if (absl::Status status = ValidateSpecs(specs); !status.ok()) return status;
  milliseconds longest(0);
  for (const WorkerSpec& spec : specs) {
    longest = std::max(longest, spec.stop_timeout);
  }
  MutexLock lock(&mu_);
  if (shutdown_deadline_.has_value() || done_) {
    return absl::FailedPreconditionError(
        "worker manager: Apply after Shutdown; workers are not started");
  }
  pending_specs_ = std::move(specs);
  longest_stop_timeout_ = std::max(longest_stop_timeout_, longest);
  const uint64_t seq = ++next_seq_;
  loop_.Wake();
  if (!AwaitHandled(seq, Steady::now() + kCommandTimeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "worker manager: the new worker specs were not taken up within ",
        kCommandTimeout.count(), "s"));
  }
  return absl::OkStatus();
}

std::vector<WorkerSnapshot> WorkerManager::Status() const {
  MutexLock lock(&mu_);
  return status_;
}

std::vector<LearnerEndpoint> WorkerManager::LearnerEndpoints() const {
  MutexLock lock(&mu_);
  return endpoints_;
}

absl::Status WorkerManager::Sync(Steady::time_point deadline) {
  MutexLock lock(&mu_);
  const uint64_t seq = ++next_seq_;
  loop_.Wake();
  if (!AwaitHandled(seq, deadline)) {
    return absl::DeadlineExceededError(
        "worker manager: the manager thread did not catch up before the "
        "deadline");
  }
  return absl::OkStatus();
}

void WorkerManager::Shutdown(Steady::time_point deadline) {
  MutexLock serial(&shutdown_mu_);
  {
    MutexLock lock(&mu_);
    if (!shutdown_deadline_.has_value()) shutdown_deadline_ = deadline;
    ++next_seq_;
  }
  loop_.Wake();
  // The manager thread bounds its own end: SIGKILL at the deadline, then at
  // most kKillWait (plus Subprocess's own kill wait) for the reaping.
  if (thread_.joinable()) thread_.join();
}

void WorkerManager::Run() {
  for (;;) {
    // Before the commands are read: a command sent after this wakes the
    // round's wait.
    const uint64_t seen = loop_.wake_seq();
    std::optional<std::vector<WorkerSpec>> specs;
    std::optional<Steady::time_point> shutdown;
    uint64_t seq;
    {
      MutexLock lock(&mu_);
      specs = std::move(pending_specs_);
      pending_specs_.reset();
      shutdown = shutdown_deadline_;
      seq = next_seq_;
    }
    if (specs.has_value() && !stopping_all_) Reconcile(*specs);
    if (shutdown.has_value() && !stopping_all_) {
      stopping_all_ = true;
      stop_deadline_ = *shutdown;
      if (!workers_.empty()) spdlog::info("stopping all workers");
      for (auto& [name, worker] : workers_) {
        for (auto& [index, replica] : worker->replicas) {
          Stop(*worker, *replica, AfterStop::kStay);
        }
      }
    }
    RunDueTimers();
    if (!stopping_all_) StartPending();
    bool finished = stopping_all_ && !AnyProcess();
    if (stopping_all_ && !finished) {
      const Steady::time_point now = Steady::now();
      if (now >= stop_deadline_) {
        for (auto& [name, worker] : workers_) {
          for (auto& [index, replica] : worker->replicas) {
            if (replica->process != nullptr && !replica->process->killed()) {
              spdlog::warn(
                  "worker {} (pid {}): shutdown deadline reached; "
                  "sending SIGKILL to its process group",
                  replica->label, replica->process->pid());
              replica->process->Kill();
            }
          }
        }
      }
      if (now >= stop_deadline_ + kKillWait) {
        // Stuck in the kernel: Subprocess's destructor makes a last attempt.
        for (auto& [name, worker] : workers_) {
          for (auto& [index, replica] : worker->replicas) {
            if (replica->process == nullptr) continue;
            spdlog::error(
                "worker {} (pid {}) was not reaped {}ms after "
                "SIGKILL; giving up on it",
                replica->label, replica->process->pid(), kKillWait.count());
            CloseProcess(*replica);
            replica->state = WorkerState::kStopped;
          }
        }
        finished = true;
      }
    }
    // Removed workers whose replicas have all stopped.
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->second->spec == nullptr && it->second->replicas.empty()) {
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    const bool changed = Publish(seq);
    if (changed && options_.on_change) options_.on_change();
    if (finished) break;
    PollOnce(seen);
  }
  if (!workers_.empty()) spdlog::info("all workers stopped");
  MutexLock lock(&mu_);
  done_ = true;
}

void WorkerManager::Reconcile(const std::vector<WorkerSpec>& specs) {
  std::set<std::string> names;
  order_.clear();
  for (const WorkerSpec& spec : specs) {
    names.insert(spec.name);
    order_.push_back(spec.name);
    std::unique_ptr<Worker>& slot = workers_[spec.name];
    if (slot == nullptr) slot = std::make_unique<Worker>();
    Worker& worker = *slot;
    auto shared = std::make_shared<const WorkerSpec>(spec);
    if (worker.spec == nullptr || *worker.spec != spec) {
      spdlog::info("worker {}: {} replica(s) of {}", spec.name, spec.replicas,
                   absl::StrJoin(spec.command, " "));
    }
    worker.spec = shared;
    std::vector<int> indices;
    for (const auto& [index, replica] : worker.replicas) {
      indices.push_back(index);
    }
    for (int index : indices) {
      auto it = worker.replicas.find(index);
      if (it == worker.replicas.end()) continue;
      Replica& replica = *it->second;
      if (index >= spec.replicas) {
        Stop(worker, replica, AfterStop::kRemove);
      } else if (replica.stopping()) {
        // Stopping for an earlier change: it comes back with this spec.
        replica.after_stop = AfterStop::kRestart;
      } else if (!SameExceptReplicas(*replica.spec, spec)) {
        Stop(worker, replica, AfterStop::kRestart);
      } else {
        replica.spec = shared;
      }
    }
    for (int index = 0; index < spec.replicas; ++index) {
      if (worker.replicas.count(index) != 0) continue;
      auto replica = std::make_unique<Replica>(spec.name, index, clock_);
      replica->spec = shared;
      Replica& ref = *replica;
      worker.replicas.emplace(index, std::move(replica));
      ref.start_pending = true;
    }
  }
  for (auto& [name, worker] : workers_) {
    if (names.count(name) != 0 || worker->spec == nullptr) continue;
    spdlog::info("worker {}: removed; stopping its replicas", name);
    worker->spec = nullptr;
    std::vector<int> indices;
    for (const auto& [index, replica] : worker->replicas) {
      indices.push_back(index);
    }
    for (int index : indices) {
      auto it = worker->replicas.find(index);
      if (it != worker->replicas.end()) {
        Stop(*worker, *it->second, AfterStop::kRemove);
      }
    }
  }
}

void WorkerManager::StartPending() {
  int budget = kStartsPerRound;
  for (const std::string& name : order_) {
    auto it = workers_.find(name);
    if (it == workers_.end()) continue;
    for (auto& [index, replica] : it->second->replicas) {
      if (!replica->start_pending) continue;
      if (budget-- == 0) return;
      StartReplica(*it->second, *replica);
    }
  }
}

void WorkerManager::StartReplica(Worker& worker, Replica& replica) {
  const WorkerSpec& spec = *replica.spec;
  const TimePoint now = clock_->Now();
  replica.start_pending = false;
  replica.state = WorkerState::kStarting;
  replica.started_at = now;
  replica.due = now + spec.min_uptime;

  absl::StatusOr<SubprocessOptions> options =
      ReplicaSubprocessOptions(spec, replica.index, options_.program_dirs);
  if (options.ok()) options->guard_program = options_.guard_program;
  // The child's end of its channel, closed here once the child has it.
  int child_end = -1;
  if (options.ok() && spec.channel) {
    auto pair = WorkerChannel::CreatePair();
    if (pair.ok()) {
      replica.channel = std::move(pair->first);
      child_end = pair->second;
      options->env.emplace_back(kWorkerFdEnv, std::to_string(kWorkerChildFd));
      options->fds.emplace_back(child_end, kWorkerChildFd);
    } else {
      options = pair.status();
    }
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      options.ok() ? Subprocess::Start(*options) : options.status();
  if (child_end >= 0) close(child_end);
  if (!process.ok()) {
    replica.channel.reset();
    const std::string what =
        absl::StrCat("cannot start: ", process.status().message());
    spdlog::error("worker {}: {}", replica.label, what);
    AfterExit(worker, replica, what, ReplicaExit{/*failed=*/true, false});
    return;
  }
  replica.process = *std::move(process);
  replica.out_open = replica.process->stdout_fd() >= 0;
  replica.err_open = replica.process->stderr_fd() >= 0;
  ScopedLogFields fields({{"worker", worker.spec->name},
                          {"pid", absl::StrCat(replica.process->pid())}});
  spdlog::info("worker {} started (pid {}): {}", replica.label,
               replica.process->pid(), absl::StrJoin(options->argv, " "));
}

void WorkerManager::OnExit(Worker& worker, Replica& replica,
                           const ExitStatus& status) {
  // What it printed before exiting comes before the news of its exit.
  ReadOutput(replica, /*from_stderr=*/false, kDrainBudget);
  ReadOutput(replica, /*from_stderr=*/true, kDrainBudget);
  const pid_t pid = replica.process->pid();
  ScopedLogFields fields(
      {{"worker", replica.spec->name}, {"pid", absl::StrCat(pid)}});
  const bool stopping = replica.stopping();
  CloseProcess(replica);
  const std::chrono::nanoseconds uptime = clock_->Now() - replica.started_at;
  if (stopping) {
    spdlog::info("worker {} (pid {}) stopped: {}", replica.label, pid,
                 status.ToString());
    Stopped(worker, replica);
    return;
  }
  const WorkerSpec& spec = *replica.spec;
  const bool early = uptime < spec.min_uptime;
  std::string what =
      absl::StrCat(status.ToString(), " after ", FormatMs(uptime));
  if (early) {
    absl::StrAppend(&what, ", sooner than min_uptime ",
                    FormatMs(spec.min_uptime));
  }
  const ReplicaExit exit{/*failed=*/!status.ok() || early,
                         /*ran_min_uptime=*/!early};
  if (exit.failed) {
    spdlog::warn("worker {} (pid {}) exited: {}", replica.label, pid, what);
  } else {
    spdlog::info("worker {} (pid {}) exited: {}", replica.label, pid, what);
  }
  AfterExit(worker, replica, what, exit);
}

void WorkerManager::AfterExit(Worker& worker, Replica& replica,
                              const std::string& what,
                              const ReplicaExit& exit) {
  const WorkerSpec& spec = *replica.spec;
  if (exit.failed) replica.last_error = what;
  if (stopping_all_) {
    Stopped(worker, replica);
    return;
  }
  const TimePoint now = clock_->Now();
  RestartDecision decision = DecideRestart(spec, exit, replica.history, now);
  replica.history = std::move(decision.history);
  switch (decision.action) {
    case RestartDecision::Action::kStop:
      replica.state = WorkerState::kStopped;
      spdlog::info("worker {} stopped; not restarted (restart: {})",
                   replica.label, RestartPolicyName(spec.restart));
      return;
    case RestartDecision::Action::kFail:
      replica.state = WorkerState::kFailed;
      if (decision.reason.empty()) {
        spdlog::error("worker {} failed (restart: {}): {}", replica.label,
                      RestartPolicyName(spec.restart), what);
      } else {
        replica.last_error = absl::StrCat(what, "; ", decision.reason);
        spdlog::error("worker {} failed: {}", replica.label,
                      replica.last_error);
      }
      return;
    case RestartDecision::Action::kRestart:
      ++replica.restarts;
      replica.state = WorkerState::kBackoff;
      replica.due = now + decision.delay;
      spdlog::info("worker {}: restart {} in {}", replica.label,
                   replica.restarts, FormatMs(decision.delay));
      return;
  }
}

void WorkerManager::Stop(Worker& worker, Replica& replica, AfterStop after) {
  replica.after_stop = after;
  replica.start_pending = false;
  if (replica.process == nullptr) {
    Stopped(worker, replica);
    return;
  }
  if (replica.stopping()) return;
  replica.state = WorkerState::kStopped;
  spdlog::info("stopping worker {} (pid {}): SIGTERM, SIGKILL after {}",
               replica.label, replica.process->pid(),
               FormatMs(replica.spec->stop_timeout));
  loop_.BeginStop(*replica.process, replica.spec->stop_timeout);
}

void WorkerManager::Stopped(Worker& worker, Replica& replica) {
  switch (replica.after_stop) {
    case AfterStop::kRemove:
      worker.replicas.erase(replica.index);  // `replica` is gone
      return;
    case AfterStop::kRestart:
      replica.spec = worker.spec;
      replica.restarts = 0;
      replica.history = RestartHistory();
      replica.last_error.clear();
      replica.after_stop = AfterStop::kStay;
      StartReplica(worker, replica);
      return;
    case AfterStop::kStay:
      if (replica.state != WorkerState::kFailed) {
        replica.state = WorkerState::kStopped;
      }
      return;
  }
}

void WorkerManager::RunDueTimers() {
  const TimePoint now = clock_->Now();
  for (auto& [name, worker] : workers_) {
    for (auto& [index, replica_ptr] : worker->replicas) {
      Replica& replica = *replica_ptr;
      if (replica.stopping()) {
        if (loop_.EnforceStop(*replica.process)) {
          spdlog::warn(
              "worker {} (pid {}) did not stop within {}; sent SIGKILL to "
              "its process group",
              replica.label, replica.process->pid(),
              FormatMs(replica.spec->stop_timeout));
        }
      } else if (replica.state == WorkerState::kStarting &&
                 replica.process != nullptr && now >= replica.due) {
        replica.state = WorkerState::kRunning;
        replica.history.failed_starts = 0;
        spdlog::info("worker {} (pid {}) running", replica.label,
                     replica.process->pid());
      } else if (replica.state == WorkerState::kBackoff && now >= replica.due) {
        StartReplica(*worker, replica);
      }
    }
  }
}

void WorkerManager::ReadOutput(Replica& replica, bool from_stderr,
                               size_t budget) {
  bool& open = from_stderr ? replica.err_open : replica.out_open;
  if (!open || replica.process == nullptr) return;
  const int fd =
      from_stderr ? replica.process->stderr_fd() : replica.process->stdout_fd();
  const WorkerOutput::Stream stream = from_stderr
                                          ? WorkerOutput::Stream::kStderr
                                          : WorkerOutput::Stream::kStdout;
  size_t read_bytes = 0;
  char chunk[16 * 1024];
  while (read_bytes < budget) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      if (n < 0) {
        spdlog::warn("worker {}: reading its {}: {}", replica.label,
                     from_stderr ? "stderr" : "stdout",
                     std::string(strerror(errno)));
      }
      open = false;
      replica.output.Finish(stream);
      return;
    }
    read_bytes += static_cast<size_t>(n);
    replica.output.Append(stream,
                          absl::string_view(chunk, static_cast<size_t>(n)));
  }
}

void WorkerManager::ReadChannel(Replica& replica) {
  if (replica.channel == nullptr) return;
  absl::Status error;
  loop_.ReadFrames(
      [&](size_t) -> absl::StatusOr<bool> {
        aggregator::v1::WorkerReply reply;
        absl::StatusOr<bool> read = replica.channel->TryRead(&reply);
        if (read.ok() && *read) HandleFrame(replica, reply);
        return read;
      },
      &error);
  if (error.ok()) return;
  // Its end of stream (it exits, or closed it) or a frame it garbled.
  if (error.code() != absl::StatusCode::kOutOfRange) {
    spdlog::warn("worker {}: channel: {}", replica.label,
                 std::string(error.message()));
  }
  replica.channel.reset();
}

void WorkerManager::HandleFrame(Replica& replica,
                                const aggregator::v1::WorkerReply& reply) {
  if (reply.method() == kInitMethod && reply.has_error()) {
    replica.last_error = absl::StrCat("init failed: ", reply.error().message());
    spdlog::error("worker {}: {}", replica.label, replica.last_error);
  } else if (reply.method() == kListeningMethod) {
    const auto& fields = reply.data().struct_value().fields();
    const auto port = fields.find(kListeningPortField);
    const double number =
        port == fields.end() ? 0 : port->second.number_value();
    if (number >= 1 && number <= 65535 && number == static_cast<int>(number)) {
      replica.announced_port = static_cast<int>(number);
      spdlog::info("worker {}: listening on port {} (announced)", replica.label,
                   *replica.announced_port);
    } else {
      spdlog::warn("worker {}: channel: _listening without a valid port",
                   replica.label);
    }
  }
}

void WorkerManager::CloseProcess(Replica& replica) {
  replica.channel.reset();
  replica.announced_port.reset();
  replica.output.Flush();
  replica.out_open = false;
  replica.err_open = false;
  // Kills what is left of the process group and closes the pipes.
  replica.process.reset();
}

bool WorkerManager::AnyProcess() const {
  for (const auto& [name, worker] : workers_) {
    for (const auto& [index, replica] : worker->replicas) {
      if (replica->process != nullptr) return true;
    }
  }
  return false;
}

void WorkerManager::PollOnce(uint64_t seen) {
  enum class What { kStdout, kStderr, kChannel, kExit };
  struct Watch {
    What what;
    Worker* worker;
    Replica* replica;
  };
  std::vector<Watch> watches;  // by the loop's fd index
  loop_.Begin();
  for (auto& [name, worker] : workers_) {
    for (auto& [index, replica_ptr] : worker->replicas) {
      Replica& replica = *replica_ptr;
      if (replica.start_pending) {
        loop_.WakeAtReal(Steady::now());  // the next round starts more
      } else if (replica.stopping()) {
        loop_.WatchStop(*replica.process);
      } else if (replica.state == WorkerState::kStarting ||
                 replica.state == WorkerState::kBackoff) {
        loop_.WakeAt(replica.due);
      }
      if (replica.process == nullptr) continue;
      if (replica.out_open) {
        loop_.Watch(replica.process->stdout_fd());
        watches.push_back({What::kStdout, worker.get(), &replica});
      }
      if (replica.err_open) {
        loop_.Watch(replica.process->stderr_fd());
        watches.push_back({What::kStderr, worker.get(), &replica});
      }
      if (replica.channel != nullptr) {
        loop_.Watch(replica.channel->fd());
        watches.push_back({What::kChannel, worker.get(), &replica});
      }
      loop_.Watch(replica.process->pidfd());
      watches.push_back({What::kExit, worker.get(), &replica});
    }
  }
  if (stopping_all_) {
    loop_.WakeAtReal(Steady::now() < stop_deadline_
                         ? stop_deadline_
                         : stop_deadline_ + kKillWait);
  }

  if (const int error = loop_.Wait(seen); error != 0) {
    if (error != EINTR) {
      spdlog::error("worker manager: poll failed: {}",
                    std::string(strerror(error)));
    }
    return;
  }
  // Output first, so lines come before the exit that follows them.
  for (size_t i = 0; i < watches.size(); ++i) {
    if (!loop_.ready(i)) continue;
    const Watch& watch = watches[i];
    if (watch.what == What::kStdout || watch.what == What::kStderr) {
      ReadOutput(*watch.replica, watch.what == What::kStderr, kReadBudget);
    } else if (watch.what == What::kChannel) {
      ReadChannel(*watch.replica);
    }
  }
  // An exit may remove its replica: nothing below touches it afterwards.
  for (size_t i = 0; i < watches.size(); ++i) {
    const Watch& watch = watches[i];
    if (!loop_.ready(i) || watch.what != What::kExit) continue;
    if (watch.replica->process == nullptr) continue;
    if (std::optional<ExitStatus> status = watch.replica->process->Poll()) {
      OnExit(*watch.worker, *watch.replica, *status);
    }
  }
}

bool WorkerManager::Publish(uint64_t handled_seq) {
  std::vector<WorkerSnapshot> status;
  std::vector<LearnerEndpoint> endpoints;
  std::vector<const Worker*> ordered;
  std::set<std::string> listed;
  for (const std::string& name : order_) {
    auto it = workers_.find(name);
    if (it == workers_.end()) continue;
    ordered.push_back(it->second.get());
    listed.insert(name);
  }
  for (const auto& [name, worker] : workers_) {
    if (listed.count(name) == 0) ordered.push_back(worker.get());
  }
  for (const Worker* worker : ordered) {
    for (const auto& [index, replica] : worker->replicas) {
      status.push_back(WorkerSnapshot{
          replica->spec->name, index,
          replica->process != nullptr ? replica->process->pid() : 0,
          replica->state, replica->restarts, replica->last_error});
    }
    const WorkerSpec* spec = worker->spec.get();
    if (spec == nullptr || !spec->learner) continue;
    for (int index = 0; index < spec->replicas; ++index) {
      int port = spec->port_base + index;
      if (spec->channel) {
        // Only once it has said it listens, on the port it said.
        auto replica = worker->replicas.find(index);
        if (replica == worker->replicas.end() ||
            !replica->second->announced_port) {
          continue;
        }
        port = *replica->second->announced_port;
      }
      endpoints.push_back({absl::StrCat(spec->name, "-", index),
                           HostPort::Tcp("127.0.0.1", port)});
    }
  }
  MutexLock lock(&mu_);
  const bool changed = !(status == status_) || !(endpoints == endpoints_);
  status_ = std::move(status);
  endpoints_ = std::move(endpoints);
  handled_seq_ = std::max(handled_seq_, handled_seq);
  return changed;
}

}  // namespace aggregator
