#include "lib/learners/learner_pool.h"

#include <grpcpp/alarm.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/log_fields.h"
#include "lib/learners/call_path.h"
#include "lib/tls/credentials.h"

namespace aggregator {
namespace {

// How often a ready learner's watch is re-armed. Bounds how long the pool's
// teardown can wait for a channel that a caller still holds; a disconnect is
// seen at once.
constexpr std::chrono::seconds kReadyWatchPeriod{2};
// How often the connector wakes when nothing is due (a cheap, bounded wait).
// Under a clock that keeps no real timers (a FakeClock) also how often, in
// real time, a connection watch looks at the clock again: the clock's waker
// wakes the connector for what became due, not the watches.
constexpr std::chrono::seconds kIdleWake{1};

}  // namespace

grpc::ChannelArguments LearnerChannelArguments(int64_t max_message_bytes,
                                               const ConnectConfig& connect) {
  grpc::ChannelArguments args;
  const int limit =
      static_cast<int>(std::min<int64_t>(max_message_bytes, INT_MAX));
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  // Never drop an idle connection: an idle learner is still a ready learner.
  args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, INT_MAX);
  // Pings find a learner whose host hangs: an unanswered one closes the
  // connection, which the ready watch sees at once. Idle connections are
  // pinged too, and without limit (gRPC's default stops after two pings
  // without data, and would let a hung host go unnoticed).
  auto clamp = [](std::chrono::milliseconds ms) {
    return static_cast<int>(std::min<int64_t>(ms.count(), INT_MAX));
  };
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, clamp(connect.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, clamp(connect.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

struct LearnerPool::Learner {
  Learner(LearnerEndpoint endpoint_in, const BackoffOptions& backoff_options,
          UniformRandom random, Clock::TimePoint now)
      : endpoint(std::move(endpoint_in)),
        backoff(backoff_options, std::move(random)),
        connecting_since(now) {}

  std::string Name() const {
    return absl::StrCat(endpoint.id, " (", endpoint.address.ToString(), ")");
  }
  // The json log's fields of a line about it (lib/base/log_fields.h).
  ScopedLogFields LogFields() const {
    return ScopedLogFields(
        {{"learner", endpoint.id}, {"address", endpoint.address.ToString()}});
  }
  LearnerHandle Handle() const {
    return LearnerHandle{endpoint.id, endpoint.address, epoch,   stub,
                         generic,     counters,         resource};
  }

  LearnerEndpoint endpoint;
  LearnerState state = LearnerState::kConnecting;
  uint64_t epoch = 0;
  // Identifies the current attempt or watch; events carrying another are stale.
  uint64_t token = 0;
  int attempts = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<aggregator::v1::Learner::Stub> stub;  // set while ready
  std::shared_ptr<grpc::GenericStub> generic;           // set while ready
  std::shared_ptr<LearnerCounters> counters =
      std::make_shared<LearnerCounters>();
  Backoff backoff;
  Clock::TimePoint connecting_since;
  Clock::TimePoint attempt_deadline;
  // When the next attempt is due, while one is scheduled; `alarm` wakes the
  // connector then (see Run).
  std::optional<Clock::TimePoint> attempt_at;
  // The attempt alarm still pending, owned by its event: only ever cancelled
  // here. gRPC 1.51 may still queue an alarm destroyed while it fires, so
  // an alarm is freed with its event, once that has come back (Handle).
  grpc::Alarm* alarm = nullptr;
  // The probe in flight, if any (owned by its event), to cancel on removal.
  grpc::ClientContext* probing = nullptr;
  aggregator::v1::Resource resource;  // its answer to the probe
  Clock::TimePoint next_refresh;      // while ready: when resources are asked
  std::string last_error;
};

struct LearnerPool::Event {
  // kProbe: the GetResource call that shows a connected learner answers.
  struct Probe {
    std::shared_ptr<aggregator::v1::Learner::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<aggregator::v1::Resource>>
        rpc;
    aggregator::v1::Resource reply;
    grpc::Status status;
    // Sent on a channel in TRANSIENT_FAILURE: it fails at once, and its
    // status says why the connection failed (refused, a TLS handshake).
    bool diagnose = false;
    // Asked of a ready learner every resource_refresh: its answer replaces the
    // resources it reported (a child aggregator's change with its learners).
    bool refresh = false;
  };

  // kWake: a Kick; only wakes the connector.
  enum Kind { kAttempt, kStateChange, kProbe, kWake } kind;
  std::string learner_id;
  uint64_t token;
  std::unique_ptr<Probe> probe;
  std::unique_ptr<grpc::Alarm> alarm;  // kAttempt's and kWake's own
};

LearnerPool::LearnerPool(const ConnectConfig& connect,
                         int64_t max_message_bytes, LearnerPoolHooks hooks)
    : max_message_bytes_(max_message_bytes),
      hooks_([&] {
        if (!hooks.random) hooks.random = MakeUniformRandom();
        return std::move(hooks);
      }()),
      clock_(ClockOrSteady(hooks_.clock)),
      connect_(connect) {
  clock_waker_ = clock_.AddWaker([this] { Kick(); });
  connector_ = std::thread([this] { Run(); });
}

LearnerPool::~LearnerPool() { Stop(); }

void LearnerPool::Stop() {
  if (!connector_.joinable()) return;  // stopped already
  // No Kick sets an alarm on the queue once it shuts down.
  clock_.RemoveWaker(clock_waker_);
  std::vector<std::unique_ptr<Learner>> dropped;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& learner : learners_) {
      if (learner->probing != nullptr) learner->probing->TryCancel();
      if (learner->alarm != nullptr) learner->alarm->Cancel();
    }
    dropped.swap(learners_);
  }
  // Cancelled alarms and destroyed channels complete their pending events.
  dropped.clear();
  queue_.Shutdown();
  connector_.join();
}

void LearnerPool::SetLearners(const std::vector<LearnerEndpoint>& learners) {
  std::vector<std::unique_ptr<Learner>> dropped;
  size_t ready = 0;
  size_t total = 0;
  bool changed = false;
  {
    MutexLock lock(&mu_);
    if (stopping_) return;  // Stop()ped: its queue takes no more alarms
    std::vector<std::unique_ptr<Learner>> next;
    for (const LearnerEndpoint& endpoint : learners) {
      auto same = std::find_if(learners_.begin(), learners_.end(),
                               [&](const std::unique_ptr<Learner>& l) {
                                 return l != nullptr && l->endpoint == endpoint;
                               });
      if (same != learners_.end()) {
        next.push_back(std::move(*same));
        continue;
      }
      auto learner = std::make_unique<Learner>(endpoint, connect_.backoff,
                                               hooks_.random, clock_.Now());
      {
        ScopedLogFields fields = learner->LogFields();
        spdlog::info("learner {}: connecting", learner->Name());
      }
      Schedule(learner.get(), clock_.Now());
      next.push_back(std::move(learner));
    }
    for (auto& learner : learners_) {
      if (learner == nullptr) continue;
      if (learner->probing != nullptr) learner->probing->TryCancel();
      if (learner->alarm != nullptr) learner->alarm->Cancel();
      {
        ScopedLogFields fields = learner->LogFields();
        spdlog::info(
            "learner {}: removed from the pool; calls in flight finish on "
            "their connection",
            learner->Name());
      }
      dropped.push_back(std::move(learner));
    }
    learners_ = std::move(next);
    ready = ReadyCountLocked();
    total = learners_.size();
    changed = ready != last_reported_ready_;
    last_reported_ready_ = ready;
  }
  dropped.clear();  // outside the lock: destroying a channel may take a moment
  if (changed) {
    if (hooks_.on_ready_change) hooks_.on_ready_change(ready, total);
  }
}

void LearnerPool::SetConnectConfig(const ConnectConfig& connect) {
  MutexLock lock(&mu_);
  connect_ = connect;
  for (const auto& learner : learners_) {
    learner->backoff = Backoff(connect_.backoff, hooks_.random);
  }
}

void LearnerPool::Run() {
  while (true) {
    Clock::TimePoint wake = clock_.Now() + kIdleWake;
    {
      MutexLock lock(&mu_);
      for (const auto& learner : learners_) {
        if (learner->state == LearnerState::kConnecting) {
          wake = std::min(wake, learner->connecting_since + connect_.timeout);
        }
        if (learner->attempt_at) wake = std::min(wake, *learner->attempt_at);
      }
    }
    void* tag = nullptr;
    bool ok = false;
    const auto status = queue_.AsyncNext(&tag, &ok, WakeAt(wake));
    if (status == grpc::CompletionQueue::SHUTDOWN) return;
    size_t ready = 0;
    size_t total = 0;
    bool changed = false;
    {
      MutexLock lock(&mu_);
      if (status == grpc::CompletionQueue::GOT_EVENT) {
        Event* event = static_cast<Event*>(tag);
        bool woke = false;
        {
          // Events are made under mu_, a Kick's under kick_mu_; a Kick's
          // alarm goes once Kick is out of Set. It only woke the loop.
          MutexLock kick_lock(&kick_mu_);
          woke = event->kind == Event::kWake;
          if (woke) delete event;
        }
        if (!woke) Handle(event, ok);
      }
      if (stopping_) continue;  // drain the queue until it shuts down
      const Clock::TimePoint now = clock_.Now();
      StartDueAttempts(now);
      MarkTimedOut(now);
      ready = ReadyCountLocked();
      total = learners_.size();
      changed = ready != last_reported_ready_;
      last_reported_ready_ = ready;
    }
    if (changed) {
      if (hooks_.on_ready_change) hooks_.on_ready_change(ready, total);
    }
  }
}

void LearnerPool::Handle(Event* event, bool ok) {
  std::unique_ptr<Event> owned(event);
  if (stopping_) return;
  Learner* learner = Find(event->learner_id);
  if (learner != nullptr && event->probe != nullptr &&
      learner->probing == &event->probe->context) {
    learner->probing = nullptr;
  }
  if (learner != nullptr && event->alarm != nullptr &&
      learner->alarm == event->alarm.get()) {
    learner->alarm = nullptr;  // freed with the event
  }
  if (learner == nullptr || learner->token != event->token) return;  // stale
  switch (event->kind) {
    case Event::kAttempt:
    case Event::kWake:  // Run's own
      // The attempt starts in Run once it is due on the clock.
      return;
    case Event::kStateChange:
      OnStateChange(learner, ok);
      return;
    case Event::kProbe:
      OnProbe(learner, *event);
      return;
  }
}

void LearnerPool::StartAttempt(Learner* learner) {
  learner->attempt_at.reset();
  ++learner->attempts;
  learner->token = next_token_++;
  grpc::ChannelArguments args =
      LearnerChannelArguments(max_message_bytes_, connect_);
  // A fresh subchannel per attempt: our backoff decides when to retry.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(connect_.attempt_timeout.count()));
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (const auto& tls = learner->endpoint.tls) {
    credentials = ClientCredentials(
        ClientIdentity{tls->ca.pem, tls->cert.pem, tls->key.pem});
    if (!tls->server_name.empty()) {
      args.SetSslTargetNameOverride(tls->server_name);
    }
  }
  learner->channel = grpc::CreateCustomChannel(
      learner->endpoint.address.ToString(), credentials, args);
  learner->attempt_deadline = clock_.Now() + connect_.attempt_timeout;
  Watch(learner, learner->channel->GetState(/*try_to_connect=*/true),
        learner->attempt_deadline);
}

void LearnerPool::OnStateChange(Learner* learner, bool ok) {
  grpc_connectivity_state state = learner->channel->GetState(false);
  const Clock::TimePoint now = clock_.Now();
  if (learner->state == LearnerState::kReady) {
    if (state == GRPC_CHANNEL_READY) {
      if (now >= learner->next_refresh && learner->probing == nullptr) {
        learner->next_refresh = now + connect_.resource_refresh;
        StartProbe(learner, /*diagnose=*/false, /*refresh=*/true);
      }
      Watch(learner, state,
            std::min(now + kReadyWatchPeriod, learner->next_refresh));
      return;
    }
    {
      ScopedLogFields fields = learner->LogFields();
      spdlog::warn("learner {}: connection lost; reconnecting",
                   learner->Name());
    }
    learner->state = LearnerState::kConnecting;
    learner->stub.reset();
    learner->generic.reset();
    learner->connecting_since = now;
    learner->attempts = 0;
    learner->last_error = "connection lost";
    StartAttempt(learner);
    return;
  }
  if (state == GRPC_CHANNEL_READY) {
    StartProbe(learner);
    return;
  }
  if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    StartProbe(learner, /*diagnose=*/true);
    return;
  }
  if (state == GRPC_CHANNEL_SHUTDOWN) {
    AttemptFailed(learner, "connection failed");
    return;
  }
  // A watch that ends without a change (!ok) has reached its real-time
  // bound (WakeAt): the attempt's deadline on the steady clock, only a time
  // to look again on a fake one. Whether the attempt is over is the clock's
  // to say.
  (void)ok;
  if (now >= learner->attempt_deadline) {
    AttemptFailed(learner,
                  absl::StrCat("no connection within connect.attempt_timeout (",
                               connect_.attempt_timeout.count(), "ms)"));
    return;
  }
  if (state == GRPC_CHANNEL_IDLE) state = learner->channel->GetState(true);
  Watch(learner, state, learner->attempt_deadline);
}

