#include "lib/service/learner_service.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/alarm.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/aggregation/raw_batch.h"
#include "lib/aggregation/stream_splitter.h"
#include "lib/learners/call_path.h"
#include "lib/service/call_timing.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

// A batch has at most this many samples (a repeated field's limit).
constexpr int64_t kMaxBatch = 1 << 30;

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

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
      memory_(ProcessMemoryLimit()) {
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
  return absl::UnavailableError(absl::StrCat(
      method, ": ", count, " of ", pool_->size(), " learner(s) ready",
      membership_.policy() == OnLearnerFailure::kShrink ? " and in the plans"
                                                        : "",
      ", ", needed, " needed (min_learners ", settings.config.min_learners, ")",
      why.empty() ? "" : ": ", why));
}

absl::StatusOr<std::vector<LearnerHandle>> LearnerService::ReadyLearners(
    const char* method, const Settings& settings) {
  Membership::View view = membership_.Select(pool_->Ready());
  // Those awaiting the task's replay count: they join at the next GetData.
  std::vector<LearnerHandle> learners = std::move(view.members);
  for (LearnerHandle& learner : view.to_replay) {
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
  grpc::StatusCode code = grpc::StatusCode::OK;
  for (const auto& call : calls) {
    Record(method, call);
    if (call.status.ok()) continue;
    if (code == grpc::StatusCode::OK) code = call.status.error_code();
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
  spdlog::warn("{}", message);
  return grpc::Status(code, message);
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
    Finish(call.reactor, method, call.started, ToGrpc(learners.status()));
    return call.reactor;
  }
  RelayTo<Request, Reply>(call, *std::move(learners), request, start,
                          std::move(merge));
  return call.reactor;
}

template <typename Request, typename Reply>
void LearnerService::RelayTo(
    const Call& call, std::vector<LearnerHandle> learners,
    const Request& request, StartCall<Request, Reply> start,
    std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge) {
  FanOut<Request, Reply>(call.context, call.settings->config.call_timeout,
                         call.path, std::move(learners), {request}, start,
                         [this, call, merge = std::move(merge)](auto& calls) {
                           grpc::Status status = Summarize(call.method, calls);
                           if (status.ok()) status = merge(calls);
                           if (call.timed) {
                             AddTiming(call.context, call.started, calls,
                                       std::chrono::steady_clock::now());
                           }
                           Finish(call.reactor, call.method, call.started,
                                  status);
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
  Finish(reactor, "GetResource", started, ToGrpc(learners.status()));
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
  Membership::View view = membership_.Select(pool_->Ready());
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
          if (replay.status.ok()) {
            membership_.Rejoined(replay.learner);
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
    Finish(call.reactor, call.method, call.started, ToGrpc(enough));
    return;
  }
  const uint64_t generation = view.generation;
  auto membership = std::make_shared<pb::Membership>(Membership::ToProto(view));
  RelayTo<pb::GetDataRequest, pb::DataDemand>(
      call, std::move(view.members), request,
      [](const LearnerHandle& l, grpc::ClientContext* c,
         const pb::GetDataRequest* r, pb::DataDemand* p,
         std::function<void(grpc::Status)> f) {
        l.stub->async()->GetData(c, r, p, std::move(f));
      },
      [this, reply, generation, membership](auto& calls) {
        std::vector<PlanSlice> slices;
        const auto& first = calls.front();
        for (const auto& call : calls) {
          const pb::DataDemand& demand = call.reply;
          // Bounded so that sums cannot overflow and a plan fits one message.
          if (demand.batch_size() < 0 || demand.batch_size() > kMaxBatch) {
            return grpc::Status(
                grpc::StatusCode::INTERNAL,
                absl::StrCat("GetData: ", call.learner.Name(),
                             " demanded batch_size ", demand.batch_size(),
                             "; it must be between 0 and ", kMaxBatch));
          }
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
                                     demand.batch_size(), demand.plan_id()});
        }
        *reply = std::move(calls.front().reply);
        auto plan = planner_.Record(std::move(slices), generation);
        reply->set_batch_size(plan->total);
        reply->set_plan_id(plan->id);
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
  if (!learners.ok()) return fail(ToGrpc(learners.status()));
  if (absl::Status count =
          CheckSampleCount(plan, static_cast<int64_t>(batch->sample_count()));
      !count.ok()) {
    return fail(ToGrpc(count));
  }
  // Part i holds learner i's samples as sub-slices of the received bytes.
  std::vector<size_t> counts;
  std::vector<std::string> plan_ids;
  for (const PlanSlice& slice : plan.slices) {
    counts.push_back(static_cast<size_t>(slice.batch_size));
    plan_ids.push_back(slice.learner_plan_id);
  }
  // Each slice says which learners train this step (appended: a field of
  // LearnRequest may come in any order).
  pb::LearnRequest stamp;
  stamp.mutable_membership()->set_generation(plan.generation);
  for (const PlanSlice& slice : plan.slices) {
    stamp.mutable_membership()->add_members(slice.learner_id);
  }
  auto parts = batch->Cut(counts, plan_ids, stamp.SerializeAsString());
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
  FanOut<grpc::ByteBuffer, grpc::ByteBuffer>(
      context, settings->config.call_timeout, call_path, *std::move(learners),
      std::move(requests),
      [](const LearnerHandle& l, grpc::ClientContext* c,
         const grpc::ByteBuffer* r, grpc::ByteBuffer* p,
         std::function<void(grpc::Status)> f) {
        l.generic->UnaryCall(c, kLearnMethod, grpc::StubOptions(), r, p,
                             std::move(f));
      },
      [this, context, reactor, reply, settings, started, held,
       timed = TimingWanted(*context),
       lease = std::shared_ptr<InflightBudget::Lease>(*std::move(lease)),
       counts = std::move(counts)](auto& calls) mutable {
        WatchStragglers(calls, *settings);
        // Once every learner has trained, a retry of the plan would train them
        // twice, whatever became of their answers: the plan is used.
        const bool trained =
            std::all_of(calls.begin(), calls.end(),
                        [](const auto& call) { return call.status.ok(); });
        const grpc::Status status =
            MergeLearn("Learn", calls, counts, *settings, reply);
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

// LearnStream ----------------------------------------------------------------

// One LearnStream. Reads the caller's messages one at a time, cuts each into
// the learners' pieces (StreamSplitter) and gives them to one SliceSender per
// learner, which sends the learner its slice as soon as it is complete, or
// streams it on as it comes. The caller is read no faster than the streamed
// learners take their pieces (LearnerServiceOptions::stream_window_bytes). The
// call ends when every learner has answered and the answers are merged, or on
// the first failure, which cancels the learner calls still running at once;
// the caller hears back when they are over, with the plan (used if any
// learner had samples), the budget and the records settled.
//
// Lifetime: three references, each dropped once: gRPC's (OnDone), the
// bookkeeping's (Complete, which waits for every started learner call) and
// the deadline alarm's (its callback runs once, fired or cancelled). gRPC
// operations (StartRead, Finish, the senders') are never started under mu_:
// gRPC may run a reaction within them.
class LearnerService::LearnStreamCall final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  static LearnStreamCall* Start(LearnerService* service,
                                grpc::CallbackServerContext* context,
                                grpc::ByteBuffer* reply) {
    auto* call = new LearnStreamCall(service, context, reply);
    const grpc::Status admitted =
        service->Admit(context, kMethod, &call->call_path_);
    if (!admitted.ok()) {
      // gRPC's reference only, and a call already over: a cancellation
      // (OnCancel) finds it failed and does nothing.
      call->refs_ = 1;
      {
        MutexLock lock(&call->mu_);
        call->failure_ = admitted;
        call->completing_ = true;
        call->finish_decided_ = true;
      }
      call->Finish(admitted);
      return call;
    }
    call->alarm_.Set(call->deadline_, [call](bool fired) {
      if (fired) call->OnDeadline();
      call->Unref();
    });
    call->StartRead(&call->incoming_);
    return call;
  }

 private:
  static constexpr char kMethod[] = "LearnStream";
  using Calls = LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>;
  struct Send {
    SliceSender* sender;
    StreamSplitter::Piece piece;
  };

  LearnStreamCall(LearnerService* service, grpc::CallbackServerContext* context,
                  grpc::ByteBuffer* reply)
      : service_(service),
        context_(context),
        reply_(reply),
        started_(std::chrono::steady_clock::now()),
        settings_(service->settings()),
        deadline_(std::chrono::system_clock::now() +
                  settings_->config.call_timeout),
        timed_(TimingWanted(*context)) {}

  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  void OnDone() override { Unref(); }

  void OnCancel() override {
    Fail(grpc::Status(grpc::StatusCode::CANCELLED,
                      "LearnStream: cancelled by the caller"));
  }

  void OnDeadline() {
    grpc::Status late;
    {
      MutexLock lock(&mu_);
      late = TimedOut();
    }
    Fail(late);
  }

  // The whole call ran out of time; says how much of the batch had come.
  grpc::Status TimedOut() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t received = 0;
    int64_t total = 0;
    if (splitter_.has_value()) {
      received = static_cast<int64_t>(splitter_->received());
      total = static_cast<int64_t>(splitter_->total());
    }
    return grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("LearnStream: not done within call_timeout (",
                     settings_->config.call_timeout.count(), " ms): ", received,
                     " of ", total, " samples had arrived"));
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      EndOfStream();
      return;
    }
    grpc::ByteBuffer message;
    message.Swap(&incoming_);
    std::vector<Send> sends;
    std::vector<SliceSender*> closes;
    grpc::Status taken;
    {
      MutexLock lock(&mu_);
      if (failure_.has_value()) return;
      taken = Take(message, &sends, &closes);
    }
    if (!taken.ok()) {
      Fail(taken);
      return;
    }
    for (Send& send : sends) {
      send.sender->Add(std::move(send.piece.samples), send.piece.bytes);
    }
    for (SliceSender* sender : closes) sender->Close();
    ReadNext();
  }

  // The next message: the plan (the first), the budget, its pieces; what to
  // give the senders goes to `sends` and `closes`.
  grpc::Status Take(const grpc::ByteBuffer& message, std::vector<Send>* sends,
                    std::vector<SliceSender*>* closes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++messages_;
    auto lease = service_->inflight_.Acquire(
        kMethod, static_cast<int64_t>(message.Length()),
        settings_->max_inflight_bytes);
    if (!lease.ok()) return ToGrpc(lease.status());
    leases_.push_back(*std::move(lease));
    // More samples than any plan (the first message) or than the plan has
    // left cannot be right: the scan stops there.
    const bool first = !splitter_.has_value();
    auto batch = RawBatch::ScanUpTo(
        message, first ? service_->planner_.LargestTotal()
                       : static_cast<int64_t>(splitter_->remaining()));
    if (!batch.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("LearnStream: message ", messages_, ": ",
                                       batch.status().message()));
    }
    if (first) {
      arrived_ = std::chrono::steady_clock::now();
      if (grpc::Status begun = Begin(*batch); !begun.ok()) return begun;
    } else if (!batch->plan_id().empty() &&
               batch->plan_id() != claim_->plan().id) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("LearnStream: message ", messages_, " names plan '",
                       batch->plan_id(), "', the stream's is '",
                       claim_->plan().id, "'"));
    }
    if (batch->exceeds() || batch->sample_count() > splitter_->remaining()) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("LearnStream: more than ", splitter_->total(),
                       " samples by message ", messages_, ", but ",
                       DescribePlan(claim_->plan())));
    }
    auto pieces = splitter_->Add(*batch);
    if (!pieces.ok()) return ToGrpc(pieces.status());
    for (StreamSplitter::Piece& piece : *pieces) {
      if (service_->metrics_ != nullptr) {
        service_->metrics_->Forwarded(calls_[piece.learner].learner.id,
                                      static_cast<double>(piece.bytes));
      }
      sends->push_back(Send{senders_[piece.learner].get(), std::move(piece)});
    }
    // A learner whose slice is whole gets it now; the last one with samples
    // only when the stream ends, so a stream with too many samples never
    // trains them all.
    const size_t complete = std::min(splitter_->complete(), last_share_);
    for (; closed_ < complete; ++closed_) {
      closes->push_back(senders_[closed_].get());
    }
    return grpc::Status::OK;
  }

  // Claims the first message's plan and sets up a sender per learner.
  grpc::Status Begin(const RawBatch& first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto claim = service_->planner_.Claim(first.plan_id());
    if (!claim.ok()) {
      return grpc::Status(
          static_cast<grpc::StatusCode>(claim.status().code()),
          absl::StrCat("LearnStream: ", claim.status().message()));
    }
    claim_.emplace(*std::move(claim));
    const Plan& plan = claim_->plan();
    auto learners = service_->PlanLearners(kMethod, plan);
    if (!learners.ok()) return ToGrpc(learners.status());
    // Each slice says which learners train this step.
    pb::LearnRequest stamp;
    stamp.mutable_membership()->set_generation(plan.generation);
    for (const PlanSlice& slice : plan.slices) {
      stamp.mutable_membership()->add_members(slice.learner_id);
    }
    calls_.resize(learners->size());
    done_.assign(learners->size(), false);
    for (size_t i = 0; i < learners->size(); ++i) {
      counts_.push_back(static_cast<size_t>(plan.slices[i].batch_size));
      Calls::value_type& call = calls_[i];
      call.learner = std::move((*learners)[i]);
      call.context = NewLearnerContext(context_, deadline_, call_path_);
      pb::LearnRequest head = stamp;
      head.set_plan_id(plan.slices[i].learner_plan_id);
      senders_.push_back(std::make_unique<SliceSender>(
          &call, head.SerializeAsString(),
          SliceSender::Hooks{[this] { OnSent(); },
                             [this, i] { LearnerDone(i); }}));
    }
    splitter_.emplace(counts_);
    last_share_ = senders_.empty() ? 0 : senders_.size() - 1;
    while (last_share_ > 0 && counts_[last_share_] == 0) --last_share_;
    if (senders_.empty()) {
      return grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("LearnStream: plan '", plan.id, "' has no learners"));
    }
    return grpc::Status::OK;
  }

  // The caller closed its side (or went away).
  void EndOfStream() {
    if (context_->IsCancelled()) {
      OnCancel();
      return;
    }
    std::vector<SliceSender*> closes;
    grpc::Status ended;
    {
      MutexLock lock(&mu_);
      if (failure_.has_value()) return;
      if (!splitter_.has_value()) {
        ended = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "LearnStream: the stream ended before its first "
                             "message; send the batch, plan_id first");
      } else if (splitter_->remaining() > 0) {
        ended =
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("LearnStream: the stream ended after ",
                                      splitter_->received(), " samples, but ",
                                      DescribePlan(claim_->plan())));
      } else {
        for (; closed_ < senders_.size(); ++closed_) {
          closes.push_back(senders_[closed_].get());
        }
      }
    }
    if (!ended.ok()) {
      Fail(ended);
      return;
    }
    for (SliceSender* sender : closes) sender->Close();
    {
      MutexLock lock(&mu_);
      ended_ = true;
    }
    MaybeComplete();
  }

  // Bytes the streamed learners have not taken yet.
  size_t StreamedQueued() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t queued = 0;
    for (const auto& sender : senders_) {
      if (sender->streamed()) queued += sender->queued_bytes();
    }
    return queued;
  }

  // Tells the service how much this stream holds now.
  void ReportBuffered() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t held = 0;
    for (const auto& sender : senders_) {
      held += static_cast<int64_t>(sender->queued_bytes());
    }
    service_->AddBuffered(held - reported_);
    reported_ = held;
  }

  // Reads the next message, unless the streamed learners hold too much: then
  // the sender that takes enough resumes (OnSent). From a reaction only.
  void ReadNext() {
    {
      MutexLock lock(&mu_);
      ReportBuffered();
      if (finish_decided_) return;
      if (StreamedQueued() > service_->stream_window_bytes_) {
        paused_ = true;
        return;
      }
    }
    StartRead(&incoming_);
  }

  // A streamed learner took a piece. Not a reaction of this call: a read
  // started here must not race the call's end, so the end waits for it.
  void OnSent() {
    {
      MutexLock lock(&mu_);
      ReportBuffered();
      if (!paused_ || finish_decided_ ||
          StreamedQueued() > service_->stream_window_bytes_) {
        return;
      }
      paused_ = false;
      ++reads_starting_;
    }
    StartRead(&incoming_);
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(&mu_);
      if (--reads_starting_ == 0) finish.swap(deferred_finish_);
    }
    if (finish.has_value()) Finish(*finish);
  }

  void LearnerDone(size_t i) {
    grpc::Status failure;
    {
      MutexLock lock(&mu_);
      done_[i] = true;
      const Calls::value_type& call = calls_[i];
      if (!call.status.ok() && !failure_.has_value() && !ended_ &&
          call.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        // The learner calls share the stream's deadline: while the caller is
        // still sending, the caller is late, not the learner.
        failure = TimedOut();
      } else if (!call.status.ok() && !failure_.has_value()) {
        failure = grpc::Status(
            call.status.error_code(),
            absl::StrCat("LearnStream failed on ", call.learner.Name(), ": ",
                         CodeName(call.status.error_code()), ": ",
                         call.status.error_message()));
      }
    }
    if (!failure.ok()) Fail(failure);
    MaybeComplete();
  }

  // Fails the call (the first failure wins) and cancels the learner calls at
  // once; the caller hears back when they are over (Complete), so the plan
  // and the budget are settled by the time it can call again.
  void Fail(const grpc::Status& status) {
    {
      MutexLock lock(&mu_);
      if (failure_.has_value() || completing_) return;
      failure_ = status;
    }
    // A cancelled call may end at once, and with it the whole call: this one
    // holds on until it is done here.
    refs_.fetch_add(1);
    for (const auto& sender : senders_) sender->Cancel();
    MaybeComplete();
    Unref();
  }

  // The reply to the caller, once; deferred while OnSent starts a read.
  void FinishCall(const grpc::Status& status) {
    {
      MutexLock lock(&mu_);
      if (std::exchange(finish_decided_, true)) return;
      if (reads_starting_ > 0) {
        deferred_finish_ = status;
        return;
      }
    }
    Finish(status);
  }

  void MaybeComplete() {
    {
      MutexLock lock(&mu_);
      if (completing_ || (!failure_.has_value() && !ended_)) return;
      for (size_t i = 0; i < senders_.size(); ++i) {
        if (!done_[i] && senders_[i]->started()) return;
      }
      completing_ = true;
    }
    Complete();
  }

  // Every learner call is over: merge (or record the failure), give back
  // the plan and the budget, reply.
  void Complete() {
    alarm_.Cancel();
    grpc::Status status;
    if (failure_.has_value()) {
      Calls started;
      std::vector<std::string> sent;
      for (size_t i = 0; i < senders_.size(); ++i) {
        // Those done are those started: every started one is done by now.
        if (!senders_[i]->started()) continue;
        sent.push_back(calls_[i].learner.Name());
        started.push_back(std::move(calls_[i]));
      }
      (void)service_->Summarize(kMethod, started);
      status = *failure_;
      // A learner that was sent samples may have trained on them: a retry
      // of the plan would train it twice, so the plan is used.
      if (!sent.empty() && claim_.has_value()) {
        claim_->Consume();
        status = grpc::Status(
            status.error_code(),
            absl::StrCat(status.error_message(), "; plan '", claim_->plan().id,
                         "' is used (", absl::StrJoin(sent, ", "),
                         " had samples): GetData for the next"));
      }
    } else {
      service_->WatchStragglers(calls_, *settings_);
      // Every learner trained: the plan is used, whatever became of the
      // answers (as for Learn).
      const bool trained =
          std::all_of(calls_.begin(), calls_.end(),
                      [](const auto& call) { return call.status.ok(); });
      status =
          service_->MergeLearn(kMethod, calls_, counts_, *settings_, reply_);
      if (trained) claim_->Consume();
    }
    {
      MutexLock lock(&mu_);
      service_->AddBuffered(-reported_);
      reported_ = 0;
    }
    // Free before the caller hears back, as for Learn.
    leases_.clear();
    claim_.reset();
    if (timed_ && !failure_.has_value()) {
      AddTiming(context_, arrived_, calls_, std::chrono::steady_clock::now());
    }
    service_->Served(kMethod, started_, status);
    FinishCall(status);
    service_->Leave();
    Unref();
  }

  LearnerService* const service_;
  grpc::CallbackServerContext* const context_;  // gRPC's, until OnDone
  grpc::ByteBuffer* const reply_;               // the same
  const std::chrono::steady_clock::time_point started_;
  const std::shared_ptr<const Settings> settings_;
  // The whole stream, and every learner call, ends by then.
  const std::chrono::system_clock::time_point deadline_;
  const bool timed_;
  std::string call_path_;
  std::atomic<int> refs_{3};
  grpc::Alarm alarm_;
  grpc::ByteBuffer incoming_;  // the read in progress; one at a time

  Mutex mu_;
  int64_t messages_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point arrived_;  // the first message
  std::optional<PlanClaim> claim_;
  std::vector<size_t> counts_;
  std::optional<StreamSplitter> splitter_ ABSL_GUARDED_BY(mu_);
  // Set up by the first message, then only the senders change them (each
  // its own Call) until Complete, which runs once they are all done.
  Calls calls_;
  std::vector<std::unique_ptr<SliceSender>> senders_;
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  size_t closed_ ABSL_GUARDED_BY(mu_) = 0;  // senders closed, in order
  size_t last_share_ = 0;  // the last learner with samples; set by Begin
  std::vector<std::unique_ptr<InflightBudget::Lease>> leases_;
  int64_t reported_ ABSL_GUARDED_BY(mu_) = 0;  // ReportBuffered
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  int reads_starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool finish_decided_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> failure_;  // set once, under mu_
  bool completing_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerReadReactor<grpc::ByteBuffer>* LearnerService::LearnStream(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* reply) {
  return LearnStreamCall::Start(this, context, reply);
}

