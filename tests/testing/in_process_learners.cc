#include "tests/testing/in_process_learners.h"

#include <catch2/catch.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace aggregator::testing {

namespace pb = aggregator::v1;

// One call: answered now or later, or ended by its caller while held.
class FakeLearner::Call final : public grpc::ServerUnaryReactor {
 public:
  Call(FakeLearner* owner, std::string method,
       std::function<grpc::Status()> answer)
      : owner_(owner), method_(std::move(method)), answer_(std::move(answer)) {}

  const std::string& method() const { return method_; }
  void Answer() { Finish(answer_()); }
  void Cancel() {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                        absl::StrCat(method_, " held by the fake learner")));
  }

  // The caller cancelled, or the deadline passed: a held call ends now.
  void OnCancel() override {
    if (owner_->TakeHeld(this, /*cancelled=*/true)) Cancel();
  }
  void OnDone() override { delete this; }

 private:
  FakeLearner* const owner_;
  const std::string method_;
  const std::function<grpc::Status()> answer_;
};

FakeLearner::FakeLearner(Options options) : options_(options) {}

FakeLearner::~FakeLearner() { Stop(); }

void FakeLearner::Fail(const std::string& method, grpc::Status status) {
  MutexLock lock(&mu_);
  Method& m = methods_[method];
  m.script = Method::kFail;
  m.failure = std::move(status);
}

void FakeLearner::Hold(const std::string& method) {
  MutexLock lock(&mu_);
  methods_[method].script = Method::kHold;
}

void FakeLearner::Answer(const std::string& method) {
  std::set<Call*> released;
  {
    MutexLock lock(&mu_);
    Method& m = methods_[method];
    m.script = Method::kAnswer;
    released.swap(m.held);
  }
  for (Call* call : released) call->Answer();
}

void FakeLearner::Stop() {
  std::set<Call*> stopped;
  {
    MutexLock lock(&mu_);
    stopped_ = true;
    for (auto& [name, method] : methods_) {
      stopped.insert(method.held.begin(), method.held.end());
      method.held.clear();
    }
  }
  for (Call* call : stopped) call->Cancel();
}

grpc::ServerUnaryReactor* FakeLearner::Arrive(
    const char* method, std::function<grpc::Status()> answer) {
  auto* call = new Call(this, method, std::move(answer));
  grpc::Status failure;
  Method::Script script = Method::kAnswer;
  {
    MutexLock lock(&mu_);
    Method& m = methods_[method];
    ++m.calls;
    script = m.script;
    failure = m.failure;
    if (script == Method::kHold && !stopped_) {
      m.held.insert(call);
      return call;
    }
  }
  if (script == Method::kHold) {
    call->Cancel();  // stopped
  } else if (script == Method::kFail) {
    call->Finish(failure);
  } else {
    call->Answer();
  }
  return call;
}

bool FakeLearner::TakeHeld(Call* call, bool cancelled) {
  MutexLock lock(&mu_);
  Method& m = methods_[call->method()];
  if (m.held.erase(call) == 0) return false;
  if (cancelled) ++m.cancelled;
  return true;
}

int64_t FakeLearner::calls(const std::string& method) const {
  MutexLock lock(&mu_);
  auto it = methods_.find(method);
  return it == methods_.end() ? 0 : it->second.calls;
}

int64_t FakeLearner::held(const std::string& method) const {
  MutexLock lock(&mu_);
  auto it = methods_.find(method);
  return it == methods_.end() ? 0
                              : static_cast<int64_t>(it->second.held.size());
}

int64_t FakeLearner::cancelled(const std::string& method) const {
  MutexLock lock(&mu_);
  auto it = methods_.find(method);
  return it == methods_.end() ? 0 : it->second.cancelled;
}

bool FakeLearner::Await(const std::string& method, int64_t count,
                        int64_t Method::*counter,
                        std::chrono::milliseconds timeout) const {
  MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = methods_.find(method);
    if (it == methods_.end()) return count <= 0;
    const int64_t value = counter == nullptr
                              ? static_cast<int64_t>(it->second.held.size())
                              : it->second.*counter;
    return value >= count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&reached),
                              absl::FromChrono(timeout));
}

bool FakeLearner::AwaitCalls(const std::string& method, int64_t count,
                             std::chrono::milliseconds timeout) const {
  return Await(method, count, &Method::calls, timeout);
}