void LearnerPool::StartProbe(Learner* learner, bool diagnose, bool refresh) {
  auto* event = new Event{Event::kProbe, learner->endpoint.id, learner->token,
                          std::make_unique<Event::Probe>()};
  Event::Probe& probe = *event->probe;
  probe.diagnose = diagnose;
  probe.refresh = refresh;
  probe.stub = aggregator::v1::Learner::NewStub(learner->channel);
  probe.context.set_deadline(
      CallDeadline(refresh ? clock_.Now() + connect_.attempt_timeout
                           : learner->attempt_deadline));
  if (!hooks_.aggregator_id.empty()) {
    probe.context.AddMetadata(kCallPathKey, hooks_.aggregator_id);
  }
  probe.rpc = probe.stub->AsyncGetResource(
      &probe.context, aggregator::v1::GetResourceRequest(), &queue_);
  probe.rpc->Finish(&probe.reply, &probe.status, event);
  learner->probing = &probe.context;
}

void LearnerPool::OnProbe(Learner* learner, const Event& event) {
  const Event::Probe& probe = *event.probe;
  if (probe.refresh) {
    OnRefresh(learner, event);
    return;
  }
  if (!hooks_.aggregator_id.empty() &&
      AnsweringAggregator(probe.context) == hooks_.aggregator_id) {
    // Its own listener: calls to it would only come back. Failed at once;
    // the background retries find the same, cheaply.
    AttemptFailed(
        learner,
        absl::StrCat("address is this aggregator (", hooks_.aggregator_id,
                     " answered its probe): remove it from learners"));
    if (learner->state != LearnerState::kFailed) {
      learner->state = LearnerState::kFailed;
      {
        ScopedLogFields fields = learner->LogFields();
        spdlog::error("learner {}: {}", learner->Name(), learner->last_error);
      }
    }
    return;
  }
  if (probe.status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      probe.diagnose) {
    AttemptFailed(learner, absl::StrCat("connection failed: ",
                                        probe.status.error_message()));
    return;
  }
  if (!probe.status.ok()) {
    AttemptFailed(
        learner,
        absl::StrCat("connected, but GetResource failed: ",
                     absl::StatusCodeToString(static_cast<absl::StatusCode>(
                         probe.status.error_code())),
                     ": ", probe.status.error_message()));
    return;
  }
  // A learner that reports negative resources would corrupt every sum.
  if (probe.reply.gpus() < 0 || probe.reply.learners() < 0) {
    AttemptFailed(learner,
                  absl::StrCat("GetResource reported negative resources (gpus ",
                               probe.reply.gpus(), ", learners ",
                               probe.reply.learners(), "); not used"));
    return;
  }
  learner->state = LearnerState::kReady;
  learner->epoch = next_token_++;
  learner->resource = probe.reply;
  learner->stub = probe.stub;
  learner->generic = std::make_shared<grpc::GenericStub>(learner->channel);
  learner->backoff.Reset();
  learner->last_error.clear();
  {
    ScopedLogFields fields = learner->LogFields();
    spdlog::info("learner {}: ready after {} attempt(s) ({} gpu(s))",
                 learner->Name(), learner->attempts, probe.reply.gpus());
  }
  learner->attempts = 0;
  const Clock::TimePoint now = clock_.Now();
  learner->next_refresh = now + connect_.resource_refresh;
  Watch(learner, GRPC_CHANNEL_READY,
        std::min(now + kReadyWatchPeriod, learner->next_refresh));
}