LearnerService::Buffered LearnerService::StreamBuffered() const {
  return Buffered{buffered_.load(), buffered_peak_.load()};
}

void LearnerService::AddBuffered(int64_t delta) {
  const int64_t now = buffered_ += delta;
  int64_t peak = buffered_peak_.load();
  while (now > peak && !buffered_peak_.compare_exchange_weak(peak, now)) {
  }
}

absl::StatusOr<std::vector<LearnerHandle>> LearnerService::PlanLearners(
    const char* method, const Plan& plan) const {
  std::vector<LearnerHandle> learners;
  std::vector<std::string> gone;
  for (const PlanSlice& slice : plan.slices) {
    auto learner = pool_->Current(slice.learner_id, slice.epoch);
    if (learner.ok()) {
      learners.push_back(std::move(*learner));
    } else {
      gone.emplace_back(learner.status().message());
    }
  }
  if (!gone.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, ": the learners of plan '", plan.id,
                     "' changed since GetData: ", absl::StrJoin(gone, "; "),
                     "; call GetData again"));
  }
  return learners;
}

grpc::Status LearnerService::MergeLearn(
    const char* method, LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>& calls,
    const std::vector<size_t>& counts, const Settings& settings,
    grpc::ByteBuffer* reply) {
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
  if (auto merged = settings.raw_merger.Merge(bytes, counts);
      merged.has_value()) {
    for (size_t i = 1; i < calls.size(); ++i) {
      WarnIfDifferent(method, "task_id", calls[0].learner, merged->task_ids[0],
                      calls[i].learner, merged->task_ids[i]);
      WarnIfDifferent(method, "buffer_id", calls[0].learner,
                      merged->buffer_ids[0], calls[i].learner,
                      merged->buffer_ids[i]);
    }
    if (too_large(merged->reply.size())) return status;
    grpc::Slice slice(merged->reply.data(), merged->reply.size());
    *reply = grpc::ByteBuffer(&slice, 1);
    return grpc::Status::OK;
  }

  std::vector<pb::LearnReply> replies(calls.size());
  std::vector<google::protobuf::Struct*> infos;
  std::vector<std::string> ids;
  for (size_t i = 0; i < calls.size(); ++i) {
    const LearnerHandle& learner = calls[i].learner;
    // Parsing releases the received bytes: one copy at a time.
    if (grpc::Status parsed = ParseLearnReply(&calls[i].reply, &replies[i]);
        !parsed.ok()) {
      return grpc::Status(parsed.error_code(),
                          absl::StrCat(method, ": ", learner.Name(), " sent ",
                                       parsed.error_message()));
    }
    infos.push_back(replies[i].mutable_info());
    ids.push_back(learner.id);
    WarnIfDifferent(method, "task_id", calls[0].learner, replies[0].task_id(),
                    learner, replies[i].task_id());
    WarnIfDifferent(method, "buffer_id", calls[0].learner,
                    replies[0].buffer_id(), learner, replies[i].buffer_id());
  }
  auto merged = settings.merger.Merge(infos, ids, counts);
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
