// Section 5 of tools/bench: start-up and shutdown of aggregatord.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

Section Bench::StartUp() {
  const int cycles = options_.startup_cycles;
  Section section{
      "5", absl::StrCat("Start-up and shutdown: 4 learners already "
                        "answering; ",
                        cycles, " daemon start/stop cycles, then ",
                        options_.quick ? 1 : 2, " with a client connected")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    auto learners = StartLearners(4, 32, env_);
    if (!learners.ok()) return learners.status();
    // "Learners up" means answering, not just listening: one call each.
    for (size_t i = 0; i < learners->size(); ++i) {
      auto stub = pb::Learner::NewStub(Channel((*learners)[i].address()));
      grpc::ClientContext context;
      SetDeadline(&context, kSmallCallDeadline);
      context.set_wait_for_ready(true);
      pb::Resource resource;
      const grpc::Status s = stub->GetResource(&context, {}, &resource);
      if (!s.ok()) return FromGrpc("GetResource on a learner", s);
    }
    // The last `connected_cycles` keep a coordinator's channel open (after a
    // call) while the daemon stops, as a coordinator would during a restart.
    const int connected_cycles = options_.quick ? 1 : 2;
    std::vector<double> ready, listening, in_daemon, exits, connected_exits;
    for (int cycle = 0; cycle < cycles + connected_cycles; ++cycle) {
      const bool connected = cycle >= cycles;
      auto daemon = StartDaemon(learners->Addresses(4), env_);
      if (!daemon.ok()) return daemon.status();
      ready.push_back(daemon->ready_ms);
      listening.push_back(daemon->listening_ms);
      if (daemon->log_ready_ms.has_value()) {
        in_daemon.push_back(*daemon->log_ready_ms);
      }
      // Serving means answering: one call through it before stopping.
      auto stub = pb::Learner::NewStub(Channel(daemon->address));
      {
        grpc::ClientContext context;  // holds the channel while it lives
        SetDeadline(&context, kSmallCallDeadline);
        pb::Resource resource;
        const grpc::Status s = stub->GetResource(&context, {}, &resource);
        if (!s.ok()) return FromGrpc("GetResource via aggregatord", s);
        if (resource.learners() != 4) {
          return absl::InternalError(absl::StrCat(
              "aggregatord reports ", resource.learners(), " learners, not 4"));
        }
      }
      if (!connected) stub.reset();  // the channel closes with the stub
      auto exit = Terminate(
          *daemon, section,
          connected ? "idle, client connected" : "idle, no client connected");
      if (!exit.ok()) return exit.status();
      (connected ? connected_exits : exits).push_back(*exit);
    }
    const Summary r = Summarize(ready);
    const Summary e = Summarize(exits);

    Row up{"ready: spawn → health SERVING, 4 learners, median"};
    up.value = r.median;
    up.unit = "ms";
    up.comparison = absl::StrCat("max ", FormatNumber(r.max), " ms");
    up.target = "≤ 100 ms";
    up.verdict = AtMost(r.median, 100);
    up.details = {{"ms", ToJson(r)}};
    section.rows.push_back(std::move(up));

    {
      const Summary l = Summarize(listening);
      Row row{"  spawn → \"listening\" line read (exec, load, bind)"};
      row.value = l.median;
      row.unit = "ms";
      row.details = {{"ms", ToJson(l)}};
      section.rows.push_back(std::move(row));
    }
    if (!in_daemon.empty()) {
      const Summary d = Summarize(in_daemon);
      Row row{"  daemon's log: \"starting\" → \"serving\""};
      row.value = d.median;
      row.unit = "ms";
      row.comparison = "log timestamps, 1 ms resolution";
      row.details = {{"ms", ToJson(d)}};
      section.rows.push_back(std::move(row));
    }
    Row python_up{"Python original: start-up"};
    python_up.value = kPythonStartupMs;
    python_up.unit = "ms";
    python_up.ratio = kPythonStartupMs / r.median;
    python_up.comparison = absl::StrCat(kPublished, "; aggregatord ",
                                        Times(*python_up.ratio), " faster");
    section.rows.push_back(std::move(python_up));

    Row down{"idle SIGTERM → exit, no client connected, median"};
    down.value = e.median;
    down.unit = "ms";
    down.comparison = absl::StrCat("max ", FormatNumber(e.max), " ms");
    down.target = "≤ 200 ms";
    down.verdict = AtMost(e.median, 200);
    down.details = {{"ms", ToJson(e)}};
    section.rows.push_back(std::move(down));

    const Summary c = Summarize(connected_exits);
    Row held{"idle SIGTERM → exit, coordinator connected, median"};
    held.value = c.median;
    held.unit = "ms";
    held.comparison = absl::StrCat("max ", FormatNumber(c.max),
                                   " ms; channel open, no call in flight");
    held.target = "≤ 200 ms";
    held.verdict = AtMost(c.median, 200);
    held.details = {{"ms", ToJson(c)}};
    section.rows.push_back(std::move(held));

    Row python_down{"Python original: close"};
    python_down.value = kPythonCloseMs;
    python_down.unit = "ms";
    python_down.ratio = kPythonCloseMs / std::max(e.median, c.median);
    python_down.comparison = absl::StrCat(kPublished, "; aggregatord ",
                                          Times(*python_down.ratio), " faster");
    section.rows.push_back(std::move(python_down));

    for (const auto& [count, ms] : fanout_ready_ms_) {
      Row row{absl::StrCat("ready with ", count, " learner",
                           count == 1 ? "" : "s", " (section 3, one start)")};
      row.value = ms;
      row.unit = "ms";
      row.comparison =
          absl::StrCat("SIGTERM → exit after load, client gone: ",
                       FormatNumber(fanout_exit_ms_[count]), " ms");
      section.rows.push_back(std::move(row));
    }
    return absl::OkStatus();
  });
}

}  // namespace aggregator::bench
