#include "lib/service/learner_service.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "lib/aggregation/raw_batch.h"
#include "lib/base/grpc_status.h"
#include "lib/learners/call_path.h"
#include "lib/learners/failed_learners.h"
#include "lib/ops/logging.h"
#include "lib/service/call_timing.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

// The json log's fields of a line about one learner (lib/ops/logging.h).
ScopedLogFields LearnerFields(const LearnerHandle& learner) {
  return ScopedLogFields(
      {{"learner", learner.id}, {"address", learner.address.ToString()}});
}

// A batch has at most this many samples (a repeated field's limit).
constexpr int64_t kMaxBatch = 1 << 30;
// A tree stands for at most this many learners (DataDemand.learners): a
// merged per-learner list has one entry each, so an absurd count is refused.
constexpr int64_t kMaxLearners = 65536;

template <typename T>
void WarnIfDifferent(const char* method, const char* field,
                     const LearnerHandle& first, const T& first_value,
                     const LearnerHandle& other, const T& other_value) {
  if (first_value == other_value) return;
  spdlog::warn(
      "{}: learners disagree on {}: {} sent '{}', {} sent '{}'; kept {}'s",
      method, field, first.id, first_value, other.id, other_value, first.id);
}

// Parses a learner's Learn reply, releasing `bytes`. A reply that does not
// parse is either nested deeper than protobuf allows (a Struct of Structs) or
// not a LearnReply at all; the error says which.
grpc::Status ParseLearnReply(grpc::ByteBuffer* bytes, pb::LearnReply* reply) {
  // Shares the slices, so a second parse needs no copy of the bytes.
  grpc::ByteBuffer kept(*bytes);
  if (grpc::SerializationTraits<pb::LearnReply>::Deserialize(bytes, reply)
          .ok()) {
    return grpc::Status::OK;
  }
  const int limit =
      google::protobuf::io::CodedInputStream::GetDefaultRecursionLimit();
  grpc::ProtoBufferReader reader(&kept);
  google::protobuf::io::CodedInputStream input(&reader);
  // Deeper still, but bounded: parsing recurses on the stack.
  input.SetRecursionLimit(4 * limit);
  pb::LearnReply deeper;
  if (deeper.ParseFromCodedStream(&input)) {
    return grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat("a LearnReply nested deeper than protobuf's limit of ",
                     limit, " levels (a Struct of Structs in its info)"));
  }
  return grpc::Status(
      grpc::StatusCode::INTERNAL,
      absl::StrCat("a reply that cannot be read as a LearnReply (or that is "
                   "nested more than ",
                   4 * limit, " levels deep)"));
}

}  // namespace

LearnerService::LearnerService(LearnerPool* pool, const ServiceConfig& config,
                               LearnerServiceOptions options)
    : pool_(pool),
      metrics_(options.metrics),
      aggregator_id_(std::move(options.aggregator_id)),
      max_reply_bytes_(options.max_reply_bytes),
      stream_window_bytes_(options.stream_window_bytes),
      memory_(ProcessMemoryLimit()),
      late_(options.clock, options.metrics) {
  SetConfig(config);
}

