// LearnerService::LearnStream: the streamed Learn, in its own file (its call
// is a state machine of its own); the rest of the service is in
// learner_service.cc.
#include <grpcpp/alarm.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/aggregation/raw_batch.h"
#include "lib/aggregation/stream_splitter.h"
#include "lib/base/grpc_status.h"
#include "lib/learners/failed_learners.h"
#include "lib/learners/slice_sender.h"
#include "lib/service/call_timing.h"
#include "lib/service/learner_service.h"
#include "lib/service/learner_service_impl.h"

namespace aggregator {

namespace pb = aggregator::v1;

namespace {
// What a LearnStream message is charged against max_inflight_bytes beyond
// its bytes: 1.86 M empty messages added 45 MB uncounted (about 24 bytes
// each, with a lease per message then).
constexpr int64_t kMessageBookkeepingBytes = 64;
}  // namespace

// One LearnStream. Reads the caller's messages one at a time, cuts each into
// the learners' pieces (StreamSplitter) and gives them to one SliceSender per
// learner, which sends the learner its slice as soon as it is complete, or
// streams it on as it comes. The caller is read no faster than the streamed
// learners take their pieces (LearnerServiceOptions::stream_window_bytes). The
// call ends when every learner has answered and the answers are merged, or on
// the first failure, which cancels the learner calls still running at once;
// the caller hears back when they are over, with the plan (used if any
// learner had samples), the budget and the records settled. Once the stream
// has ended and every learner but one has answered, that one is watched for
// being late (straggler.late_after, lib/service/late_answers.h): late, its
// call is cancelled and the call fails at once naming it (under shrink it
// leaves the plans, as any learner that fails a Learn).
//
// Lifetime: three references, each dropped once: gRPC's (OnDone), the
// bookkeeping's (Complete, which waits for every started learner call) and
// the deadline alarm's (its callback runs once, fired or cancelled); and one
// more while a late timer is armed (dropped with the timer's callback). gRPC
// operations (StartRead, Finish, the senders') are never started under mu_:
// gRPC may run a reaction within them.
class LearnerService::LearnStreamCall final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  static LearnStreamCall* Start(LearnerService* service,
                                grpc::CallbackServerContext* context,
                                grpc::ByteBuffer* reply) {
    auto* call = new LearnStreamCall(service, context, reply);
    grpc::Status admitted;
    call->lease_ = service->admission_.Admit(context, kMethod, &admitted);
    if (call->lease_ == nullptr) {
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
    // A message costs its bytes and what the call keeps for it (its slices
    // until sent, the reads): charged as kMessageBookkeepingBytes, so a
    // stream of empty messages is bounded by the budget too.
    const int64_t charged =
        static_cast<int64_t>(message.Length()) + kMessageBookkeepingBytes;
    if (absl::Status reserved =
            lease_->Reserve(charged, settings_->max_inflight_bytes);
        !reserved.ok()) {
      return ToGrpc(reserved);
    }
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
      arrived_ = service_->clock_.Now();
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
    if (!learners.ok()) return ToGrpcWithFailedLearners(learners.status());
    const pb::LearnRequest stamp = MembershipStamp(plan);
    calls_.resize(learners->size());
    done_.assign(learners->size(), false);
    for (size_t i = 0; i < learners->size(); ++i) {
      counts_.push_back(static_cast<size_t>(plan.slices[i].batch_size));
      stands_for_.push_back(plan.slices[i].learners);
      Calls::value_type& call = calls_[i];
      call.learner = std::move((*learners)[i]);
      call.context =
          NewLearnerContext(context_, deadline_, lease_->call_path());
      pb::LearnRequest head = stamp;
      head.set_plan_id(plan.slices[i].learner_plan_id);
      senders_.push_back(std::make_unique<SliceSender>(
          &call, head.SerializeAsString(),
          SliceSender::Hooks{[this] { OnSent(); },
                             [this, i] { LearnerDone(i); },
                             &service_->clock_}));
    }
    std::vector<LearnerHandle> watched;
    for (const Calls::value_type& call : calls_)
      watched.push_back(call.learner);
    watch_ = service_->late_.Begin(
        kMethod, settings_->config.straggler.late_after,
        service_->membership_.policy(), std::move(watched));
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
    std::optional<size_t> silent;
    {
      MutexLock lock(&mu_);
      ended_ = true;
      silent = OneLeft();
    }
    if (silent) WatchLate(*silent);
    MaybeComplete();
  }

  // The one learner still silent once the stream has ended and every other
  // learner has answered, and only the first time there is one: its late
  // timer is armed once.
  std::optional<size_t> OneLeft() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ended_ || failure_.has_value() || late_armed_ || watch_ == nullptr) {
      return std::nullopt;
    }
    std::optional<size_t> silent;
    for (size_t i = 0; i < done_.size(); ++i) {
      if (done_[i]) continue;
      if (silent) return std::nullopt;  // two or more still out
      silent = i;
    }
    if (silent) late_armed_ = true;
    return silent;
  }

  // Arms the late timer of learner `silent` (LateAnswers::Hook). Its cancel
  // holds a reference to this call until the timer has run or is cancelled.
  void WatchLate(size_t silent) {
    refs_.fetch_add(1);
    std::shared_ptr<LearnStreamCall> held(
        this, [](LearnStreamCall* call) { call->Unref(); });
    service_->late_.Hook(watch_)(silent,
                                 [held, silent] { held->OnLate(silent); });
  }

  // Learner `silent` is late: its call is cancelled, and its end fails the
  // call naming it (LearnerDone).
  void OnLate(size_t silent) {
    {
      MutexLock lock(&mu_);
      if (failure_.has_value() || completing_ || done_[silent]) return;
      late_index_ = silent;
      ++cancelling_;  // Complete waits: it moves the call Cancel uses
    }
    senders_[silent]->Cancel();
    {
      MutexLock lock(&mu_);
      --cancelling_;
    }
    MaybeComplete();
  }

  // Ends the late watch, once: its timer will not fire, and the times of the
  // learners that answered are learned. The learner found late, if one was.
  std::optional<LateAnswers::Late> EndWatch()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (watch_ == nullptr || std::exchange(watch_ended_, true)) {
      return std::nullopt;
    }
    std::vector<LateAnswers::Answer> answers;
    for (size_t i = 0; i < calls_.size(); ++i) {
      answers.push_back({done_[i] && calls_[i].status.ok(),
                         calls_[i].finished - calls_[i].started});
    }
    return service_->late_.End(*watch_, answers);
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
    // Once done_[i] is set another thread may complete the call and drop the
    // other references: this one holds on until it is done here (as Fail).
    refs_.fetch_add(1);
    grpc::Status failure;
    std::optional<size_t> silent;
    {
      MutexLock lock(&mu_);
      done_[i] = true;
      Calls::value_type& call = calls_[i];
      if (late_index_ == std::optional<size_t>(i) && !failure_.has_value()) {
        // Cancelled for being late: the call fails naming it so.
        if (std::optional<LateAnswers::Late> late = EndWatch()) {
          call.status =
              grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, late->why);
        }
      }
      if (!call.status.ok() && !failure_.has_value() && !ended_ &&
          call.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        // The learner calls share the stream's deadline: while the caller is
        // still sending, the caller is late, not the learner.
        failure = TimedOut();
      } else if (!call.status.ok() && !failure_.has_value()) {
        pb::FailedLearners failed;
        AddFailedLearner(call.learner.id, call.learner.address.ToString(),
                         call.status.error_code(), call.status.error_message(),
                         &failed);
        failure = WithFailedLearners(
            grpc::Status(
                call.status.error_code(),
                absl::StrCat("LearnStream failed on ", call.learner.Name(),
                             ": ", CodeName(call.status.error_code()), ": ",
                             call.status.error_message())),
            failed);
      }
      silent = OneLeft();
    }
    if (!failure.ok()) Fail(failure);
    if (silent) WatchLate(*silent);
    MaybeComplete();
    Unref();
  }

  // Fails the call (the first failure wins) and cancels the learner calls at
  // once; the caller hears back when they are over (Complete), so the plan
  // and the budget are settled by the time it can call again.
  void Fail(const grpc::Status& status) {
    {
      MutexLock lock(&mu_);
      if (failure_.has_value() || completing_) return;
      failure_ = status;
      // Complete moves the learner calls (and their contexts, which Cancel
      // uses) out: it waits until the senders are cancelled.
      ++cancelling_;
    }
    // A cancelled call may end at once, and with it the whole call: this one
    // holds on until it is done here.
    refs_.fetch_add(1);
    for (const auto& sender : senders_) sender->Cancel();
    {
      MutexLock lock(&mu_);
      --cancelling_;
    }
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
      if (completing_ || cancelling_ > 0 ||
          (!failure_.has_value() && !ended_)) {
        return;
      }
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
    {
      MutexLock lock(&mu_);
      (void)EndWatch();
    }
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
      // The learner that failed the call (the others were cancelled for it),
      // kept through the message's rewrite below.
      const pb::FailedLearners failed = ReadFailedLearners(status);
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
      status = WithFailedLearners(status, failed);
    } else {
      service_->WatchStragglers(calls_, *settings_);
      // Every learner trained: the plan is used, whatever became of the
      // answers (as for Learn).
      const bool trained =
          std::all_of(calls_.begin(), calls_.end(),
                      [](const auto& call) { return call.status.ok(); });
      status = service_->MergeLearn(kMethod, calls_, counts_, stands_for_,
                                    *settings_, reply_);
      if (trained) claim_->Consume();
    }
    {
      MutexLock lock(&mu_);
      service_->AddBuffered(-reported_);
      reported_ = 0;
    }
    // Free before the caller hears back, as for Learn.
    lease_->FreeBytes();
    claim_.reset();
    if (timed_ && !failure_.has_value()) {
      AddTiming(context_, arrived_, calls_, service_->clock_.Now(),
                service_->clock_);
    }
    lease_->Served(status);
    FinishCall(status);
    // Counted out once answered (or its answer deferred to OnSent).
    lease_.reset();
    Unref();
  }

  LearnerService* const service_;
  grpc::CallbackServerContext* const context_;  // gRPC's, until OnDone
  grpc::ByteBuffer* const reply_;               // the same
  const std::shared_ptr<const Settings> settings_;
  // The whole stream, and every learner call, ends by then.
  const std::chrono::system_clock::time_point deadline_;
  const bool timed_;
  std::atomic<int> refs_{3};
  grpc::Alarm alarm_;
  grpc::ByteBuffer incoming_;  // the read in progress; one at a time

  Mutex mu_;
  int64_t messages_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point arrived_;  // the first message
  std::optional<PlanClaim> claim_;
  std::vector<size_t> counts_;
  std::vector<size_t> stands_for_;  // PlanSlice::learners, for the merge
  std::optional<StreamSplitter> splitter_ ABSL_GUARDED_BY(mu_);
  // Set up by the first message, then only the senders change them (each
  // its own Call) until Complete, which runs once they are all done.
  Calls calls_;
  std::vector<std::unique_ptr<SliceSender>> senders_;
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  size_t closed_ ABSL_GUARDED_BY(mu_) = 0;  // senders closed, in order
  size_t last_share_ = 0;  // the last learner with samples; set by Begin
  // The call's admission (lib/service/admission_lease.h), set by Start and
  // ended by Complete; its bytes in flight grow by each message (one lease,
  // however many messages).
  std::unique_ptr<AdmissionLease> lease_;
  int64_t reported_ ABSL_GUARDED_BY(mu_) = 0;  // ReportBuffered
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  int reads_starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool finish_decided_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> failure_;  // set once, under mu_
  bool completing_ ABSL_GUARDED_BY(mu_) = false;
  // Fail's or OnLate's senders loops running.
  int cancelling_ ABSL_GUARDED_BY(mu_) = 0;
  // straggler.late_after: the watch (set by the first message), whether its
  // timer was armed, whether it ended, and the learner cancelled as late.
  std::shared_ptr<LateAnswers::Watch> watch_;
  bool late_armed_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_ended_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<size_t> late_index_ ABSL_GUARDED_BY(mu_);
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

}  // namespace aggregator
