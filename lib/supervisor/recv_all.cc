// The Supervisor's receiving calls: Recv, RecvAll (with its handle) and
// GetAttr.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/supervisor/supervisor.h"
#include "lib/supervisor/supervisor_internal.h"

namespace aggregator {

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

}  // namespace aggregator