void LearnerPool::OnRefresh(Learner* learner, const Event& event) {
  const Event::Probe& probe = *event.probe;
  // Only a ready learner's resources are kept; one that is connecting again
  // is asked afresh when it is ready.
  if (learner->state != LearnerState::kReady) return;
  if (!probe.status.ok()) {
    // Calls will say what is wrong with it; the connection watch, whether it
    // is gone. Its last figures stand until it answers.
    {
      ScopedLogFields fields = learner->LogFields();
      spdlog::debug("learner {}: resource refresh failed: {}", learner->Name(),
                    probe.status.error_message());
    }
    return;
  }
  if (probe.reply.gpus() < 0 || probe.reply.learners() < 0) return;
  if (probe.reply.gpus() != learner->resource.gpus() ||
      probe.reply.learners() != learner->resource.learners()) {
    {
      ScopedLogFields fields = learner->LogFields();
      spdlog::info(
          "learner {}: resources now {} gpu(s), {} learner(s) (were {}, {})",
          learner->Name(), probe.reply.gpus(), probe.reply.learners(),
          learner->resource.gpus(), learner->resource.learners());
    }
    learner->resource = probe.reply;
  }
}

void LearnerPool::AttemptFailed(Learner* learner, const std::string& why) {
  learner->last_error = absl::StrCat(why, " (attempt ", learner->attempts, ")");
  learner->channel.reset();
  const auto delay = learner->backoff.Next();
  {
    ScopedLogFields fields = learner->LogFields();
    spdlog::debug("learner {}: {}; next attempt in {}ms", learner->Name(),
                  learner->last_error, delay.count());
  }
  Schedule(learner, clock_.Now() + delay);
}

