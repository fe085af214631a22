// example_learner: a Learner server for demos, tests and benchmarks, with fault
// injection. Prints "example_learner listening on <address>" once it serves;
// stops on SIGTERM or SIGINT.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "tools/example_learner_service.h"

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  aggregator::ExampleLearnerOptions options;
  std::string listen = "127.0.0.1:22300";
  int64_t delay_ms = 0;
  int64_t max_message_bytes = int64_t{1} << 30;
  CLI::App app{"example_learner: a demo Learner server"};
  app.add_option("--listen", listen, "address to serve on (port 0: any)");
  app.add_option("--batch-size", options.batch_size,
                 "samples demanded by GetData")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpus", options.gpus, "gpus reported by GetResource")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--delay-ms", delay_ms,
                 "wait this long in every RPC (or the one --delay-on names)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--delay-on", options.delay_on,
                 "the RPC --delay-ms applies to")
      ->check(CLI::IsMember(
          {"GetResource", "StartTask", "GetData", "Learn", "CloseTask"}));
  app.add_option("--fail-on", options.fail_on,
                 "an RPC that always fails with INTERNAL")
      ->check(CLI::IsMember(
          {"GetResource", "StartTask", "GetData", "Learn", "CloseTask"}));
  app.add_option("--crash-after", options.crash_after,
                 "exit abruptly when the RPC after this many arrives");
  app.add_flag("--omit-priorities", options.omit_priorities,
               "answer Learn without priority_info.priority");
  app.add_option("--fault-file", options.fault_file,
                 "a file read at every RPC whose settings (delay_ms=N "
                 "delay_on=METHOD fail_on=METHOD) replace the fault flags "
                 "while it exists");
  app.add_option("--max-message-bytes", max_message_bytes,
                 "largest message accepted or sent")
      ->check(CLI::Range(int64_t{1024}, int64_t{2147483647}));
  CLI11_PARSE(app, argc, argv);
  options.delay = std::chrono::milliseconds(delay_ms);

  auto server =
      aggregator::StartExampleLearner(options, listen, max_message_bytes);
  if (!server.ok()) {
    std::cerr << "example_learner: " << server.status().message() << "\n";
    return 2;
  }
  std::cout << "example_learner listening on " << (*server)->address
            << std::endl;
  int signo = 0;
  sigwait(&signals, &signo);
  (*server)->Shutdown();
  return 0;
}
