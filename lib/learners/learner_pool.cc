#include "lib/learners/learner_pool.h"

#include <grpc/grpc.h>
#include <grpcpp/support/time.h>
#include <pthread.h>
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
#include "lib/learners/callback_queue.h"

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
  grpc_channel* core = nullptr;  // channel's, for its watch (learner_channel.h)
  std::shared_ptr<aggregator::v1::Learner::Stub> stub;  // set while ready
  std::shared_ptr<grpc::GenericStub> generic;           // set while ready
  std::shared_ptr<LearnerCounters> counters =
      std::make_shared<LearnerCounters>();
  Backoff backoff;
  Clock::TimePoint connecting_since;
  Clock::TimePoint attempt_deadline;
  // When the next attempt is due, while one is scheduled (Run waits for it).
  std::optional<Clock::TimePoint> attempt_at;
  // The probe in flight, if any (owned by its event), to cancel on removal;
  // an answer from any other is stale (see StartProbe).
  grpc::ClientContext* probing = nullptr;
  // The token of its watch in flight, if that watch is the current one's:
  // a learner has one watch at a time.
  uint64_t watch_token = 0;
  aggregator::v1::Resource resource;  // its answer to the probe
  Clock::TimePoint next_refresh;      // while ready: when resources are asked
  std::string last_error;
};

// A completion for the connector: gRPC core runs it as the functor of a watch
// on the pool's callback queue, a probe's callback puts it; either way it only
// goes into the inbox (PoolInbox::Put), whatever thread gRPC runs it on.
struct LearnerPool::Event : grpc_completion_queue_functor {
  // kProbe: the GetResource call that shows a connected learner answers.
  struct Probe {
    std::shared_ptr<aggregator::v1::Learner::Stub> stub;
    grpc::ClientContext context;
    aggregator::v1::GetResourceRequest request;
    aggregator::v1::Resource reply;
    grpc::Status status;
    // Sent on a channel in TRANSIENT_FAILURE: it fails at once, and its
    // status says why the connection failed (refused, a TLS handshake).
    bool diagnose = false;
    // Asked of a ready learner every resource_refresh: its answer replaces the
    // resources it reported (a child aggregator's change with its learners).
    bool refresh = false;
  };

  enum Kind { kStateChange, kProbe };

  Event(Kind kind_in, std::string learner_id_in, uint64_t token_in,
        PoolInbox* inbox_in)
      : kind(kind_in),
        learner_id(std::move(learner_id_in)),
        token(token_in),
        inbox(inbox_in) {
    functor_run = &Event::Deliver;
    // Runs where gRPC completes the watch, with no hop to gRPC's executor:
    // Put only takes the inbox's own lock.
    inlineable = 1;
  }
  static void Deliver(grpc_completion_queue_functor* functor, int ok) {
    auto* event = static_cast<Event*>(functor);
    event->inbox->Put(event, ok != 0);
  }

  const Kind kind;
  const std::string learner_id;
  const uint64_t token;
  PoolInbox* const inbox;
  std::unique_ptr<Probe> probe;  // kProbe's
};

// The watch queue's shutdown functor: says when gRPC is done with the queue.
struct LearnerPool::QueueShutdown : grpc_completion_queue_functor {
  QueueShutdown() {
    functor_run = &QueueShutdown::Done;
    inlineable = 1;
  }
  static void Done(grpc_completion_queue_functor* functor, int /*ok*/) {
    auto* self = static_cast<QueueShutdown*>(functor);
    MutexLock lock(&self->mu);
    self->done = true;
  }
  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
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
  // Calls keep a ready learner's channel (LearnerHandle) and may drop it last
  // in their callbacks.
  KeepGrpcCallbackQueue();
  grpc_init();  // for watch_queue_, until the destructor
  watch_queue_shutdown_ = std::make_unique<QueueShutdown>();
  watch_queue_ = grpc_completion_queue_create_for_callback(
      watch_queue_shutdown_.get(), nullptr);
  clock_waker_ = clock_.AddWaker([this] { Kick(); });
  connector_ = std::thread([this] { Run(); });
}

LearnerPool::~LearnerPool() {
  Stop();
  grpc_shutdown();
}

