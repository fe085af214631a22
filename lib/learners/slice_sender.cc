#include "lib/learners/slice_sender.h"

#include <utility>

namespace aggregator {
namespace {

// The slices of `buffer`, appended to `slices` (they share its memory).
void AppendSlices(const grpc::ByteBuffer& buffer,
                  std::vector<grpc::Slice>* slices) {
  std::vector<grpc::Slice> more;
  if (!buffer.Valid() || !buffer.Dump(&more).ok()) return;
  for (grpc::Slice& slice : more) slices->push_back(std::move(slice));
}

}  // namespace

SliceSender::SliceSender(Call* call, std::string head, Hooks hooks)
    : call_(call),
      head_(std::move(head)),
      hooks_(std::move(hooks)),
      clock_(ClockOrSteady(hooks_.clock)),
      streamed_(call->learner.resource.learn_stream()) {}

bool SliceSender::started() const {
  MutexLock lock(&mu_);
  return started_;
}

grpc::ByteBuffer SliceSender::WithHead(const grpc::ByteBuffer& samples) const {
  std::vector<grpc::Slice> slices;
  if (!head_.empty()) slices.emplace_back(head_.data(), head_.size());
  AppendSlices(samples, &slices);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void SliceSender::Add(grpc::ByteBuffer samples, size_t bytes) {
  {
    MutexLock lock(&mu_);
    if (cancelled_ || broken_) return;
    queued_bytes_ += bytes;
    if (!streamed_) {
      AppendSlices(samples, &collected_);
      return;
    }
    if (!started_) {
      StartStream(WithHead(samples), bytes);
      // The stream starts below, in Pump, outside the lock.
    } else {
      queue_.emplace_back(std::move(samples), bytes);
    }
  }
  Pump();
}

void SliceSender::StartStream(grpc::ByteBuffer first, size_t bytes) {
  started_ = true;
  call_->started = clock_.Now();
  queue_.emplace_back(std::move(first), bytes);
}

void SliceSender::Close() {
  {
    MutexLock lock(&mu_);
    if (cancelled_ || closed_) return;
    closed_ = true;
    if (streamed_) {
      if (!started_) StartStream(WithHead(grpc::ByteBuffer()), 0);
      // The learner's time starts when its slice is whole: before, it waits
      // for the caller, whose pace is not the learner's (straggler.factor).
      call_->started = clock_.Now();
    } else {
      if (!head_.empty()) collected_.emplace_back(head_.data(), head_.size());
      request_ = grpc::ByteBuffer(collected_.data(), collected_.size());
      collected_.clear();
      queued_bytes_ = 0;  // the connection's now
      started_ = true;
      call_->started = clock_.Now();
    }
  }
  if (streamed_) {
    Pump();
    return;
  }
  call_->learner.generic->UnaryCall(
      call_->context.get(), kLearnMethod, grpc::StubOptions(), &request_,
      &call_->reply, [this](grpc::Status status) { Finished(status); });
}

void SliceSender::Cancel() {
  bool started = false;
  {
    MutexLock lock(&mu_);
    cancelled_ = true;
    started = started_;
    collected_.clear();
    queue_.clear();
    queued_bytes_ = writing_bytes_;
  }
  // The call's operations fail; a stream's hold is released in Pump when
  // they do, and OnDone reports CANCELLED.
  if (started) call_->context->TryCancel();
}

void SliceSender::Pump() {
  bool start = false;
  grpc::ByteBuffer* write = nullptr;
  bool writes_done = false;
  bool release = false;
  {
    MutexLock lock(&mu_);
    if (!started_) return;
    // The first Pump of a stream starts it: the call, its one read, and a
    // hold that keeps it open while pieces may still come.
    start = !std::exchange(stream_started_, true);
    if (!broken_ && !cancelled_ && !write_outstanding_) {
      if (!queue_.empty()) {
        writing_ = std::move(queue_.front().first);
        writing_bytes_ = queue_.front().second;
        queue_.pop_front();
        write_outstanding_ = true;
        write = &writing_;
      } else if (closed_ && !writes_done_) {
        writes_done_ = true;
        writes_done = true;
      }
    }
    if ((broken_ || cancelled_ || writes_done_) && !hold_released_) {
      hold_released_ = true;
      release = true;
    }
  }
  if (start) {
    call_->learner.generic->PrepareBidiStreamingCall(
        call_->context.get(), kLearnStreamMethod, grpc::StubOptions(), this);
    AddHold();
    StartRead(&call_->reply);
  }
  if (write != nullptr) StartWrite(write);
  if (writes_done) StartWritesDone();
  if (start) StartCall();
  if (release) RemoveHold();
}

void SliceSender::OnWriteDone(bool ok) {
  {
    MutexLock lock(&mu_);
    queued_bytes_ -= writing_bytes_;
    writing_bytes_ = 0;
    writing_.Clear();
    write_outstanding_ = false;
    if (!ok) {
      // The call is over (the learner failed or it was cancelled): OnDone
      // brings its status.
      broken_ = true;
      for (const auto& queued : queue_) queued_bytes_ -= queued.second;
      queue_.clear();
    }
  }
  if (hooks_.on_sent) hooks_.on_sent();
  Pump();
}

void SliceSender::OnReadDone(bool ok) {
  if (ok) return;  // the reply; the status follows
  {
    MutexLock lock(&mu_);
    broken_ = true;  // over without a reply: OnDone brings the status
    for (const auto& queued : queue_) queued_bytes_ -= queued.second;
    queue_.clear();
  }
  Pump();
}

void SliceSender::OnDone(const grpc::Status& status) { Finished(status); }

void SliceSender::Finished(const grpc::Status& status) {
  call_->finished = clock_.Now();
  call_->status = status;
  request_.Clear();  // the unary call's; nothing else touches it now
  // The owner may destroy the sender within on_done: call a copy.
  const std::function<void()> on_done = hooks_.on_done;
  on_done();
}

}  // namespace aggregator
