// Section 5 of tools/bench: start-up and shutdown of aggregatord.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {
namespace {

// A median of `ms` in ms against the target "≤ `limit_ms` ms", its max beside
// it (then `more`).
Row MedianRow(std::string metric, const Summary& ms, int limit_ms,
              const std::string& more = "") {
  Row row{std::move(metric)};
  row.value = ms.median;
  row.unit = "ms";
  row.comparison = absl::StrCat("max ", FormatNumber(ms.max), " ms", more);
  row.target = absl::StrCat("≤ ", limit_ms, " ms");
  row.verdict = AtMost(ms.median, limit_ms);
  row.details = {{"ms", ToJson(ms)}};
  return row;
}

// The Python original's published `python_ms`, and how many times faster
// aggregatord's `ms` is.
Row PythonRow(std::string metric, double python_ms, double ms) {
  Row row{std::move(metric)};
  row.value = python_ms;
  row.unit = "ms";
  row.ratio = python_ms / ms;
  row.comparison =
      absl::StrCat(kPublished, "; aggregatord ", Times(*row.ratio), " faster");
  return row;
}

}  // namespace

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

    section.rows.push_back(
        MedianRow("ready: spawn → health SERVING, 4 learners, median", r, 100));

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
    section.rows.push_back(
        PythonRow("Python original: start-up", kPythonStartupMs, r.median));

    section.rows.push_back(
        MedianRow("idle SIGTERM → exit, no client connected, median", e, 200));

    const Summary c = Summarize(connected_exits);
    section.rows.push_back(
        MedianRow("idle SIGTERM → exit, coordinator connected, median", c, 200,
                  "; channel open, no call in flight"));

    section.rows.push_back(PythonRow("Python original: close", kPythonCloseMs,
                                     std::max(e.median, c.median)));

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
