#include "lib/supervisor/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/supervisor/supervisor_internal.h"
#include "spdlog/spdlog.h"

namespace aggregator {

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
      loop_(
          ChildLoop::Options{options_.clock, options_.spin, kFramesPerRound}) {}

Supervisor::~Supervisor() { (void)Shutdown(options_.stop_timeout); }

Supervisor::TimePoint Supervisor::DeadlineAfter(
    std::optional<Duration> timeout) const {
  Duration d = timeout.value_or(options_.default_timeout);
  d = std::clamp<Duration>(d, Duration::zero(), kLongestWait);
  return Now() + d;
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
  loop_.Wake();
}

void Supervisor::CompleteLocked(RecvPayload result) {
  ready_.push_back(std::move(result));
  NotifyLocked();
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
    status = inc->channel->Write(
        inc->request, loop_.RealDeadline(Now() + options_.send_timeout));
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
