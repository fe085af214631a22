// LearnerService::GetData: the demands of the learners in the plans summed
// into a plan (lib/aggregation/split_planner.h). Learners that joined get the
// task replayed by the rejoin step (lib/service/rejoin_step.h), not here.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/service/learner_service_impl.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

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

}  // namespace

grpc::ServerUnaryReactor* LearnerService::GetData(
    grpc::CallbackServerContext* context, const pb::GetDataRequest* request,
    pb::DataDemand* reply) {
  Call call = Admit("GetData", context);
  if (call.lease == nullptr) return call.reactor;
  // Learners that join while a task is open are in no plan until the rejoin
  // step has replayed the task to them: this call does not wait for that
  // (issue 28), it only asks for the step now.
  Membership::View view = membership_.Select(pool_->Ready());
  if (!view.to_replay.empty()) rejoin_->Kick();
  PlanGetData(call, std::move(view), *request, reply);
  return call.reactor;
}

void LearnerService::PlanGetData(const Call& call, Membership::View view,
                                 const pb::GetDataRequest& request,
                                 pb::DataDemand* reply) {
  if (absl::Status enough =
          CheckEnough(call.method, *call.settings, view.members.size());
      !enough.ok()) {
    call.lease->Finish(call.reactor, ToGrpcWithFailedLearners(enough));
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

}  // namespace aggregator