void LearnerService::SetConfig(const ServiceConfig& config) {
  auto settings = std::make_shared<const Settings>(
      Settings{config, InfoMerger(config.merge), RawInfoMerger(config.merge),
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
  // Those awaiting the task's replay count: they join at the next GetData.
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

template <typename Request, typename Reply>
void LearnerService::Record(const char* method,
                            const LearnerCall<Request, Reply>& call) {
  pool_->RecordCall(call.learner, call.status);
  if (metrics_ != nullptr) {
    metrics_->LearnerCall(
        call.learner.id, method, call.status.error_code(),
        std::chrono::duration<double>(call.finished - call.started).count());
  }
}

LearnerService::Call LearnerService::Arrive(
    const char* method, grpc::CallbackServerContext* context) const {
  return Call{method,
              context,
              context->DefaultReactor(),
              std::chrono::steady_clock::now(),
              settings(),
              "",
              TimingWanted(*context)};
}

template <typename Request, typename Reply>
grpc::Status LearnerService::Summarize(
    const char* method, const LearnerCalls<Request, Reply>& calls) {
  std::vector<std::string> failures;
  pb::FailedLearners failed;
  grpc::StatusCode code = grpc::StatusCode::OK;
  for (const auto& call : calls) {
    Record(method, call);
    if (call.status.ok()) continue;
    if (code == grpc::StatusCode::OK) code = call.status.error_code();
    AddFailedLearner(call.learner.id, call.learner.address.ToString(),
                     call.status.error_code(), call.status.error_message(),
                     &failed);
    const std::string failure = absl::StrCat(CodeName(call.status.error_code()),
                                             ": ", call.status.error_message());
    failures.push_back(absl::StrCat(call.learner.Name(), ": ", failure));
    // The caller's own doing says nothing about the learner, nor does a step
    // a learner aborted because a peer of its training group died (ABORTED).
    if (call.status.error_code() != grpc::StatusCode::CANCELLED &&
        call.status.error_code() != grpc::StatusCode::INVALID_ARGUMENT &&
        call.status.error_code() != grpc::StatusCode::ABORTED) {
      MarkFailed(call.learner, absl::StrCat(method, " failed: ", failure));
    }
  }
  if (failures.empty()) return grpc::Status::OK;
  const std::string message =
      absl::StrCat(method, " failed on ", failures.size(), " of ", calls.size(),
                   " learner(s): ", absl::StrJoin(failures, "; "));
  // One learner failed: the line is about it (fields for the json log).
  // Several: the line names them all, and has no one learner's fields.
  std::optional<ScopedLogFields> fields;
  if (failed.learners_size() == 1) {
    const pb::FailedLearner& learner = failed.learners(0);
    fields.emplace(std::initializer_list<std::pair<const char*, std::string>>{
        {"learner", learner.id()},
        {"address", learner.address()},
        {"code", CodeName(static_cast<grpc::StatusCode>(learner.code()))}});
  }
  spdlog::warn("{}", message);
  return WithFailedLearners(grpc::Status(code, message), failed);
}

void LearnerService::Served(const char* method,
                            std::chrono::steady_clock::time_point started,
                            const grpc::Status& status) {
  if (metrics_ == nullptr) return;
  metrics_->Served(
      method, status.error_code(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count());
}

void LearnerService::Leave() {
  MutexLock lock(&mu_);
  --in_flight_;
}

void LearnerService::Finish(grpc::ServerUnaryReactor* reactor,
                            const char* method,
                            std::chrono::steady_clock::time_point started,
                            const grpc::Status& status) {
  Served(method, started, status);
  reactor->Finish(status);
  Leave();
}

bool LearnerService::Enter(grpc::CallbackServerContext* context,
                           grpc::ServerUnaryReactor* reactor,
                           const char* method, std::string* call_path) {
  const grpc::Status admitted = Admit(context, method, call_path);
  if (!admitted.ok()) reactor->Finish(admitted);
  return admitted.ok();
}

grpc::Status LearnerService::Admit(grpc::CallbackServerContext* context,
                                   const char* method, std::string* call_path) {
  grpc::Status refused;
  if (!aggregator_id_.empty()) {
    // Whoever called can tell which aggregator answered (a probe that reaches
    // its own sender).
    context->AddInitialMetadata(kAggregatorIdKey, aggregator_id_);
    const std::vector<std::string> path = IncomingPath(*context);
    refused = CheckPath(path, aggregator_id_, method);
    *call_path = OutgoingPath(path, aggregator_id_);
  }
  if (refused.ok()) {
    MutexLock lock(&mu_);
    if (!draining_) {
      ++in_flight_;
      return grpc::Status::OK;
    }
    refused =
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     absl::StrCat(method, ": aggregatord is shutting down"));
  } else {
    spdlog::warn("{}", refused.error_message());
  }
  if (metrics_ != nullptr) metrics_->Served(method, refused.error_code(), 0);
  return refused;
}

void LearnerService::StartDraining() {
  MutexLock lock(&mu_);
  draining_ = true;
}

bool LearnerService::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0;
  };
  return mu_.AwaitWithTimeout(
      absl::Condition(&idle),
      absl::FromChrono(deadline - std::chrono::steady_clock::now()));
}

template <typename Request, typename Reply>
grpc::ServerUnaryReactor* LearnerService::Relay(
    const char* method, grpc::CallbackServerContext* context,
    const Request& request, StartCall<Request, Reply> start,
    std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge) {
  Call call = Arrive(method, context);
  if (!Enter(context, call.reactor, method, &call.path)) return call.reactor;
  auto learners = ReadyLearners(method, *call.settings);
  if (!learners.ok()) {
    Finish(call.reactor, method, call.started,
           ToGrpcWithFailedLearners(learners.status()));
    return call.reactor;
  }
  RelayTo<Request, Reply>(call, *std::move(learners), request, start,
                          std::move(merge));
  return call.reactor;
}

template <typename Request, typename Reply>
void LearnerService::WatchedFanOut(
    const char* method, grpc::CallbackServerContext* context,
    const Settings& settings, const std::string& call_path,
    std::vector<LearnerHandle> learners, std::vector<Request> requests,
    StartCall<Request, Reply> start, bool over_others,
    std::function<void(LearnerCalls<Request, Reply>&)> done) {
  auto watch = late_.Begin(method, settings.config.straggler.late_after,
                           membership_.policy(), learners);
  OneLeft hook = late_.Hook(watch);
  const size_t needed =
      static_cast<size_t>(std::max(1, settings.config.min_learners));
  FanOut<Request, Reply>(
      context, settings.config.call_timeout, call_path, std::move(learners),
      std::move(requests), start,
      [this, watch, method, over_others, needed,
       done = std::move(done)](LearnerCalls<Request, Reply>& calls) {
        std::vector<LateAnswers::Answer> answers;
        for (const auto& call : calls) {
          answers.push_back({call.status.ok(), call.finished - call.started});
        }
        const std::optional<LateAnswers::Late> late =
            late_.End(*watch, answers);
        if (!late) {
          done(calls);
          return;
        }
        auto& silent = calls[late->index];
        silent.status =
            grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, late->why);
        if (!over_others || membership_.policy() != OnLearnerFailure::kShrink ||
            calls.size() - 1 < needed) {
          done(calls);
          return;
        }
        // The others' answers stand; the late learner's context stays where
        // it is (the late timer may still be cancelling it).
        Record(method, silent);
        MarkFailed(silent.learner, absl::StrCat(method, " ", late->why));
        LearnerCalls<Request, Reply> others;
        for (size_t i = 0; i < calls.size(); ++i) {
          if (i != late->index) others.push_back(std::move(calls[i]));
        }
        done(others);
      },
      std::move(hook));
}

