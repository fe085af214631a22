// A learner worker with `channel: true` that announces the port given as its
// argument ("_listening", as learner_aggregator.serve does) and listens on
// nothing: a worker that says another learner's address. Runs until a signal
// ends it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "lib/supervisor/worker_channel.h"
#include "proto/worker.pb.h"

int main(int argc, char** argv) {
  const char* fd = std::getenv(aggregator::kWorkerFdEnv);
  if (argc != 2 || fd == nullptr) {
    std::fprintf(stderr, "usage: %s PORT (as a channel worker)\n", argv[0]);
    return 2;
  }
  aggregator::WorkerChannel channel(std::atoi(fd));
  aggregator::v1::WorkerReply reply;
  reply.set_method("_listening");
  (*reply.mutable_data()->mutable_struct_value()->mutable_fields())["port"]
      .set_number_value(std::atoi(argv[1]));
  const absl::Status sent = channel.Write(
      reply, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  if (!sent.ok()) {
    std::fprintf(stderr, "announcing: %s\n", sent.ToString().c_str());
    return 1;
  }
  for (;;) pause();
}
