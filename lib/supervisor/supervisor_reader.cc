// The Supervisor's reader role: one round of reading every channel, and
// what the frames, exits and thread replies it finds mean.
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/supervisor/supervisor.h"
#include "lib/supervisor/supervisor_internal.h"
#include "spdlog/spdlog.h"

namespace aggregator {

// ---------------------------------------------------------------------------
// Reading the channels.

void Supervisor::PollNow() {
  uint64_t seen;
  {
    MutexLock lock(&mu_);
    if (reading_) return;  // the reader keeps everything current
    reading_ = true;
    seen = loop_.wake_seq();
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

  // The round: per process target its channel (unless closed) and its pidfd
  // (until reaped).
  std::vector<std::pair<size_t, bool>>& fd_targets = pollfd_targets_;
  fd_targets.clear();
  loop_.Begin();
  loop_.WakeAt(deadline);
  for (size_t i = 0; i < poll_targets_.size(); ++i) {
    Incarnation& inc = *poll_targets_[i].incarnation;
    if (!inc.is_process) continue;
    // The blocking wait also ends when an exit grace does.
    if (inc.exit_grace_end.has_value()) loop_.WakeAtReal(*inc.exit_grace_end);
    if (!inc.channel_closed) {
      loop_.Watch(inc.channel->fd());
      fd_targets.emplace_back(i, false);
    }
    if (!inc.reaped) {
      loop_.Watch(inc.pidfd);
      fd_targets.emplace_back(i, true);
    }
  }
  // A thread child that replied before `seen` was taken left its flag set.
  for (const PollTarget& target : poll_targets_) {
    if (!target.incarnation->is_process &&
        target.incarnation->thread_channel->has_replies()) {
      loop_.MarkReady();
      break;
    }
  }
  loop_.Wait(seen);

  for (size_t k = 0; k < fd_targets.size(); ++k) {
    if (!loop_.ready(k)) continue;
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
  absl::Status error;
  const size_t count = loop_.ReadFrames(
      [&](size_t i) {
        if (frames_.size() <= i) frames_.emplace_back();
        return inc.channel->TryRead(&frames_[i]);
      },
      &error);
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

}  // namespace aggregator