void LearnerPool::StartDueAttempts(Clock::TimePoint now) {
  for (const auto& learner : learners_) {
    if (learner->attempt_at && now >= *learner->attempt_at) {
      StartAttempt(learner.get());  // its alarm's event is stale now
    }
  }
}

void LearnerPool::MarkTimedOut(Clock::TimePoint now) {
  for (const auto& learner : learners_) {
    if (learner->state == LearnerState::kConnecting &&
        now >= learner->connecting_since + connect_.timeout) {
      learner->state = LearnerState::kFailed;
      {
        ScopedLogFields fields = learner->LogFields();
        spdlog::error(
            "learner {}: not ready within connect.timeout ({}ms): {}; still "
            "retrying in the background",
            learner->Name(), connect_.timeout.count(),
            learner->last_error.empty() ? "no answer" : learner->last_error);
      }
    }
  }
}

void LearnerPool::Watch(Learner* learner, grpc_connectivity_state state,
                        Clock::TimePoint deadline) {
  learner->channel->NotifyOnStateChange(
      state, WakeAt(deadline), &queue_,
      new Event{Event::kStateChange, learner->endpoint.id, learner->token});
}

void LearnerPool::Schedule(Learner* learner, Clock::TimePoint when) {
  learner->token = next_token_++;
  learner->attempt_at = when;
  if (learner->alarm != nullptr) learner->alarm->Cancel();  // stale now
  auto* event =
      new Event{Event::kAttempt, learner->endpoint.id, learner->token};
  event->alarm = std::make_unique<grpc::Alarm>();
  learner->alarm = event->alarm.get();
  event->alarm->Set(&queue_, WakeAt(when), event);
}