bool FakeLearner::AwaitHeld(const std::string& method, int64_t count,
                            std::chrono::milliseconds timeout) const {
  return Await(method, count, nullptr, timeout);
}

bool FakeLearner::AwaitCancelled(const std::string& method, int64_t count,
                                 std::chrono::milliseconds timeout) const {
  return Await(method, count, &Method::cancelled, timeout);
}

std::vector<std::vector<std::string>> FakeLearner::learned() const {
  MutexLock lock(&mu_);
  return learned_;
}

bool FakeLearner::task_open() const {
  MutexLock lock(&mu_);
  return task_open_;
}

grpc::ServerUnaryReactor* FakeLearner::GetResource(
    grpc::CallbackServerContext*, const pb::GetResourceRequest*,
    pb::Resource* reply) {
  return Arrive("GetResource", [this, reply] {
    reply->set_gpus(options_.gpus);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* FakeLearner::StartTask(grpc::CallbackServerContext*,
                                                 const pb::StartTaskRequest*,
                                                 pb::StartTaskReply* reply) {
  return Arrive("StartTask", [this, reply] {
    MutexLock lock(&mu_);
    task_open_ = true;
    reply->set_message("started");
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* FakeLearner::GetData(grpc::CallbackServerContext*,
                                               const pb::GetDataRequest*,
                                               pb::DataDemand* reply) {
  return Arrive("GetData", [this, reply] {
    reply->set_batch_size(options_.batch_size);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* FakeLearner::Learn(grpc::CallbackServerContext*,
                                             const pb::LearnRequest* request,
                                             pb::LearnReply* reply) {
  return Arrive("Learn", [this, request, reply] {
    auto& fields = *reply->mutable_info()->mutable_fields();
    fields["received"].set_number_value(request->samples_size());
    auto* ids = (*fields["priority_info"]
                      .mutable_struct_value()
                      ->mutable_fields())["replay_unique_id"]
                    .mutable_list_value();
    std::vector<std::string> received;
    for (const pb::Sample& sample : request->samples()) {
      auto id = sample.meta().fields().find("replay_unique_id");
      received.push_back(
          id == sample.meta().fields().end() ? "" : id->second.string_value());
      ids->add_values()->set_string_value(received.back());
    }
    MutexLock lock(&mu_);
    learned_.push_back(std::move(received));
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* FakeLearner::CloseTask(grpc::CallbackServerContext*,
                                                 const pb::CloseTaskRequest*,
                                                 pb::CloseTaskReply* reply) {
  return Arrive("CloseTask", [this, reply] {
    MutexLock lock(&mu_);
    task_open_ = false;
    reply->set_message("closed");
    return grpc::Status::OK;
  });
}

InProcessLearner::InProcessLearner(FakeLearner::Options options,
                                   const std::string& unix_socket)
    : learner_(options) {
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  if (!unix_socket.empty()) {
    builder.AddListeningPort("unix:" + unix_socket,
                             grpc::InsecureServerCredentials());
  }
  builder.RegisterService(&learner_);
  server_ = builder.BuildAndStart();
  REQUIRE(server_ != nullptr);
}

InProcessLearner::~InProcessLearner() { Shutdown(); }

std::shared_ptr<grpc::Channel> InProcessLearner::Channel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return server_->InProcessChannel(args);
}

void InProcessLearner::Shutdown() {
  learner_.Stop();  // the server's shutdown waits for the calls held
  if (server_ != nullptr) server_->Shutdown();
}

FakeLearnerRoster::~FakeLearnerRoster() { StopAll(); }

FakeLearner& FakeLearnerRoster::Add(const std::string& id,
                                    FakeLearner::Options options) {
  auto entry = std::make_unique<Entry>();
  entry->id = id;
  entry->server = std::make_unique<InProcessLearner>(options);
  FakeLearner& learner = entry->server->learner();
  MutexLock lock(&mu_);
  REQUIRE(Find(id) == nullptr);
  entries_.push_back(std::move(entry));
  return learner;
}

void FakeLearnerRoster::SetReady(const std::string& id) {
  MutexLock lock(&mu_);
  Entry* entry = Find(id);
  REQUIRE(entry != nullptr);
  std::shared_ptr<grpc::Channel> channel = entry->server->Channel();
  LearnerHandle& handle = entry->handle;
  handle.id = id;
  handle.address = HostPort::Unix("/in-process/" + id);
  handle.epoch = next_epoch_++;
  handle.stub = pb::Learner::NewStub(channel);
  handle.generic = std::make_shared<grpc::GenericStub>(channel);
  handle.counters = entry->counters;
  handle.resource.set_gpus(entry->server->learner().options().gpus);
  entry->state = LearnerState::kReady;
  entry->last_error.clear();
}

void FakeLearnerRoster::SetNotReady(const std::string& id, LearnerState state,
                                    const std::string& why) {
  MutexLock lock(&mu_);
  Entry* entry = Find(id);
  REQUIRE(entry != nullptr);
  entry->state = state;
  entry->last_error = why;
}

void FakeLearnerRoster::Remove(const std::string& id) {
  MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->id != id) continue;
    removed_.push_back(std::move(*it));
    entries_.erase(it);
    return;
  }
  FAIL("no fake learner " << id);
}

FakeLearner& FakeLearnerRoster::learner(const std::string& id) {
  MutexLock lock(&mu_);
  Entry* entry = Find(id);
  REQUIRE(entry != nullptr);
  return entry->server->learner();
}

void FakeLearnerRoster::StopAll() {
  MutexLock lock(&mu_);
  for (auto& entry : entries_) entry->server->learner().Stop();
  for (auto& entry : removed_) entry->server->learner().Stop();
}

FakeLearnerRoster::Entry* FakeLearnerRoster::Find(const std::string& id) {
  for (auto& entry : entries_) {
    if (entry->id == id) return entry.get();
  }
  return nullptr;
}

const FakeLearnerRoster::Entry* FakeLearnerRoster::Find(
    const std::string& id) const {
  for (const auto& entry : entries_) {
    if (entry->id == id) return entry.get();
  }
  return nullptr;
}

std::vector<LearnerHandle> FakeLearnerRoster::Ready() const {
  MutexLock lock(&mu_);
  std::vector<LearnerHandle> ready;
  for (const auto& entry : entries_) {
    if (entry->state == LearnerState::kReady) ready.push_back(entry->handle);
  }
  return ready;
}

absl::StatusOr<LearnerHandle> FakeLearnerRoster::Current(const std::string& id,
                                                         uint64_t epoch) const {
  MutexLock lock(&mu_);
  const Entry* entry = Find(id);
  if (entry == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(id, " is no longer a configured learner"));
  }
  const std::string name = absl::StrCat(id, " (unix:/in-process/", id, ")");
  if (entry->state != LearnerState::kReady) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is ", LearnerStateName(entry->state),
                     entry->last_error.empty() ? "" : ": ", entry->last_error));
  }
  if (entry->handle.epoch != epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " reconnected since GetData"));
  }
  return entry->handle;
}

void FakeLearnerRoster::RecordCall(const LearnerHandle& learner,
                                   const grpc::Status& status) {
  learner.counters->calls.fetch_add(1);
  if (status.ok()) return;
  learner.counters->failures.fetch_add(1);
  MutexLock lock(&mu_);
  if (Entry* entry = Find(learner.id))
    entry->last_error = status.error_message();
}

std::vector<LearnerSnapshot> FakeLearnerRoster::Status() const {
  MutexLock lock(&mu_);
  std::vector<LearnerSnapshot> out;
  for (const auto& entry : entries_) {
    out.push_back(LearnerSnapshot{
        entry->id, HostPort::Unix("/in-process/" + entry->id), entry->state,
        entry->last_error, entry->counters->calls.load(),
        entry->counters->failures.load()});
  }
  return out;
}

std::string FakeLearnerRoster::DescribeNotReady() const {
  MutexLock lock(&mu_);
  std::vector<std::string> parts;
  for (const auto& entry : entries_) {
    if (entry->state == LearnerState::kReady) continue;
    parts.push_back(absl::StrCat(entry->id, " (unix:/in-process/", entry->id,
                                 ") ", LearnerStateName(entry->state),
                                 entry->last_error.empty() ? "" : ": ",
                                 entry->last_error));
  }
  return absl::StrJoin(parts, "; ");
}

size_t FakeLearnerRoster::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

std::unique_ptr<grpc::Server> ServeInProcess(grpc::Service* service) {
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  return server;
}

}  // namespace aggregator::testing