void LearnerPool::Stop() {
  if (!connector_.joinable()) return;  // stopped already
  clock_.RemoveWaker(clock_waker_);
  std::vector<std::unique_ptr<Learner>> dropped;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& learner : learners_) {
      if (learner->probing != nullptr) learner->probing->TryCancel();
    }
    dropped.swap(learners_);
  }
  // Cancelled probes and destroyed channels (a watch ends with its channel's
  // SHUTDOWN) complete what is pending; the connector takes every completion
  // gRPC still owes (a channel a caller holds: its watch's deadline, at most
  // kReadyWatchPeriod) and returns.
  dropped.clear();
  inbox_.Wake();
  connector_.join();
  // Nothing is pending on the watch queue any more: it shuts down at once.
  grpc_completion_queue_shutdown(watch_queue_);
  bool shut = false;
  {
    MutexLock lock(&watch_queue_shutdown_->mu);
    shut = watch_queue_shutdown_->mu.AwaitWithTimeout(
        absl::Condition(&watch_queue_shutdown_->done), absl::Seconds(30));
  }
  if (!shut) {
    // Left as it is: gRPC may still run its shutdown functor.
    spdlog::error("learner pool: its watch queue did not shut down in 30 s");
    watch_queue_shutdown_.release();
    return;
  }
  grpc_completion_queue_destroy(watch_queue_);
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
  inbox_.Wake();    // new learners' first attempts are due now
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
  // Named for top -H and perf, and for the test that it is not woken by
  // the learners' calls (learner_pool_in_process_test).
  pthread_setname_np(pthread_self(), kConnectorThreadName);
  while (true) {
    Clock::TimePoint wake = clock_.Now() + kIdleWake;
    {
      MutexLock lock(&mu_);
      // Stopping: done once gRPC has handed back all it was given.
      if (stopping_ && inbox_.Drained()) return;
      for (const auto& learner : learners_) {
        if (learner->state == LearnerState::kConnecting) {
          wake = std::min(wake, learner->connecting_since + connect_.timeout);
        }
        if (learner->attempt_at) wake = std::min(wake, *learner->attempt_at);
      }
    }
    const std::vector<PoolInbox::Item> items =
        inbox_.Wait(absl::FromChrono(RealWait(wake)));
    size_t ready = 0;
    size_t total = 0;
    bool changed = false;
    {
      MutexLock lock(&mu_);
      for (const PoolInbox::Item& item : items) {
        Handle(static_cast<Event*>(item.tag), item.ok);
      }
      if (stopping_) continue;  // take completions until none is owed
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
  if (learner == nullptr) return;  // removed
  if (event->probe != nullptr) {
    if (learner->probing != &event->probe->context) return;  // superseded
    learner->probing = nullptr;
  } else if (learner->watch_token == event->token) {
    learner->watch_token = 0;
  }
  if (learner->token != event->token) return;  // stale
  switch (event->kind) {
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
  LearnerChannel made = MakeLearnerChannel(learner->endpoint, std::move(args));
  learner->channel = std::move(made.channel);
  learner->core = made.core;
  learner->attempt_deadline = clock_.Now() + connect_.attempt_timeout;
  Watch(learner, learner->channel->GetState(/*try_to_connect=*/true),
        learner->attempt_deadline);
  // Sent as soon as the connection is up (wait_for_ready). A callback call
  // in flight is also what makes gRPC poll for the connection when nothing
  // else in the process uses gRPC: the pool polls for none of its own.
  StartProbe(learner);
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
    // The attempt's probe is on its way (StartAttempt); its answer decides.
    if (learner->probing == nullptr) StartProbe(learner);
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
    AttemptTimedOut(learner);
    return;
  }
  if (state == GRPC_CHANNEL_IDLE) state = learner->channel->GetState(true);
  Watch(learner, state, learner->attempt_deadline);
}

void LearnerPool::StartProbe(Learner* learner, bool diagnose, bool refresh) {
  // One probe at a time: a diagnosis supersedes the attempt's probe.
  if (learner->probing != nullptr) learner->probing->TryCancel();
  auto* event =
      new Event(Event::kProbe, learner->endpoint.id, learner->token, &inbox_);
  event->probe = std::make_unique<Event::Probe>();
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
  // A diagnosis must fail at once on the failed connection; the others wait
  // for it (an attempt's probe starts before the connection is up).
  probe.context.set_wait_for_ready(!diagnose);
  // The callback API: its answer comes on gRPC's callback threads, which
  // poll for the pool's channels too when nothing else in the process does.
  inbox_.Expect();
  learner->probing = &probe.context;
  probe.stub->async()->GetResource(&probe.context, &probe.request, &probe.reply,
                                   [event](grpc::Status status) {
                                     event->probe->status = std::move(status);
                                     event->inbox->Put(event, true);
                                   });
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
  // The attempt's probe ran out of time before the connection was up, just
  // as its watch did.
  if (probe.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      learner->channel->GetState(false) != GRPC_CHANNEL_READY) {
    AttemptTimedOut(learner);
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

void LearnerPool::AttemptTimedOut(Learner* learner) {
  AttemptFailed(learner,
                absl::StrCat("no connection within connect.attempt_timeout (",
                             connect_.attempt_timeout.count(), "ms)"));
}

void LearnerPool::AttemptFailed(Learner* learner, const std::string& why) {
  learner->last_error = absl::StrCat(why, " (attempt ", learner->attempts, ")");
  if (learner->probing != nullptr) learner->probing->TryCancel();
  learner->channel.reset();
  learner->core = nullptr;
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
  // Already watched (an attempt's watch can still be out when its probe's
  // answer makes the learner ready): that watch's end looks again.
  if (learner->watch_token == learner->token) return;
  learner->watch_token = learner->token;
  auto* event = new Event(Event::kStateChange, learner->endpoint.id,
                          learner->token, &inbox_);
  inbox_.Expect();
  grpc_channel_watch_connectivity_state(
      learner->core, state,
      grpc::TimePoint<std::chrono::system_clock::time_point>(WakeAt(deadline))
          .raw_time(),
      watch_queue_, event);
}

void LearnerPool::Schedule(Learner* learner, Clock::TimePoint when) {
  learner->token = next_token_++;  // whatever is pending for it is stale now
  learner->attempt_at = when;      // Run starts it then
}

// A fake clock keeps no real timers: what is due is due now, anything else
// is looked at again after kIdleWake, or when the clock moves (Kick).
Clock::Duration LearnerPool::RealWait(Clock::TimePoint when) const {
  std::optional<Clock::Duration> left = clock_.RealDelayUntil(when);
  if (!left) {
    left = when <= clock_.Now() ? Clock::Duration::zero()
                                : Clock::Duration(kIdleWake);
  }
  return *left;
}

// gRPC's timers take system_clock.
std::chrono::system_clock::time_point LearnerPool::WakeAt(
    Clock::TimePoint when) const {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             RealWait(when));
}

// A call's deadline can only be real: the time left on the clock, taken as
// real time (on the steady clock, exactly what is left).
std::chrono::system_clock::time_point LearnerPool::CallDeadline(
    Clock::TimePoint when) const {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             when - clock_.Now());
}

void LearnerPool::Kick() { inbox_.Wake(); }

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
