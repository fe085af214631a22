#include "tests/testing/supervisor_test_env.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

namespace aggregator {
namespace {

// A number argument, or `fallback` when absent.
double NumberArg(const WorkerArgs& args, int index, double fallback) {
  if (args.values_size() <= index ||
      args.values(index).kind_case() != google::protobuf::Value::kNumberValue) {
    return fallback;
  }
  return args.values(index).number_value();
}

std::atomic<int>& BusyCalls() {
  static std::atomic<int> calls{0};
  return calls;
}

}  // namespace

int BusyCallsStarted() { return BusyCalls().load(); }

std::unique_ptr<WorkerObject> MakeMockEnv(const MockEnvOptions& options) {
  auto env = std::make_unique<WorkerObject>();
  WorkerObject* self = env.get();
  // Shared by the methods; the object outlives them.
  auto counter = std::make_shared<int>(0);
  const int fail_on_step = options.fail_on_step;

  (void)env->AddMethod("step",
                       [counter, fail_on_step](
                           const WorkerArgs&) -> absl::StatusOr<WorkerValue> {
                         ++*counter;
                         if (fail_on_step != 0 && *counter == fail_on_step) {
                           return absl::InternalError(absl::StrCat(
                               "Ohh: step ", *counter, " fails as configured"));
                         }
                         return NumberValue(*counter);
                       });
  (void)env->AddMethod(
      "echo", [](const WorkerArgs& args) -> absl::StatusOr<WorkerValue> {
        if (args.values_size() == 0) return NullValue();
        return args.values(0);
      });
  auto sleep = [self](double ms) -> absl::StatusOr<WorkerValue> {
    if (!self->SleepFor(
            std::chrono::microseconds(static_cast<int64_t>(ms * 1000)))) {
      return absl::CancelledError("sleep cut short by a stop");
    }
    return NumberValue(ms);
  };
  (void)env->AddMethod("sleep_ms", [sleep](const WorkerArgs& args) {
    return sleep(NumberArg(args, 0, 0));
  });
  (void)env->AddMethod("block",
                       [sleep](const WorkerArgs&) { return sleep(10000); });
  (void)env->AddMethod("block_reset",
                       [sleep](const WorkerArgs&) { return sleep(10000); });
  (void)env->AddMethod(
      "busy_ms", [](const WorkerArgs& args) -> absl::StatusOr<WorkerValue> {
        BusyCalls().fetch_add(1);
        const double ms = NumberArg(args, 0, 0);
        std::this_thread::sleep_for(
            std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
        return NumberValue(ms);
      });
  if (options.allow_exit) {
    (void)env->AddMethod(
        "exit", [](const WorkerArgs& args) -> absl::StatusOr<WorkerValue> {
          _exit(static_cast<int>(NumberArg(args, 0, 0)));
        });
  }
  (void)env->SetAttr("action_space", NumberValue(3));
  (void)env->AddAttr("counter", [counter] { return NumberValue(*counter); });
  (void)env->AddAttr("pid", [] { return NumberValue(getpid()); });
  return env;
}

}  // namespace aggregator
