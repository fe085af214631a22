#include "tests/testing/example_learner_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace aggregator {
namespace {

namespace pb = aggregator::v1;

constexpr const char* kMethods[] = {"GetResource", "StartTask", "GetData",
                                    "Learn", "CloseTask"};

bool KnownMethod(absl::string_view name) {
  for (const char* method : kMethods) {
    if (name == method) return true;
  }
  return false;
}

// A fault file's contents; nullopt when it does not exist. Never blocks (a
// FIFO is refused) and reads at most 4 KiB.
absl::StatusOr<std::optional<std::string>> ReadFaultFile(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return absl::ErrnoToStatus(errno, absl::StrCat("fault file ", path));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("fault file ", path, " is not a regular file"));
  }
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  const int error = errno;
  close(fd);
  if (n < 0) {
    return absl::ErrnoToStatus(error, absl::StrCat("fault file ", path));
  }
  return std::optional<std::string>(std::string(buffer, n));
}

std::string StringField(const google::protobuf::Struct& s, const char* key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end()) return "";
  if (it->second.has_string_value()) return it->second.string_value();
  if (it->second.has_number_value()) {
    return absl::StrCat(it->second.number_value());
  }
  return "";
}

}  // namespace

double SamplePriority(const std::string& data) {
  // FNV-1a over the length and the first 64 bytes.
  uint64_t hash = 1469598103934665603ULL ^ data.size();
  const size_t n = data.size() < 64 ? data.size() : 64;
  for (size_t i = 0; i < n; ++i) {
    hash = (hash ^ static_cast<unsigned char>(data[i])) * 1099511628211ULL;
  }
  return static_cast<double>(hash % 1000000) / 1e6;
}

absl::StatusOr<InjectedFaults> ParseFaults(const std::string& text) {
  InjectedFaults faults;
  for (absl::string_view setting :
       absl::StrSplit(text, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
    absl::string_view value = setting;
    int64_t ms = 0;
    if (absl::ConsumePrefix(&value, "delay_ms=")) {
      if (!absl::SimpleAtoi(value, &ms) || ms < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad fault setting '", setting,
                         "': delay_ms must be a non-negative integer"));
      }
      faults.delay = std::chrono::milliseconds(ms);
    } else if (absl::ConsumePrefix(&value, "delay_on=") && KnownMethod(value)) {
      faults.delay_on = std::string(value);
    } else if (value = setting;
               absl::ConsumePrefix(&value, "fail_on=") && KnownMethod(value)) {
      faults.fail_on = std::string(value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad fault setting '", setting,
          "': expected delay_ms=N, delay_on=METHOD or fail_on=METHOD"));
    }
  }
  return faults;
}

ExampleLearner::ExampleLearner(ExampleLearnerOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<InjectedFaults> ExampleLearner::CurrentFaults() const {
  InjectedFaults faults{options_.delay, options_.delay_on, options_.fail_on};
  if (options_.fault_file.empty()) return faults;
  auto text = ReadFaultFile(options_.fault_file);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return faults;
  auto parsed = ParseFaults(**text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fault file ", options_.fault_file, ": ", parsed.status().message()));
  }
  return parsed;
}

grpc::Status ExampleLearner::Enter(const char* method) {
  const absl::StatusOr<InjectedFaults> faults = CurrentFaults();
  MutexLock lock(&mu_);
  // Pools ask GetResource as they connect and then every resource_refresh:
  // counting it would make call counts (and crash_after) depend on time.
  if (std::string_view(method) != "GetResource") {
    if (options_.crash_after >= 0 && calls_ >= options_.crash_after) {
      std::_Exit(70);  // as a crash: no reply, no cleanup
    }
    ++calls_;
  }
  if (!faults.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        std::string(faults.status().message()));
  }
  if (faults->delay.count() > 0 &&
      (faults->delay_on.empty() || faults->delay_on == method)) {
    // Evaluated by the Mutex with mu_ held.
    auto released = [this, at = continued_]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stopped_ || continued_ != at;
    };
    mu_.AwaitWithTimeout(absl::Condition(&released),
                         absl::FromChrono(faults->delay));
  }
  if (faults->fail_on == method) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("injected failure in ", method));
  }
  return grpc::Status::OK;
}

grpc::Status ExampleLearner::GetResource(grpc::ServerContext*,
                                         const pb::GetResourceRequest*,
                                         pb::Resource* reply) {
  if (grpc::Status s = Enter("GetResource"); !s.ok()) return s;
  reply->set_gpus(options_.gpus);
  reply->set_learners(1);
  return grpc::Status::OK;
}

grpc::Status ExampleLearner::StartTask(grpc::ServerContext*,
                                       const pb::StartTaskRequest* request,
                                       pb::StartTaskReply* reply) {
  if (grpc::Status s = Enter("StartTask"); !s.ok()) return s;
  MutexLock lock(&mu_);
  task_open_ = true;
  task_id_ = StringField(request->task_info(), "task_id");
  buffer_id_ = StringField(request->task_info(), "buffer_id");
  reply->set_message(absl::StrCat("task '", task_id_, "' started"));
  return grpc::Status::OK;
}