// gRPC's timers take system_clock. The steady clock says how long is left;
// a fake clock keeps no real timers: what is due is due now, anything else
// is looked at again after kIdleWake, or when the clock moves (Kick).
std::chrono::system_clock::time_point LearnerPool::WakeAt(
    Clock::TimePoint when) const {
  std::optional<Clock::Duration> left = clock_.RealDelayUntil(when);
  if (!left) {
    left = when <= clock_.Now() ? Clock::Duration::zero()
                                : Clock::Duration(kIdleWake);
  }
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(*left);
}

// A call's deadline can only be real: the time left on the clock, taken as
// real time (on the steady clock, exactly what is left).
std::chrono::system_clock::time_point LearnerPool::CallDeadline(
    Clock::TimePoint when) const {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             when - clock_.Now());
}

void LearnerPool::Kick() {
  MutexLock lock(&kick_mu_);
  auto* event = new Event{Event::kWake, "", 0};
  event->alarm = std::make_unique<grpc::Alarm>();
  event->alarm->Set(&queue_, std::chrono::system_clock::now(), event);
}

LearnerPool::Learner* LearnerPool::Find(const std::string& id) const {
  for (const auto& learner : learners_) {
    if (learner->endpoint.id == id) return learner.get();
  }
  return nullptr;
}

