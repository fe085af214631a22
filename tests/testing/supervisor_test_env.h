// The mock environment the supervisor tests serve, in-process (thread
// children) and in tests/testing/supervisor_test_worker (process children):
// DI-engine's MockEnv and MockCrashEnv, plus methods for timeouts and exits.
#ifndef TESTS_TESTING_SUPERVISOR_TEST_ENV_H_
#define TESTS_TESTING_SUPERVISOR_TEST_ENV_H_

#include <memory>

#include "lib/supervisor/worker_runtime.h"

namespace aggregator {

struct MockEnvOptions {
  // step fails ("Ohh") when its counter reaches this; 0: never.
  int fail_on_step = 0;
  // Offer exit(code), which ends the whole process: process children only.
  bool allow_exit = false;
};

// Methods: step(any) -> the counter after incrementing it; echo(x) -> x;
// sleep_ms(ms) -> ms after sleeping (cut short by a stop: an error); block()
// and block_reset() sleep 10 s the same way; busy_ms(ms) sleeps and ignores
// stops (a method that cannot be interrupted); exit(code) if allowed.
// Attributes: action_space = 3, counter, pid.
std::unique_ptr<WorkerObject> MakeMockEnv(const MockEnvOptions& options = {});

// How many busy_ms calls have begun in this process (thread children run
// in-process): lets a test wait until one is under way.
int BusyCallsStarted();

}  // namespace aggregator

#endif  // TESTS_TESTING_SUPERVISOR_TEST_ENV_H_
