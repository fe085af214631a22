// Section 3 of tools/bench: fan-out over 1 to 64 learners.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/synthetic_batch.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

Section Bench::FanOut() {
  const int iterations = options_.fanout_iterations;
  const int warmup = std::max(5, iterations / 10);
  Section section{
      "3", absl::StrCat("Fan-out: Learn of 16 × 64 B per learner "
                        "via aggregatord (",
                        iterations, " calls after ", warmup, " warm-up)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    std::vector<int> counts = options_.fanout_counts;
    if (counts.empty()) return absl::OkStatus();
    std::sort(counts.begin(), counts.end());
    Progress(absl::StrCat("  starting ", counts.back(), " learners"));
    auto learners = StartLearners(counts.back(), 16, env_);
    if (!learners.ok()) return learners.status();
    std::map<int, Summary> results;
    // Largest first: every case uses the first N learners, so all learners of
    // a case have run the same number of Learns and agree on learner_step (a
    // disagreement would be logged on every call, and logging is not what is
    // measured here).
    for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
      const int count = *it;
      Progress(absl::StrCat("  ", count, " learner(s)"));
      auto daemon = StartDaemon(learners->Addresses(count), env_);
      if (!daemon.ok()) return daemon.status();
      fanout_ready_ms_[count] = daemon->ready_ms;
      auto stub = pb::Learner::NewStub(Channel(daemon->address));
      // A plan trains once: a GetData before each Learn, outside the clock.
      auto plan = [&]() -> absl::Status {
        grpc::ClientContext context;
        SetDeadline(&context, kSmallCallDeadline);
        pb::DataDemand demand;
        const grpc::Status s = stub->GetData(&context, {}, &demand);
        if (!s.ok()) return FromGrpc("GetData", s);
        if (demand.batch_size() != 16 * count) {
          return absl::InternalError(absl::StrCat("GetData demands ",
                                                  demand.batch_size(),
                                                  ", expected ", 16 * count));
        }
        return absl::OkStatus();
      };
      const pb::LearnRequest batch = SyntheticBatch(16 * count, 64, "s");
      pb::LearnReply reply;
      std::vector<double> times;
      for (int i = 0; i < warmup + iterations; ++i) {
        if (absl::Status s = plan(); !s.ok()) return s;
        grpc::ClientContext context;
        SetDeadline(&context, kSmallCallDeadline);
        const auto started = Clock::now();
        const grpc::Status s = stub->Learn(&context, batch, &reply);
        const auto finished = Clock::now();
        if (!s.ok()) return FromGrpc("Learn", s);
        if (i >= warmup) times.push_back(ToMs(finished - started));
      }
      if (absl::Status s = CheckReceived(reply, 16 * count, "aggregatord");
          !s.ok()) {
        return s;
      }
      if (const int warnings = daemon->process->warnings(); warnings > 0) {
        section.notes.push_back(absl::StrCat("note: ", count,
                                             " learners: aggregatord logged ",
                                             warnings, " warning(s)"));
      }
      // Disconnect first: section 5 measures exits with a client connected.
      stub.reset();
      auto exit = Terminate(*daemon, section,
                            absl::StrCat(count, " learners, after load"));
      if (!exit.ok()) return exit.status();
      fanout_exit_ms_[count] = *exit;
      results[count] = Summarize(std::move(times));
    }
    const double one = results.begin()->second.median;
    for (const auto& [count, s] : results) {
      Row row{absl::StrCat("Learn, ", count, " learner", count == 1 ? "" : "s",
                           " (", 16 * count, " samples), median")};
      row.value = s.median;
      row.unit = "ms";
      row.ratio = s.median / one;
      row.comparison =
          absl::StrCat("p99 ", FormatNumber(s.p99), " ms; ", Times(*row.ratio),
                       " the ", results.begin()->first, "-learner median");
      row.details = {{"learners", count}, {"ms", ToJson(s)}};
      section.rows.push_back(std::move(row));
    }
    return absl::OkStatus();
  });
}

}  // namespace aggregator::bench
