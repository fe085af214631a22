// LearnerService: the aggregator's side of the Learner API. Each call fans out
// (lib/learners/fan_out.h) to the ready learners of its roster
// (lib/learners/learner_roster.h: the daemon's pool, or a test's in-process
// fakes) and merges their answers:
// - GetResource sums the ready learners' own resources (asked as they
//   connected);
// - StartTask and CloseTask go to every ready learner; any failure fails the
// call,
//   naming every learner that failed and why;
// - GetData sums the demands, takes the other fields from the first learner,
// and
//   records the split as a plan (lib/aggregation/split_planner.h) whose id it
//   returns;
// - Learn checks the plan (latest, same learners, same sample count), sends
// slice i to
//   learner i and merges the infos (lib/aggregation/learn_reply_merger.h);
// - LearnStream does what Learn does for a batch that arrives as a stream,
//   sending each learner its slice as soon as the slice has arrived
//   (lib/aggregation/stream_splitter.h, lib/learners/slice_sender.h).
// Every failure is a prompt gRPC error naming the learner(s) and the cause.
// Learners that come back while a task is open have it replayed by a step of
// their own (lib/service/rejoin_step.h), never inside a call, and join the
// next plan once it succeeded.
// Calls that loop back through this aggregator, or pass through too many, are
// refused before anything is sent (lib/learners/call_path.h).
//
// Thread-safety: all RPCs may run concurrently; the configuration can be
// replaced at any time (calls in flight keep the one they started with).
#ifndef LIB_SERVICE_LEARNER_SERVICE_H_
#define LIB_SERVICE_LEARNER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/aggregation/learn_reply_merger.h"
#include "lib/aggregation/split_planner.h"
#include "lib/base/clock.h"
#include "lib/base/memory_limit.h"
#include "lib/base/mutex.h"
#include "lib/config/config.h"
#include "lib/learners/fan_out.h"
#include "lib/learners/learner_roster.h"
#include "lib/ops/aggregator_metrics.h"
#include "lib/service/admission_lease.h"
#include "lib/service/late_answers.h"
#include "lib/service/membership.h"
#include "lib/service/rejoin_step.h"
#include "lib/service/straggler_watch.h"
#include "proto/learner.grpc.pb.h"

