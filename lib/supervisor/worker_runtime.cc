#include "lib/supervisor/worker_runtime.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

#include <exception>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

using Steady = std::chrono::steady_clock;

absl::Status CheckName(absl::string_view kind, const std::string& name) {
  if (name.empty() || name[0] == '_') {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", kind, " name '", name,
                     "' is empty or starts with '_' (reserved)"));
  }
  return absl::OkStatus();
}

void SetError(v1::WorkerError::Kind kind, std::string message,
              v1::WorkerReply* reply) {
  reply->clear_data();
  v1::WorkerError* error = reply->mutable_error();
  error->set_kind(kind);
  error->set_message(std::move(message));
}

}  // namespace

WorkerValue NumberValue(double value) {
  WorkerValue v;
  v.set_number_value(value);
  return v;
}

WorkerValue StringValue(std::string value) {
  WorkerValue v;
  v.set_string_value(std::move(value));
  return v;
}

WorkerValue BoolValue(bool value) {
  WorkerValue v;
  v.set_bool_value(value);
  return v;
}

WorkerValue NullValue() {
  WorkerValue v;
  v.set_null_value(google::protobuf::NULL_VALUE);
  return v;
}

WorkerArgs MakeArgs(std::initializer_list<WorkerValue> values) {
  WorkerArgs args;
  for (const WorkerValue& value : values) *args.add_values() = value;
  return args;
}

absl::Status WorkerObject::AddMethod(std::string name, WorkerMethod method) {
  if (absl::Status status = CheckName("method", name); !status.ok()) {
    return status;
  }
  methods_[std::move(name)] = std::move(method);
  return absl::OkStatus();
}

absl::Status WorkerObject::SetAttr(std::string name, WorkerValue value) {
  return AddAttr(std::move(name), [value = std::move(value)] { return value; });
}

absl::Status WorkerObject::AddAttr(std::string name,
                                   std::function<WorkerValue()> getter) {
  if (absl::Status status = CheckName("attribute", name); !status.ok()) {
    return status;
  }
  attrs_[std::move(name)] = std::move(getter);
  return absl::OkStatus();
}

void WorkerObject::Handle(const v1::WorkerRequest& request,
                          v1::WorkerReply* reply) {
  reply->Clear();
  reply->set_req_id(request.req_id());
  reply->set_method(request.method());
  try {
    if (request.method() == kGetAttrMethod) {
      if (request.args().values_size() < 1 ||
          request.args().values(0).kind_case() !=
              google::protobuf::Value::kStringValue) {
        SetError(v1::WorkerError::KIND_FAILED,
                 "_getattr needs the attribute name as its first argument",
                 reply);
        return;
      }
      const std::string& key = request.args().values(0).string_value();
      auto it = attrs_.find(key);
      if (it == attrs_.end()) {
        SetError(v1::WorkerError::KIND_NO_SUCH_ATTRIBUTE,
                 absl::StrCat("no attribute '", key, "'"), reply);
        return;
      }
      *reply->mutable_data() = it->second();
      return;
    }
    auto it = methods_.find(request.method());
    if (it == methods_.end()) {
      SetError(v1::WorkerError::KIND_NO_SUCH_METHOD,
               absl::StrCat("no method '", request.method(), "'"), reply);
      return;
    }
    absl::StatusOr<WorkerValue> result = it->second(request.args());
    if (!result.ok()) {
      SetError(v1::WorkerError::KIND_FAILED,
               std::string(result.status().message()), reply);
      return;
    }
    reply->mutable_data()->Swap(&*result);
  } catch (const std::exception& e) {
    SetError(v1::WorkerError::KIND_FAILED,
             absl::StrCat("exception: ", e.what()), reply);
  } catch (...) {
    SetError(v1::WorkerError::KIND_FAILED, "an exception of unknown type",
             reply);
  }
}

void WorkerObject::RequestStop() {
  MutexLock lock(&stop_mu_);
  stop_requested_.store(true, std::memory_order_release);
}

bool WorkerObject::SleepFor(std::chrono::nanoseconds duration) {
  MutexLock lock(&stop_mu_);
  auto stop = [this] {
    return stop_requested_.load(std::memory_order_acquire);
  };
  return !stop_mu_.AwaitWithTimeout(absl::Condition(&stop),
                                    absl::FromChrono(duration));
}

absl::StatusOr<std::unique_ptr<WorkerObject>> RunWorkerInit(
    const WorkerInit& init) {
  try {
    absl::StatusOr<std::unique_ptr<WorkerObject>> object = init();
    if (object.ok() && *object == nullptr) {
      return absl::InternalError("init returned no object");
    }
    return object;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("init threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("init threw an exception of unknown type");
  }
}

v1::WorkerReply InitReply(const absl::Status& init_status) {
  v1::WorkerReply reply;
  reply.set_method(kInitMethod);
  if (!init_status.ok()) {
    SetError(v1::WorkerError::KIND_INIT_FAILED, init_status.ToString(), &reply);
  }
  return reply;
}

absl::Status ServeWorker(WorkerObject& object, WorkerChannel& channel) {
  // Reused across requests so the steady state allocates little.
  v1::WorkerRequest request;
  v1::WorkerReply reply;
  for (;;) {
    absl::Status status = channel.Read(&request, Steady::time_point::max());
    if (absl::IsOutOfRange(status)) return absl::OkStatus();
    if (!status.ok()) return status;
    if (request.method() == kShutdownMethod) return absl::OkStatus();
    object.Handle(request, &reply);
    status = channel.Write(reply, Steady::time_point::max());
    if (!status.ok()) return status;
  }
}

int RunWorkerProcess(const WorkerInit& init) {
  const char* fd_text = getenv(kWorkerFdEnv);
  int fd = -1;
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &fd) || fd < 0 ||
      fcntl(fd, F_GETFD) < 0) {
    fprintf(stderr,
            "worker: %s is %s%s%s; this program must be started by the "
            "aggregator's supervisor\n",
            kWorkerFdEnv, fd_text == nullptr ? "not set" : "'",
            fd_text == nullptr ? "" : fd_text,
            fd_text == nullptr ? "" : "', not an open fd");
    return 2;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  WorkerChannel channel(fd);

  absl::StatusOr<std::unique_ptr<WorkerObject>> object = RunWorkerInit(init);
  absl::Status status =
      channel.Write(InitReply(object.status()), Steady::time_point::max());
  if (!object.ok()) {
    fprintf(stderr, "worker: init failed: %s\n",
            object.status().ToString().c_str());
    return 1;
  }
  if (status.ok()) status = ServeWorker(**object, channel);
  if (!status.ok()) {
    fprintf(stderr, "worker: %s\n", status.ToString().c_str());
    return 2;
  }
  return 0;
}

}  // namespace aggregator
