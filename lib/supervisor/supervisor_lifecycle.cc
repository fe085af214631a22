// The Supervisor's children starting and stopping: StartLink, Restart,
// Shutdown and the stop escalation.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/supervisor/supervisor.h"
#include "lib/supervisor/supervisor_internal.h"
#include "spdlog/spdlog.h"

namespace aggregator {

// ---------------------------------------------------------------------------
// Starting and stopping.

absl::Status Supervisor::StartLink() {
  MutexLock lifecycle(&lifecycle_mu_);
  std::vector<Child*> children;
  {
    MutexLock lock(&mu_);
    if (!loop_.ok()) {
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
  inc.thread_channel =
      std::make_shared<ThreadChannel>(loop_.waker(), options_.spin);
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
           !ChildLoop::WaitExited(inc->pidfd, RealClock::now());
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
  std::vector<int> pidfds;
  for (const ChildStop& stop : stops) {
    pidfds.push_back(stop.inc->is_process && !stop.was_ended ? stop.inc->pidfd
                                                             : -1);
  }
  ChildLoop::EscalateStops(
      pidfds, start + timeout / 2, start + timeout, options_.kill_wait,
      [&](size_t i, int signo) {
        ChildStop& stop = stops[i];
        MutexLock lock(&stop.inc->process_mu);
        if (signo == SIGTERM) {
          stop.escalation =
              absl::StrCat("did not follow _shutdown within ",
                           FormatDuration(timeout / 2), ", so SIGTERM; ");
          stop.inc->process->BeginStop(start + timeout);
        } else {
          stop.escalation =
              absl::StrCat("ignored _shutdown and SIGTERM for ",
                           FormatDuration(timeout), ", so SIGKILL; ");
          stop.inc->process->Kill();
        }
      });
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

}  // namespace aggregator
