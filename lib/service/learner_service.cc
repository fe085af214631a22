#include "lib/service/learner_service.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "lib/learners/call_path.h"
#include "lib/learners/callback_queue.h"
#include "lib/service/learner_service_impl.h"

namespace aggregator {

namespace pb = aggregator::v1;

LearnerService::LearnerService(LearnerRoster* learners,
                               const ServiceConfig& config,
                               LearnerServiceOptions options)
    : pool_(learners),
      metrics_(options.metrics),
      max_reply_bytes_(options.max_reply_bytes),
      stream_window_bytes_(options.stream_window_bytes),
      clock_(ClockOrSteady(options.clock)),
      membership_(Membership::kFirstRetry, Membership::kMaxRetry, &clock_),
      memory_(ProcessMemoryLimit()),
      late_(&clock_, options.metrics),
      admission_(std::move(options.aggregator_id), options.metrics, &clock_) {
  // Its calls' callbacks may drop a learner's last handle, and its channel.
  KeepGrpcCallbackQueue();
  SetConfig(config);
  // After SetConfig: its steps read the settings.
  rejoin_ = std::make_unique<RejoinStep>(&membership_, &clock_, RejoinHooks());
}

RejoinStep::Hooks LearnerService::RejoinHooks() {
  RejoinStep::Hooks hooks;
  hooks.ready = [this] { return pool_->Ready(); };
  hooks.enter = [this] { return admission_.Hold(); };
  hooks.timeout = [this] { return settings()->config.call_timeout; };
  // Made by this aggregator, on behalf of no caller.
  if (!admission_.aggregator_id().empty()) {
    hooks.call_path = OutgoingPath({}, admission_.aggregator_id());
  }
  hooks.record = [this](const RejoinStep::Replay& replay) {
    Record("StartTask", replay);
  };
  hooks.failed = [this](const LearnerHandle& learner, const std::string& why) {
    MarkFailed(learner, why);
  };
  return hooks;
}

void LearnerService::SetConfig(const ServiceConfig& config) {
  auto settings = std::make_shared<const Settings>(
      Settings{config, LearnReplyMerger(config.merge),
               config.max_inflight_bytes.value_or(memory_.bytes / 4)});
  membership_.SetPolicy(config.on_learner_failure);
  MutexLock lock(&mu_);
  settings_ = std::move(settings);
}

int64_t LearnerService::max_inflight_bytes() const {
  return settings()->max_inflight_bytes;
}

std::string LearnerService::DescribeInflightLimit() const {
  auto settings = this->settings();
  if (settings->config.max_inflight_bytes.has_value()) {
    return absl::StrCat("max_inflight_bytes ", settings->max_inflight_bytes);
  }
  return absl::StrCat("max_inflight_bytes ", settings->max_inflight_bytes,
                      " (auto: a quarter of ", memory_.bytes, " bytes, from ",
                      memory_.source, ")");
}

std::shared_ptr<const LearnerService::Settings> LearnerService::settings()
    const {
  MutexLock lock(&mu_);
  return settings_;
}

LearnerService::Call LearnerService::Admit(
    const char* method, grpc::CallbackServerContext* context) {
  Call call{method,  context,    context->DefaultReactor(),
            nullptr, settings(), TimingWanted(*context)};
  call.lease = admission_.AdmitUnary(context, call.reactor, method);
  return call;
}

void LearnerService::StartDraining() { admission_.StartDraining(); }

bool LearnerService::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  return admission_.WaitIdle(deadline);
}

absl::Status LearnerService::CheckEnough(const char* method,
                                         const Settings& settings,
                                         size_t count) const {
  const size_t needed =
      static_cast<size_t>(std::max(1, settings.config.min_learners));
  if (count >= needed) return absl::OkStatus();
  std::string why = pool_->DescribeNotReady();
  for (const auto& [id, standing] : membership_.Standings()) {
    absl::StrAppend(&why, why.empty() ? "" : "; ", id, " ",
                    StandingName(standing.state),
                    standing.why.empty() ? "" : ": ", standing.why);
  }
  absl::Status too_few = absl::UnavailableError(absl::StrCat(
      method, ": ", count, " of ", pool_->size(), " learner(s) ready",
      membership_.policy() == OnLearnerFailure::kShrink ? " and in the plans"
                                                        : "",
      ", ", needed, " needed (min_learners ", settings.config.min_learners, ")",
      why.empty() ? "" : ": ", why));
  AttachFailedLearners(Missing(), &too_few);
  return too_few;
}

pb::FailedLearners LearnerService::Missing() const {
  pb::FailedLearners missing;
  const std::map<std::string, LearnerStanding> standings =
      membership_.Standings();
  for (const LearnerSnapshot& learner : pool_->Status()) {
    std::string why;
    if (learner.state != LearnerState::kReady) {
      why = absl::StrCat(LearnerStateName(learner.state),
                         learner.last_error.empty() ? "" : ": ",
                         learner.last_error);
    } else if (auto standing = standings.find(learner.id);
               standing != standings.end()) {
      why = absl::StrCat(StandingName(standing->second.state),
                         standing->second.why.empty() ? "" : ": ",
                         standing->second.why);
    } else {
      continue;
    }
    AddFailedLearner(learner.id, learner.address.ToString(),
                     grpc::StatusCode::UNAVAILABLE, why, &missing);
  }
  return missing;
}