size_t LearnerPool::ReadyCountLocked() const {
  return std::count_if(learners_.begin(), learners_.end(),
                       [](const std::unique_ptr<Learner>& l) {
                         return l->state == LearnerState::kReady;
                       });
}

std::vector<LearnerHandle> LearnerPool::Ready() const {
  MutexLock lock(&mu_);
  std::vector<LearnerHandle> ready;
  for (const auto& learner : learners_) {
    if (learner->state != LearnerState::kReady) continue;
    ready.push_back(learner->Handle());
  }
  return ready;
}

size_t LearnerPool::ReadyCount() const {
  MutexLock lock(&mu_);
  return ReadyCountLocked();
}

size_t LearnerPool::size() const {
  MutexLock lock(&mu_);
  return learners_.size();
}

absl::StatusOr<LearnerHandle> LearnerPool::Current(const std::string& id,
                                                   uint64_t epoch) const {
  MutexLock lock(&mu_);
  const Learner* learner = Find(id);
  if (learner == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(id, " is no longer a configured learner"));
  }
  if (learner->state != LearnerState::kReady) {
    return absl::FailedPreconditionError(absl::StrCat(
        learner->Name(), " is ", LearnerStateName(learner->state),
        learner->last_error.empty() ? "" : ": ", learner->last_error));
  }
  if (learner->epoch != epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat(learner->Name(), " reconnected since GetData"));
  }
  return learner->Handle();
}

bool LearnerPool::WaitForReady(
    size_t count, std::chrono::steady_clock::time_point deadline) const {
  MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ReadyCountLocked() >= count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), TimeUntil(deadline));
}

void LearnerPool::RecordCall(const LearnerHandle& learner,
                             const grpc::Status& status) {
  learner.counters->calls.fetch_add(1, std::memory_order_relaxed);
  if (status.ok()) return;
  learner.counters->failures.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  if (Learner* current = Find(learner.id)) {
    current->last_error = status.error_message();
  }
}

std::vector<LearnerSnapshot> LearnerPool::Status() const {
  MutexLock lock(&mu_);
  std::vector<LearnerSnapshot> out;
  for (const auto& learner : learners_) {
    out.push_back(LearnerSnapshot{
        learner->endpoint.id, learner->endpoint.address, learner->state,
        learner->last_error, learner->counters->calls.load(),
        learner->counters->failures.load()});
  }
  return out;
}

std::string LearnerPool::DescribeNotReady() const {
  MutexLock lock(&mu_);
  std::vector<std::string> parts;
  for (const auto& learner : learners_) {
    if (learner->state == LearnerState::kReady) continue;
    parts.push_back(absl::StrCat(
        learner->Name(), " ", LearnerStateName(learner->state),
        learner->last_error.empty() ? "" : ": ", learner->last_error));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace aggregator
