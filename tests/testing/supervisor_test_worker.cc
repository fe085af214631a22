// A process child for the supervisor tests: serves MakeMockEnv() through
// RunWorkerProcess, or misbehaves as asked.
//
//   --fail_on_step=N   step fails when its counter reaches N
//   --init=MODE        ok (default); exit3: exit with code 3 before the
//                      handshake; abort: abort() in init; error: init returns
//                      an error; throw: init throws
//   --stream_bytes=N   after the handshake, write unsolicited N-byte replies
//                      without end and never read (the deadlock test's
//                      victim, always in the middle of a write)
//   --ignore_sigterm   SIGTERM is ignored
//   --close_channel    after the handshake, close the channel and keep
//                      running (until killed)
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "lib/supervisor/worker_channel.h"
#include "lib/supervisor/worker_runtime.h"
#include "tests/testing/supervisor_test_env.h"

namespace aggregator {
namespace {

// The channel after the handshake, or null.
std::unique_ptr<WorkerChannel> Handshake() {
  int fd = -1;
  const char* fd_text = getenv(kWorkerFdEnv);
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &fd)) return nullptr;
  auto channel = std::make_unique<WorkerChannel>(fd);
  if (!channel
           ->Write(InitReply(absl::OkStatus()),
                   std::chrono::steady_clock::time_point::max())
           .ok()) {
    return nullptr;
  }
  return channel;
}

int CloseChannelAndStay() {
  std::unique_ptr<WorkerChannel> channel = Handshake();
  if (channel == nullptr) return 2;
  channel.reset();
  for (;;) pause();
}

int Stream(size_t bytes) {
  std::unique_ptr<WorkerChannel> channel = Handshake();
  if (channel == nullptr) return 2;
  const auto forever = std::chrono::steady_clock::time_point::max();
  v1::WorkerReply reply;
  reply.set_method("stream");
  reply.mutable_data()->set_string_value(std::string(bytes, 's'));
  for (;;) {
    if (!channel->Write(reply, forever).ok()) return 2;
  }
}

int Main(int argc, char** argv) {
  MockEnvOptions env_options;
  env_options.allow_exit = true;
  std::string init_mode = "ok";
  size_t stream_bytes = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (absl::StartsWith(arg, "--fail_on_step=")) {
      if (!absl::SimpleAtoi(arg.substr(15), &env_options.fail_on_step)) {
        return 64;
      }
    } else if (absl::StartsWith(arg, "--init=")) {
      init_mode = arg.substr(7);
    } else if (absl::StartsWith(arg, "--stream_bytes=")) {
      if (!absl::SimpleAtoi(arg.substr(15), &stream_bytes)) return 64;
    } else if (arg == "--ignore_sigterm") {
      signal(SIGTERM, SIG_IGN);
    } else if (arg == "--close_channel") {
      return CloseChannelAndStay();
    } else {
      fprintf(stderr, "supervisor_test_worker: unknown argument %s\n",
              arg.c_str());
      return 64;
    }
  }
  if (stream_bytes > 0) return Stream(stream_bytes);
  return RunWorkerProcess(
      [&]() -> absl::StatusOr<std::unique_ptr<WorkerObject>> {
        if (init_mode == "exit3") _exit(3);
        if (init_mode == "abort") abort();
        if (init_mode == "error") {
          return absl::InvalidArgumentError("the mock env refuses to start");
        }
        if (init_mode == "throw") {
          throw std::runtime_error("the mock env threw in init");
        }
        return MakeMockEnv(env_options);
      });
}

}  // namespace
}  // namespace aggregator

int main(int argc, char** argv) { return aggregator::Main(argc, argv); }