namespace aggregator {

// What LearnerService takes besides the pool and the configuration.
struct LearnerServiceOptions {
  AggregatorMetrics* metrics = nullptr;  // optional; must outlive the service
  // Names this aggregator on the calls it relays (and its replies); empty: no
  // loop protection.
  std::string aggregator_id;
  // The largest reply gRPC will send (max_message_bytes): a merged Learn
  // reply over it fails with RESOURCE_EXHAUSTED naming each learner's share.
  int64_t max_reply_bytes = std::numeric_limits<int32_t>::max();
  // A LearnStream stops reading its caller while the learners it streams to
  // have more than this queued, so a slow one holds the caller back instead
  // of filling the aggregator's memory.
  size_t stream_window_bytes = 8 << 20;
  // What the service's time is read from: late answers (straggler.late_after),
  // the retries of learners out under shrink, each learner call's time (the
  // straggler watch, metrics, the timing header). null: the steady clock.
  // Must outlive the service.
  Clock* clock = nullptr;
};

// Learn and LearnStream are relayed as raw bytes (lib/aggregation/raw_batch.h):
// the batch is never parsed.
class LearnerService final
    : public aggregator::v1::Learner::WithRawCallbackMethod_LearnStream<
          aggregator::v1::Learner::WithRawCallbackMethod_Learn<
              aggregator::v1::Learner::CallbackService>> {
 public:
  // `learners` (the daemon's LearnerPool) must outlive the service. A call
  // proceeds with min_learners ready learners (at least one is always needed).
  LearnerService(LearnerRoster* learners, const ServiceConfig& config,
                 LearnerServiceOptions options = {});

  void SetConfig(const ServiceConfig& config);

  // The max_inflight_bytes in force (a figure for "auto" too), and why.
  int64_t max_inflight_bytes() const;
  std::string DescribeInflightLimit() const;
  // Bytes of the Learn batches in flight now.
  int64_t inflight_bytes() const { return admission_.inflight_bytes(); }

  // Learners not simply in the plans, and why (lib/service/membership.h).
  std::map<std::string, LearnerStanding> Standings() const {
    return membership_.Standings();
  }
  // Each learner's Learn time and straggler flag.
  std::map<std::string, StragglerWatch::Learner> LearnTimes() const {
    return stragglers_.Learners();
  }
  uint64_t membership_generation() const { return membership_.generation(); }
  // The learners late now (straggler.late_after), and for how long (ms).
  std::map<std::string, int64_t> LateMs() const { return late_.LateMs(); }
  // Sets the late metrics of `learners` (0 unless late), before a scrape.
  void CollectLate(const std::vector<std::string>& learners) const {
    late_.Collect(learners);
  }

  // Bytes of LearnStream batches received and not yet passed to a learner's
  // connection, now and at most since the start.
  struct Buffered {
    int64_t now = 0;
    int64_t peak = 0;
  };
  Buffered StreamBuffered() const;

  // From now on new calls fail with UNAVAILABLE; calls in flight go on.
  void StartDraining();
  // Waits until no call is in flight or the deadline passes; true when none is.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // At shutdown, before the pool stops: no more task replays, those in
  // flight cancelled and ended (a call left on a learner's channel holds up
  // the pool's Stop).
  void StopReplays() { rejoin_->Stop(); }

  grpc::ServerUnaryReactor* GetResource(
      grpc::CallbackServerContext* context,
      const aggregator::v1::GetResourceRequest* request,
      aggregator::v1::Resource* reply) override;
  grpc::ServerUnaryReactor* StartTask(
      grpc::CallbackServerContext* context,
      const aggregator::v1::StartTaskRequest* request,
      aggregator::v1::StartTaskReply* reply) override;
  grpc::ServerUnaryReactor* GetData(
      grpc::CallbackServerContext* context,
      const aggregator::v1::GetDataRequest* request,
      aggregator::v1::DataDemand* reply) override;
  grpc::ServerUnaryReactor* Learn(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* reply) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* LearnStream(
      grpc::CallbackServerContext* context, grpc::ByteBuffer* reply) override;
  grpc::ServerUnaryReactor* CloseTask(
      grpc::CallbackServerContext* context,
      const aggregator::v1::CloseTaskRequest* request,
      aggregator::v1::CloseTaskReply* reply) override;

 private:
  struct Settings {
    ServiceConfig config;
    LearnReplyMerger merger;
    int64_t max_inflight_bytes;  // "auto" resolved
  };
  std::shared_ptr<const Settings> settings() const;
  // An incoming unary call being relayed; its copies share its admission.
  struct Call {
    const char* method;
    grpc::CallbackServerContext* context;
    grpc::ServerUnaryReactor* reactor;
    // Held while the call is in; null when it was refused (and answered).
    // Its start time and call path are the call's; Finish ends the call.
    std::shared_ptr<AdmissionLease> lease;
    std::shared_ptr<const Settings> settings;
    bool timed;  // the caller asked for the timing (call_timing.h)
  };
  // A LearnStream being relayed (defined in learn_stream_call.cc).
  class LearnStreamCall;
  // The learners a call goes to (members, and those the task will be
  // replayed to), or UNAVAILABLE when fewer than min_learners (and at least
  // one) are.
  absl::StatusOr<std::vector<LearnerHandle>> ReadyLearners(
      const char* method, const Settings& settings);
  // UNAVAILABLE, saying who is missing and why, when `count` learners are
  // fewer than the call needs.
  absl::Status CheckEnough(const char* method, const Settings& settings,
                           size_t count) const;
  // The learners that make CheckEnough fail, as its error details say: each
  // learner not ready or not in the plans, UNAVAILABLE, with why.
  aggregator::v1::FailedLearners Missing() const;
  // A configured learner's address ("" when it no longer is).
  std::string AddressOf(const std::string& id) const;
  // Feeds a Learn's per-learner times to the straggler watch, logging (and
  // under straggler.action: shrink acting on) what it flags.
  void WatchStragglers(
      const LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>& calls,
      const Settings& settings);
  // on_learner_failure: shrink: `learner` leaves the plans, logged.
  void MarkFailed(const LearnerHandle& learner, const std::string& why);
  static void StartTaskCall(const LearnerHandle& learner,
                            grpc::ClientContext* context,
                            const aggregator::v1::StartTaskRequest* request,
                            aggregator::v1::StartTaskReply* reply,
                            std::function<void(grpc::Status)> done);
  // GetData over the view's members; records the plan.
  void PlanGetData(const Call& call, Membership::View view,
                   const aggregator::v1::GetDataRequest& request,
                   aggregator::v1::DataDemand* reply);

  // FanOut watched for a late learner (lib/service/late_answers.h): the
  // late learner's call ends with DEADLINE_EXCEEDED naming it late. With
  // `over_others` under on_learner_failure: shrink, it leaves the plans and
  // `done` gets only the others' calls (while they are min_learners).
  template <typename Request, typename Reply>
  void WatchedFanOut(const char* method, grpc::CallbackServerContext* context,
                     const Settings& settings, const std::string& call_path,
                     std::vector<LearnerHandle> learners,
                     std::vector<Request> requests,
                     StartCall<Request, Reply> start, bool over_others,
                     std::function<void(LearnerCalls<Request, Reply>&)> done);

  // Fans `request` out to the ready learners; when all succeeded, `merge` fills
  // the reply and its status finishes the call.
  template <typename Request, typename Reply>
  grpc::ServerUnaryReactor* Relay(
      const char* method, grpc::CallbackServerContext* context,
      const Request& request, StartCall<Request, Reply> start,
      std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge);
  // The same to `learners`, for a call already entered.
  template <typename Request, typename Reply>
  void RelayTo(
      const Call& call, std::vector<LearnerHandle> learners,
      const Request& request, StartCall<Request, Reply> start,
      std::function<grpc::Status(LearnerCalls<Request, Reply>&)> merge);

  // A unary call as it arrives, let in (admission_lease.h) or refused with
  // its reactor finished; the settings it runs with.
  Call Admit(const char* method, grpc::CallbackServerContext* context);
  // Records one learner call: the pool's counters and the metrics.
  template <typename Request, typename Reply>
  void Record(const char* method, const LearnerCall<Request, Reply>& call);
  // Records each learner call; then OK when all succeeded, else the first
  // failure's code and every failing learner named.
  template <typename Request, typename Reply>
  grpc::Status Summarize(const char* method,
                         const LearnerCalls<Request, Reply>& calls);
  // Merges the learners' serialized Learn replies into `reply` (for
  // `method`: Learn or LearnStream). `counts[i]`: the samples learner i was
  // sent; `stands_for[i]`: the learners it stands for (PlanSlice::learners).
  grpc::Status MergeLearn(
      const char* method,
      LearnerCalls<grpc::ByteBuffer, grpc::ByteBuffer>& calls,
      const std::vector<size_t>& counts, const std::vector<size_t>& stands_for,
      const Settings& settings, grpc::ByteBuffer* reply);
  // What every slice of `plan` carries besides its samples and plan_id: the
  // learners that train this step (LearnRequest.membership).
  static aggregator::v1::LearnRequest MembershipStamp(const Plan& plan);
  // The plan's learners, if each is still ready at the plan's epoch.
  absl::StatusOr<std::vector<LearnerHandle>> PlanLearners(
      const char* method, const Plan& plan) const;
  // Moves the LearnStream bytes buffered by `delta`.
  void AddBuffered(int64_t delta);
  // What the rejoin step needs of the service: the ready learners, the
  // in-flight count, call_timeout, the records and MarkFailed.
  RejoinStep::Hooks RejoinHooks();

  // The learners (the daemon's LearnerPool; named for it).
  LearnerRoster* const pool_;
  AggregatorMetrics* const metrics_;
  const int64_t max_reply_bytes_;
  const size_t stream_window_bytes_;
  SplitPlanner planner_;
  Clock& clock_;
  Membership membership_;
  StragglerWatch stragglers_;
  const MemoryLimit memory_;  // what "auto" is a quarter of
  LateAnswers late_;          // straggler.late_after
  // The calls in flight, their batches' bytes, draining.
  Admission admission_;
  std::atomic<int64_t> buffered_{0};  // StreamBuffered()
  std::atomic<int64_t> buffered_peak_{0};
  mutable Mutex mu_;
  std::shared_ptr<const Settings> settings_ ABSL_GUARDED_BY(mu_);
  // Replays the task to learners that are back (issue 28). Last: gone
  // first, its replays cancelled and ended while the rest is still here.
  std::unique_ptr<RejoinStep> rejoin_;
};

}  // namespace aggregator

#endif  // LIB_SERVICE_LEARNER_SERVICE_H_
