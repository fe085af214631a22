// What the files of LearnerService share (learner_service.cc,
// get_data_call.cc, learn_call.cc, learn_stream_call.cc): the templates that
// relay a call to the learners and summarize their answers, and the json log's
// fields of a learner. Private to the service's library.
#ifndef LIB_SERVICE_LEARNER_SERVICE_IMPL_H_
#define LIB_SERVICE_LEARNER_SERVICE_IMPL_H_

#include <spdlog/spdlog.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/grpc_status.h"
#include "lib/learners/failed_learners.h"
#include "lib/ops/logging.h"
#include "lib/service/call_timing.h"
#include "lib/service/learner_service.h"

namespace aggregator {

// The json log's fields of a line about one learner (lib/ops/logging.h).
inline ScopedLogFields LearnerFields(const LearnerHandle& learner) {
  return ScopedLogFields(
      {{"learner", learner.id}, {"address", learner.address.ToString()}});
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

template <typename Request, typename Reply>
grpc::Status LearnerService::Summarize(
    const char* method, const LearnerCalls<Request, Reply>& calls) {
  std::vector<std::string> failures;
  aggregator::v1::FailedLearners failed;
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
    const aggregator::v1::FailedLearner& learner = failed.learners(0);
    fields.emplace(std::initializer_list<std::pair<const char*, std::string>>{
        {"learner", learner.id()},
        {"address", learner.address()},
        {"code", CodeName(static_cast<grpc::StatusCode>(learner.code()))}});
  }
  spdlog::warn("{}", message);
  return WithFailedLearners(grpc::Status(code, message), failed);
}

template <typename Request, typename Reply>
grpc::ServerUnaryReactor* LearnerService::Relay(
    const char* method, grpc::CallbackServerContext* context,
    const Request& request, StartCall<Request, Reply> start,
    std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge) {
  Call call = Admit(method, context);
  if (call.lease == nullptr) return call.reactor;
  auto learners = ReadyLearners(method, *call.settings);
  if (!learners.ok()) {
    call.lease->Finish(call.reactor,
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
      std::move(hook), &clock_);
}

template <typename Request, typename Reply>
void LearnerService::RelayTo(
    const Call& call, std::vector<LearnerHandle> learners,
    const Request& request, StartCall<Request, Reply> start,
    std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge) {
  WatchedFanOut<Request, Reply>(
      call.method, call.context, *call.settings, call.lease->call_path(),
      std::move(learners), {request}, start, /*over_others=*/true,
      [this, call, merge = std::move(merge)](auto& calls) {
        grpc::Status status = this->Summarize(call.method, calls);
        if (status.ok()) status = merge(calls);
        if (call.timed) {
          AddTiming(call.context, call.lease->started(), calls, clock_.Now(),
                    clock_);
        }
        call.lease->Finish(call.reactor, status);
      });
}

}  // namespace aggregator

#endif  // LIB_SERVICE_LEARNER_SERVICE_IMPL_H_