absl::StatusOr<std::vector<LearnerHandle>> LearnerService::ReadyLearners(
    const char* method, const Settings& settings) {
  Membership::View view = membership_.Select(pool_->Ready());
  // Those awaiting the task's replay count: they join once it succeeded.
  std::vector<LearnerHandle> learners = std::move(view.members);
  for (LearnerHandle& learner : view.to_replay) {
    learners.push_back(std::move(learner));
  }
  for (LearnerHandle& learner : view.replaying) {
    learners.push_back(std::move(learner));
  }
  if (absl::Status enough = CheckEnough(method, settings, learners.size());
      !enough.ok()) {
    return enough;
  }
  return learners;
}

void LearnerService::WatchStragglers(
    const LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>& calls,
    const Settings& settings) {
  const StragglerConfig& straggler = settings.config.straggler;
  for (const StragglerWatch::Change& change :
       stragglers_.Observe(straggler, StragglerWatch::Times(calls))) {
    if (metrics_ != nullptr) metrics_->SetStraggler(change.id, change.flagged);
    const LearnerHandle* learner = nullptr;
    for (const auto& call : calls) {
      if (call.learner.id == change.id) learner = &call.learner;
    }
    ScopedLogFields fields = LearnerFields(*learner);
    if (!change.flagged) {
      spdlog::info("learner {} is no longer a straggler ({:.1f}x the others)",
                   learner->Name(), change.ratio);
      continue;
    }
    const std::string why = absl::StrFormat(
        "straggler: its Learn took over %.1fx the median of the others' for "
        "%d steps (%.1fx on the last)",
        straggler.factor, straggler.window, change.ratio);
    spdlog::warn("learner {} holds the steps back: {}", learner->Name(), why);
    if (straggler.action == StragglerConfig::Action::kShrink) {
      // Out until it is tried again; then judged afresh, so a learner still
      // slow then is taken out again.
      MarkFailed(*learner, why);
      stragglers_.Reset(change.id);
      if (metrics_ != nullptr) metrics_->SetStraggler(change.id, false);
    }
  }
}

void LearnerService::MarkFailed(const LearnerHandle& learner,
                                const std::string& why) {
  if (membership_.policy() != OnLearnerFailure::kShrink) return;
  membership_.Failed(learner, why);
  ScopedLogFields fields = LearnerFields(learner);
  spdlog::warn("learner {} leaves the plans (on_learner_failure: shrink): {}",
               learner.Name(), why);
}

grpc::ServerUnaryReactor* LearnerService::GetResource(
    grpc::CallbackServerContext* context,
    const pb::GetResourceRequest* /*request*/, pb::Resource* reply) {
  // Each ready learner answered GetResource as it connected
  // (lib/learners/learner_pool.h).
  Call call = Admit("GetResource", context);
  if (call.lease == nullptr) return call.reactor;
  auto learners = ReadyLearners("GetResource", *call.settings);
  if (learners.ok()) {
    // In 64 bits, saturated at int32's limit: a tree of large answers must
    // not wrap (the pool refuses learners that report negative figures).
    int64_t gpus = 0;
    int64_t count = 0;
    for (const LearnerHandle& learner : *learners) {
      gpus += learner.resource.gpus();
      // A plain learner may leave `learners` unset: it counts as one.
      count += std::max(1, learner.resource.learners());
    }
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    reply->set_gpus(static_cast<int32_t>(std::min(gpus, kMax)));
    reply->set_learners(static_cast<int32_t>(std::min(count, kMax)));
    reply->set_learn_stream(true);
  }
  if (call.timed) {
    AddTiming(context, call.lease->started(),
              LearnerCalls<pb::Resource, pb::Resource>(), call.lease->started(),
              clock_);
  }
  call.lease->Finish(call.reactor, ToGrpcWithFailedLearners(learners.status()));
  return call.reactor;
}

void LearnerService::StartTaskCall(const LearnerHandle& l,
                                   grpc::ClientContext* c,
                                   const pb::StartTaskRequest* r,
                                   pb::StartTaskReply* p,
                                   std::function<void(grpc::Status)> f) {
  l.stub->async()->StartTask(c, r, p, std::move(f));
}

grpc::ServerUnaryReactor* LearnerService::StartTask(
    grpc::CallbackServerContext* context, const pb::StartTaskRequest* request,
    pb::StartTaskReply* reply) {
  return Relay<pb::StartTaskRequest, pb::StartTaskReply>(
      "StartTask", context, *request, &StartTaskCall,
      [this, task = *request, reply](auto& calls) {
        // Replayed to learners that join while the task is open.
        std::vector<LearnerHandle> started;
        for (const auto& call : calls) started.push_back(call.learner);
        membership_.TaskStarted(task, started);
        reply->set_message(
            absl::StrCat("task started on ", calls.size(), " learner(s)"));
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* LearnerService::CloseTask(
    grpc::CallbackServerContext* context, const pb::CloseTaskRequest* request,
    pb::CloseTaskReply* reply) {
  // Learners that join from now on get no task replayed.
  membership_.TaskClosed();
  return Relay<pb::CloseTaskRequest, pb::CloseTaskReply>(
      "CloseTask", context, *request,
      [](const LearnerHandle& l, grpc::ClientContext* c,
         const pb::CloseTaskRequest* r, pb::CloseTaskReply* p,
         std::function<void(grpc::Status)> f) {
        l.stub->async()->CloseTask(c, r, p, std::move(f));
      },
      [reply](auto& calls) {
        reply->set_message(
            absl::StrCat("task closed on ", calls.size(), " learner(s)"));
        return grpc::Status::OK;
      });
}

}  // namespace aggregator