template <typename Request, typename Reply>
void LearnerService::RelayTo(
    const Call& call, std::vector<LearnerHandle> learners,
    const Request& request, StartCall<Request, Reply> start,
    std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge) {
  WatchedFanOut<Request, Reply>(
      call.method, call.context, *call.settings, call.path, std::move(learners),
      {request}, start, /*over_others=*/true,
      [this, call, merge = std::move(merge)](auto& calls) {
        grpc::Status status = Summarize(call.method, calls);
        if (status.ok()) status = merge(calls);
        if (call.timed) {
          AddTiming(call.context, call.started, calls,
                    std::chrono::steady_clock::now());
        }
        Finish(call.reactor, call.method, call.started, status);
      });
}

void LearnerService::WatchStragglers(
    const LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>& calls,
    const Settings& settings) {
  std::vector<std::pair<std::string, double>> seconds;
  for (const auto& call : calls) {
    if (!call.status.ok()) return;  // a failure is not a slow step
    seconds.emplace_back(
        call.learner.id,
        std::chrono::duration<double>(call.finished - call.started).count());
  }
  const StragglerConfig& straggler = settings.config.straggler;
  for (const StragglerWatch::Change& change :
       stragglers_.Observe(straggler, seconds)) {
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
  const auto started = std::chrono::steady_clock::now();
  auto* reactor = context->DefaultReactor();
  std::string call_path;
  if (!Enter(context, reactor, "GetResource", &call_path)) return reactor;
  auto learners = ReadyLearners("GetResource", *settings());
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
  if (TimingWanted(*context)) {
    AddTiming(context, started, LearnerCalls<pb::Resource, pb::Resource>(),
              started);
  }
  Finish(reactor, "GetResource", started,
         ToGrpcWithFailedLearners(learners.status()));
  return reactor;
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

grpc::ServerUnaryReactor* LearnerService::GetData(
    grpc::CallbackServerContext* context, const pb::GetDataRequest* request,
    pb::DataDemand* reply) {
  Call call = Arrive("GetData", context);
  if (!Enter(context, call.reactor, call.method, &call.path)) {
    return call.reactor;
  }
  Membership::View view =
      membership_.Select(pool_->Ready(), /*claim_replays=*/true);
  if (view.to_replay.empty()) {
    PlanGetData(call, std::move(view), *request, reply);
    return call.reactor;
  }
  // Learners that join while a task is open get it first; those whose replay
  // fails stay out of this plan (and the next, until they are tried again).
  FanOut<pb::StartTaskRequest, pb::StartTaskReply>(
      context, call.settings->config.call_timeout, call.path, view.to_replay,
      {*view.task}, &StartTaskCall,
      [this, call, request = *request, reply](auto& calls) {
        for (const auto& replay : calls) {
          Record("StartTask", replay);
          membership_.ReplayEnded(replay.learner);
          if (replay.status.ok()) {
            membership_.Rejoined(replay.learner);
            ScopedLogFields fields = LearnerFields(replay.learner);
            spdlog::info("learner {} rejoins the plans: the task was replayed",
                         replay.learner.Name());
          } else {
            MarkFailed(replay.learner,
                       absl::StrCat("StartTask replay failed: ",
                                    CodeName(replay.status.error_code()), ": ",
                                    replay.status.error_message()));
          }
        }
        PlanGetData(call, membership_.Select(pool_->Ready()), request, reply);
      });
  return call.reactor;
}

void LearnerService::PlanGetData(const Call& call, Membership::View view,
                                 const pb::GetDataRequest& request,
                                 pb::DataDemand* reply) {
  if (absl::Status enough =
          CheckEnough(call.method, *call.settings, view.members.size());
      !enough.ok()) {
    Finish(call.reactor, call.method, call.started,
           ToGrpcWithFailedLearners(enough));
    return;
  }
  uint64_t generation = view.generation;
  auto membership = std::make_shared<pb::Membership>(Membership::ToProto(view));
  RelayTo<pb::GetDataRequest, pb::DataDemand>(
      call, std::move(view.members), request,
      [](const LearnerHandle& l, grpc::ClientContext* c,
         const pb::GetDataRequest* r, pb::DataDemand* p,
         std::function<void(grpc::Status)> f) {
        l.stub->async()->GetData(c, r, p, std::move(f));
      },
      [this, reply, generation, membership](auto& calls) mutable {
        if (calls.size() != static_cast<size_t>(membership->members_size())) {
          // A late learner left (on_learner_failure: shrink): the plan is over
          // the others, a member set of its own generation.
          Membership::View now = membership_.Select(pool_->Ready());
          std::vector<std::string> planned;
          std::vector<std::string> members;
          for (const auto& call : calls) planned.push_back(call.learner.id);
          for (const auto& member : now.members) members.push_back(member.id);
          if (planned != members) {
            return grpc::Status(
                grpc::StatusCode::UNAVAILABLE,
                absl::StrCat("GetData: the learners in the plans changed while "
                             "it ran (now ",
                             absl::StrJoin(members, ", "), "; answered ",
                             absl::StrJoin(planned, ", "),
                             "); call GetData again"));
          }
          generation = now.generation;
          *membership = Membership::ToProto(now);
        }
        std::vector<PlanSlice> slices;
        const auto& first = calls.front();
        int64_t learners = 0;  // the plan stands for
        for (const auto& call : calls) {
          const pb::DataDemand& demand = call.reply;
          // Bounded so that sums cannot overflow and a plan fits one message.
          if (demand.batch_size() < 0 || demand.batch_size() > kMaxBatch) {
            const std::string why =
                absl::StrCat("demanded batch_size ", demand.batch_size(),
                             "; it must be between 0 and ", kMaxBatch);
            pb::FailedLearners failed;
            AddFailedLearner(call.learner.id, call.learner.address.ToString(),
                             grpc::StatusCode::INTERNAL, why, &failed);
            return WithFailedLearners(
                grpc::Status(
                    grpc::StatusCode::INTERNAL,
                    absl::StrCat("GetData: ", call.learner.Name(), " ", why)),
                failed);
          }
          if (demand.learners() < 0 || demand.learners() > kMaxLearners) {
            return grpc::Status(
                grpc::StatusCode::INTERNAL,
                absl::StrCat("GetData: ", call.learner.Name(),
                             " said it stands for ", demand.learners(),
                             " learners (DataDemand.learners); it must be "
                             "between 0 and ",
                             kMaxLearners));
          }
          learners += std::max<int64_t>(demand.learners(), 1);
          WarnIfDifferent("GetData", "cur_learner_iter", first.learner,
                          first.reply.cur_learner_iter(), call.learner,
                          demand.cur_learner_iter());
          WarnIfDifferent("GetData", "task_id", first.learner,
                          first.reply.task_id(), call.learner,
                          demand.task_id());
          WarnIfDifferent("GetData", "buffer_id", first.learner,
                          first.reply.buffer_id(), call.learner,
                          demand.buffer_id());
          slices.push_back(PlanSlice{call.learner.id, call.learner.epoch,
                                     demand.batch_size(), demand.plan_id(),
                                     static_cast<size_t>(demand.learners())});
        }
        if (learners > kMaxLearners) {
          return grpc::Status(
              grpc::StatusCode::INTERNAL,
              absl::StrCat("GetData: the plan would stand for ", learners,
                           " learners (the sum of the learners' "
                           "DataDemand.learners), more than ",
                           kMaxLearners));
        }
        *reply = std::move(calls.front().reply);
        auto plan = planner_.Record(std::move(slices), generation);
        reply->set_batch_size(plan->total);
        reply->set_plan_id(plan->id);
        reply->set_learners(static_cast<int32_t>(learners));
        *reply->mutable_membership() = *membership;
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* LearnerService::Learn(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* reply) {
  const auto started = std::chrono::steady_clock::now();
  auto* reactor = context->DefaultReactor();
  std::string call_path;
  if (!Enter(context, reactor, "Learn", &call_path)) return reactor;
  auto fail = [&](const grpc::Status& status) {
    Finish(reactor, "Learn", started, status);
    return reactor;
  };
  auto settings = this->settings();
  // The batch is held until the learners have answered: it counts against
  // max_inflight_bytes until then.
  auto lease =
      inflight_.Acquire("Learn", static_cast<int64_t>(request->Length()),
                        settings->max_inflight_bytes);
  if (!lease.ok()) return fail(ToGrpc(lease.status()));
  // More samples than any plan demands cannot be right: the scan stops there.
  const int64_t largest = planner_.LargestTotal();
  auto batch = RawBatch::Scan(*request, largest);
  if (!batch.ok() && largest == 0) {
    // No plan left to learn on: the plan the request names says why.
    batch = RawBatch::Scan(*request, std::numeric_limits<int64_t>::max());
  }
  if (!batch.ok()) return fail(ToGrpc(batch.status()));
  auto claim = planner_.Claim(batch->plan_id());
  if (!claim.ok()) return fail(ToGrpc(claim.status()));
  const Plan& plan = claim->plan();
  absl::StatusOr<std::vector<LearnerHandle>> learners =
      PlanLearners("Learn", plan);
  if (!learners.ok()) return fail(ToGrpcWithFailedLearners(learners.status()));
  if (absl::Status count =
          CheckSampleCount(plan, static_cast<int64_t>(batch->sample_count()));
      !count.ok()) {
    return fail(ToGrpc(count));
  }
  // Part i holds learner i's samples as sub-slices of the received bytes.
  std::vector<size_t> counts;
  std::vector<size_t> stands_for;  // each learner's learners, for the merge
  std::vector<std::string> plan_ids;
  for (const PlanSlice& slice : plan.slices) {
    counts.push_back(static_cast<size_t>(slice.batch_size));
    stands_for.push_back(slice.learners);
    plan_ids.push_back(slice.learner_plan_id);
  }
  // Appended to each slice: a field of LearnRequest may come in any order.
  auto parts =
      batch->Cut(counts, plan_ids, MembershipStamp(plan).SerializeAsString());
  if (!parts.ok()) return fail(ToGrpc(parts.status()));
  std::vector<grpc::ByteBuffer> requests;
  for (size_t i = 0; i < parts->size(); ++i) {
    if (metrics_ != nullptr) {
      metrics_->Forwarded((*learners)[i].id,
                          static_cast<double>((*parts)[i].sample_bytes));
    }
    requests.push_back(std::move((*parts)[i].request));
  }
  // The claim lives until the learners have answered: consumed if they all
  // trained (even if their answers cannot be merged), given back otherwise.
  auto held = std::make_shared<PlanClaim>(*std::move(claim));
  // A late learner fails the step: its slice was not trained.
  WatchedFanOut<grpc::ByteBuffer, grpc::ByteBuffer>(
      "Learn", context, *settings, call_path, *std::move(learners),
      std::move(requests),
      [](const LearnerHandle& l, grpc::ClientContext* c,
         const grpc::ByteBuffer* r, grpc::ByteBuffer* p,
         std::function<void(grpc::Status)> f) {
        l.generic->UnaryCall(c, kLearnMethod, grpc::StubOptions(), r, p,
                             std::move(f));
      },
      /*over_others=*/false,
      [this, context, reactor, reply, settings, started, held,
       timed = TimingWanted(*context),
       lease = std::shared_ptr<InflightBudget::Lease>(*std::move(lease)),
       counts = std::move(counts),
       stands_for = std::move(stands_for)](auto& calls) mutable {
        WatchStragglers(calls, *settings);
        // Once every learner has trained, a retry of the plan would train them
        // twice, whatever became of their answers: the plan is used.
        const bool trained =
            std::all_of(calls.begin(), calls.end(),
                        [](const auto& call) { return call.status.ok(); });
        const grpc::Status status =
            MergeLearn("Learn", calls, counts, stands_for, *settings, reply);
        if (trained) held->Consume();
        // The batch's bytes are counted free before the caller hears back: a
        // caller that sends its next batch at once must find the budget.
        lease.reset();
        if (timed) {
          AddTiming(context, started, calls, std::chrono::steady_clock::now());
        }
        Finish(reactor, "Learn", started, status);
      });
  return reactor;
}

pb::LearnRequest LearnerService::MembershipStamp(const Plan& plan) {
  pb::LearnRequest stamp;
  stamp.mutable_membership()->set_generation(plan.generation);
  for (const PlanSlice& slice : plan.slices) {
    stamp.mutable_membership()->add_members(slice.learner_id);
  }
  return stamp;
}

absl::StatusOr<std::vector<LearnerHandle>> LearnerService::PlanLearners(
    const char* method, const Plan& plan) const {
  std::vector<LearnerHandle> learners;
  std::vector<std::string> gone;
  pb::FailedLearners failed;
  for (const PlanSlice& slice : plan.slices) {
    auto learner = pool_->Current(slice.learner_id, slice.epoch);
    if (learner.ok()) {
      learners.push_back(std::move(*learner));
    } else {
      gone.emplace_back(learner.status().message());
      // The message names the learner first: the details say the rest.
      const std::string address = AddressOf(slice.learner_id);
      absl::string_view why = learner.status().message();
      absl::ConsumePrefix(&why,
                          absl::StrCat(slice.learner_id, " (", address, ") "));
      AddFailedLearner(slice.learner_id, address,
                       grpc::StatusCode::FAILED_PRECONDITION, std::string(why),
                       &failed);
    }
  }
  if (!gone.empty()) {
    absl::Status changed = absl::FailedPreconditionError(
        absl::StrCat(method, ": the learners of plan '", plan.id,
                     "' changed since GetData: ", absl::StrJoin(gone, "; "),
                     "; call GetData again"));
    AttachFailedLearners(failed, &changed);
    return changed;
  }
  return learners;
}

std::string LearnerService::AddressOf(const std::string& id) const {
  for (const LearnerSnapshot& learner : pool_->Status()) {
    if (learner.id == id) return learner.address.ToString();
  }
  return "";  // no longer configured
}

grpc::Status LearnerService::MergeLearn(
    const char* method, LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>& calls,
    const std::vector<size_t>& counts, const std::vector<size_t>& stands_for,
    const Settings& settings, grpc::ByteBuffer* reply) {
  grpc::Status status = Summarize(method, calls);
  if (!status.ok()) return status;
  std::vector<std::string> shares;  // each learner's reply, for a size error
  for (const auto& call : calls) {
    shares.push_back(
        absl::StrCat(call.learner.Name(), " ", call.reply.Length(), " bytes"));
  }
  // Checked before it is sent: gRPC would fail it only after, with a message
  // naming nobody, once the learners have trained.
  auto too_large = [&](size_t size) {
    if (size <= static_cast<size_t>(max_reply_bytes_)) return false;
    const std::string message = absl::StrCat(
        method, ": the merged reply is ", size,
        " bytes, over max_message_bytes (", max_reply_bytes_,
        "); the learners trained, but their infos (",
        absl::StrJoin(shares, ", "),
        ") are too large together: raise max_message_bytes or send less info");
    spdlog::error("{}", message);
    status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message);
    return true;
  };

  // A clean merge is done on the replies' bytes (lib/aggregation/
  // raw_info_merger.h); anything else is parsed and merged by InfoMerger.
  // The flat copies go before that parse: one copy of the replies at a time.
  {
    std::vector<std::string> flat(calls.size());
    std::vector<absl::string_view> bytes;
    for (size_t i = 0; i < calls.size(); ++i) {
      std::vector<grpc::Slice> slices;
      if (calls[i].reply.Valid()) (void)calls[i].reply.Dump(&slices);
      for (const grpc::Slice& slice : slices) {
        flat[i].append(reinterpret_cast<const char*>(slice.begin()),
                       slice.size());
      }
      bytes.push_back(flat[i]);
    }
    if (auto merged = settings.raw_merger.Merge(bytes, counts, stands_for);
        merged.has_value()) {
      for (size_t i = 1; i < calls.size(); ++i) {
        WarnIfDifferent(method, "task_id", calls[0].learner,
                        merged->task_ids[0], calls[i].learner,
                        merged->task_ids[i]);
        WarnIfDifferent(method, "buffer_id", calls[0].learner,
                        merged->buffer_ids[0], calls[i].learner,
                        merged->buffer_ids[i]);
      }
      if (too_large(merged->reply.size())) return status;
      grpc::Slice slice(merged->reply.data(), merged->reply.size());
      *reply = grpc::ByteBuffer(&slice, 1);
      return grpc::Status::OK;
    }
  }

  std::vector<pb::LearnReply> replies(calls.size());
  std::vector<google::protobuf::Struct*> infos;
  std::vector<std::string> ids;
  for (size_t i = 0; i < calls.size(); ++i) {
    const LearnerHandle& learner = calls[i].learner;
    // Parsing releases the received bytes: one copy at a time.
    if (grpc::Status parsed = ParseLearnReply(&calls[i].reply, &replies[i]);
        !parsed.ok()) {
      pb::FailedLearners failed;
      AddFailedLearner(learner.id, learner.address.ToString(),
                       parsed.error_code(),
                       absl::StrCat("sent ", parsed.error_message()), &failed);
      return WithFailedLearners(
          grpc::Status(parsed.error_code(),
                       absl::StrCat(method, ": ", learner.Name(), " sent ",
                                    parsed.error_message())),
          failed);
    }
    infos.push_back(replies[i].mutable_info());
    ids.push_back(learner.id);
    WarnIfDifferent(method, "task_id", calls[0].learner, replies[0].task_id(),
                    learner, replies[i].task_id());
    WarnIfDifferent(method, "buffer_id", calls[0].learner,
                    replies[0].buffer_id(), learner, replies[i].buffer_id());
  }
  auto merged = settings.merger.Merge(infos, ids, counts, stands_for);
  if (!merged.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat(method, ": ", merged.status().message()));
  }
  for (const std::string& warning : merged->warnings) {
    spdlog::warn("{}: {}", method, warning);
  }
  pb::LearnReply out;
  out.set_task_id(replies[0].task_id());
  out.set_buffer_id(replies[0].buffer_id());
  *out.mutable_info() = std::move(merged->info);
  if (too_large(out.ByteSizeLong())) return status;
  bool own_buffer = false;
  return grpc::SerializationTraits<pb::LearnReply>::Serialize(out, reply,
                                                              &own_buffer);
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