grpc::Status ExampleLearner::GetData(grpc::ServerContext*,
                                     const pb::GetDataRequest*,
                                     pb::DataDemand* reply) {
  if (grpc::Status s = Enter("GetData"); !s.ok()) return s;
  MutexLock lock(&mu_);
  reply->set_batch_size(options_.batch_size);
  reply->set_cur_learner_iter(learner_step_);
  reply->set_task_id(task_id_);
  reply->set_buffer_id(buffer_id_);
  return grpc::Status::OK;
}

grpc::Status ExampleLearner::Learn(grpc::ServerContext*,
                                   const pb::LearnRequest* request,
                                   pb::LearnReply* reply) {
  if (grpc::Status s = Enter("Learn"); !s.ok()) return s;
  auto& fields = *reply->mutable_info()->mutable_fields();
  auto& priority_info =
      *fields["priority_info"].mutable_struct_value()->mutable_fields();
  auto* priorities = options_.omit_priorities
                         ? nullptr
                         : priority_info["priority"].mutable_list_value();
  auto* ids = priority_info["replay_unique_id"].mutable_list_value();
  std::vector<std::string> received;
  received.reserve(request->samples_size());
  for (const pb::Sample& sample : request->samples()) {
    if (priorities != nullptr) {
      priorities->add_values()->set_number_value(SamplePriority(sample.data()));
    }
    auto id = sample.meta().fields().find("replay_unique_id");
    if (id == sample.meta().fields().end()) {
      ids->add_values()->set_null_value(google::protobuf::NULL_VALUE);
      received.emplace_back();
    } else {
      *ids->add_values() = id->second;
      received.push_back(StringField(sample.meta(), "replay_unique_id"));
    }
  }
  MutexLock lock(&mu_);
  ++learner_step_;
  received_.push_back(std::move(received));
  fields["learner_step"].set_number_value(static_cast<double>(learner_step_));
  fields["learner_done"].set_bool_value(false);
  fields["task_id"].set_string_value(task_id_);
  fields["buffer_id"].set_string_value(buffer_id_);
  fields["received"].set_number_value(request->samples_size());
  reply->set_task_id(task_id_);
  reply->set_buffer_id(buffer_id_);
  return grpc::Status::OK;
}

grpc::Status ExampleLearner::CloseTask(grpc::ServerContext*,
                                       const pb::CloseTaskRequest*,
                                       pb::CloseTaskReply* reply) {
  if (grpc::Status s = Enter("CloseTask"); !s.ok()) return s;
  MutexLock lock(&mu_);
  task_open_ = false;
  reply->set_message(absl::StrCat("task '", task_id_, "' closed"));
  return grpc::Status::OK;
}

void ExampleLearner::Stop() {
  MutexLock lock(&mu_);
  stopped_ = true;
}

void ExampleLearner::Continue() {
  MutexLock lock(&mu_);
  ++continued_;
}

std::vector<std::vector<std::string>> ExampleLearner::received() const {
  MutexLock lock(&mu_);
  return received_;
}

int64_t ExampleLearner::learner_step() const {
  MutexLock lock(&mu_);
  return learner_step_;
}

int64_t ExampleLearner::calls() const {
  MutexLock lock(&mu_);
  return calls_;
}

bool ExampleLearner::task_open() const {
  MutexLock lock(&mu_);
  return task_open_;
}

ExampleLearnerServer::~ExampleLearnerServer() { Shutdown(); }

void ExampleLearnerServer::Shutdown() {
  if (server == nullptr) return;
  learner->Stop();
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  server.reset();
}

absl::StatusOr<std::unique_ptr<ExampleLearnerServer>> StartExampleLearner(
    const ExampleLearnerOptions& options, const std::string& address,
    int64_t max_message_bytes,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  auto running = std::make_unique<ExampleLearnerServer>();
  running->learner = std::make_unique<ExampleLearner>(options);
  grpc::ServerBuilder builder;
  const int limit = static_cast<int>(
      max_message_bytes > INT_MAX ? INT_MAX : max_message_bytes);
  builder.SetMaxReceiveMessageSize(limit);
  builder.SetMaxSendMessageSize(limit);
  // A second learner on the same port must fail to bind, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Aggregators ping their learners (connect.keepalive, at least 1s apart) to
  // notice a hung host: accept that, with or without calls open.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddListeningPort(
      address,
      credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
      &running->port);
  builder.RegisterService(running->learner.get());
  running->server = builder.BuildAndStart();
  if (running->server == nullptr || running->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("example learner cannot listen on '", address, "'"));
  }
  const size_t colon = address.rfind(':');
  running->address = absl::StrCat(address.substr(0, colon), ":", running->port);
  return running;
}

}  // namespace aggregator
