// LearnerService::Learn: the batch checked against its plan, cut into the
// learners' slices and sent; their answers merged into one LearnReply.
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/strip.h"
#include "lib/aggregation/raw_batch.h"
#include "lib/service/learner_service_impl.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

// `bytes` in one string, released as they are copied.
std::string Flatten(grpc::ByteBuffer* bytes) {
  std::string flat;
  std::vector<grpc::Slice> slices;
  if (bytes->Valid()) (void)bytes->Dump(&slices);
  bytes->Clear();
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return flat;
}

// `bytes` as a ByteBuffer that owns them: no copy.
grpc::ByteBuffer ToByteBuffer(std::string bytes) {
  auto* owned = new std::string(std::move(bytes));
  grpc::Slice slice(
      owned->data(), owned->size(),
      [](void* p) { delete static_cast<std::string*>(p); }, owned);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

grpc::ServerUnaryReactor* LearnerService::Learn(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* reply) {
  Call call = Admit("Learn", context);
  if (call.lease == nullptr) return call.reactor;
  auto fail = [&](const grpc::Status& status) {
    call.lease->Finish(call.reactor, status);
    return call.reactor;
  };
  const Settings& settings = *call.settings;
  // The batch is held until the learners have answered: it counts against
  // max_inflight_bytes until then.
  if (absl::Status reserved = call.lease->Reserve(
          static_cast<int64_t>(request->Length()), settings.max_inflight_bytes);
      !reserved.ok()) {
    return fail(ToGrpc(reserved));
  }
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
      "Learn", context, settings, call.lease->call_path(), *std::move(learners),
      std::move(requests),
      [](const LearnerHandle& l, grpc::ClientContext* c,
         const grpc::ByteBuffer* r, grpc::ByteBuffer* p,
         std::function<void(grpc::Status)> f) {
        l.generic->UnaryCall(c, kLearnMethod, grpc::StubOptions(), r, p,
                             std::move(f));
      },
      /*over_others=*/false,
      [this, call, reply, held, counts = std::move(counts),
       stands_for = std::move(stands_for)](auto& calls) mutable {
        WatchStragglers(calls, *call.settings);
        // Once every learner has trained, a retry of the plan would train them
        // twice, whatever became of their answers: the plan is used.
        const bool trained =
            std::all_of(calls.begin(), calls.end(),
                        [](const auto& call) { return call.status.ok(); });
        const grpc::Status status = MergeLearn(
            "Learn", calls, counts, stands_for, *call.settings, reply);
        if (trained) held->Consume();
        // The batch's bytes are counted free before the caller hears back: a
        // caller that sends its next batch at once must find the budget.
        call.lease->FreeBytes();
        if (call.timed) {
          AddTiming(call.context, call.lease->started(), calls, clock_.Now(),
                    clock_);
        }
        call.lease->Finish(call.reactor, status);
      });
  return call.reactor;
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
  std::vector<std::string> replies;
  std::vector<std::string> ids;
  for (auto& call : calls) {
    shares.push_back(
        absl::StrCat(call.learner.Name(), " ", call.reply.Length(), " bytes"));
    ids.push_back(call.learner.id);
    // The received bytes go as they are copied: one copy at a time.
    replies.push_back(Flatten(&call.reply));
  }
  // On the replies' bytes when the merge is clean, else parsed
  // (lib/aggregation/learn_reply_merger.h). Checked against max_message_bytes
  // before it is sent: gRPC would fail it only after, with a message naming
  // nobody, once the learners have trained.
  LearnReplyMerger::Result merged =
      settings.merger.Merge(std::move(replies), ids, counts, stands_for,
                            static_cast<size_t>(max_reply_bytes_));
  for (const std::string& warning : merged.warnings) {
    spdlog::warn("{}: {}", method, warning);
  }
  if (merged.unreadable.has_value()) {
    const LearnerHandle& learner = calls[*merged.unreadable].learner;
    const auto code = static_cast<grpc::StatusCode>(merged.status.code());
    const std::string why(merged.status.message());
    pb::FailedLearners failed;
    AddFailedLearner(learner.id, learner.address.ToString(), code,
                     absl::StrCat("sent ", why), &failed);
    return WithFailedLearners(
        grpc::Status(code,
                     absl::StrCat(method, ": ", learner.Name(), " sent ", why)),
        failed);
  }
  if (!merged.status.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat(method, ": ", merged.status.message()));
  }
  if (merged.size > static_cast<size_t>(max_reply_bytes_)) {
    const std::string message = absl::StrCat(
        method, ": the merged reply is ", merged.size,
        " bytes, over max_message_bytes (", max_reply_bytes_,
        "); the learners trained, but their infos (",
        absl::StrJoin(shares, ", "),
        ") are too large together: raise max_message_bytes or send less info");
    spdlog::error("{}", message);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message);
  }
  *reply = ToByteBuffer(std::move(merged.reply));
  return grpc::Status::OK;
}

}  // namespace aggregator
