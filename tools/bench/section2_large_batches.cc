// Section 2 of tools/bench: large batches by Learn and LearnStream through
// aggregatord against the same bytes direct, and a refused hostile body.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

Section Bench::LargeBatches() {
  const int iterations = options_.large_iterations;
  Section section{
      "2",
      absl::StrCat("Large batches: Learn and LearnStream via "
                   "aggregatord vs the same bytes by Learn direct "
                   "to 1 learner (",
                   MiBText(options_.large_sample_bytes),
                   " MiB samples, LearnStream messages of ",
                   MiBText(options_.stream_message_bytes), " MiB; median of ",
                   iterations, " after 1 warm-up; fresh daemons per case)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    bool reset_failed = false;
    for (const int mib : options_.sizes_mib) {
      const int64_t samples =
          int64_t{mib} * (1 << 20) / options_.large_sample_bytes;
      Progress(absl::StrCat("  ", mib, " MiB: building the request"));
      const auto batch = BuildLargeBatch(samples, options_.large_sample_bytes,
                                         options_.stream_message_bytes);
      auto direct_learner = StartLearners(1, samples, env_);
      if (!direct_learner.ok()) return direct_learner.status();
      LargeLearnClient direct((*direct_learner)[0].address());
      pb::LearnReply reply;
      if (auto warm = direct.Learn(batch->buffer, &reply); !warm.ok()) {
        return warm.status();
      }
      std::vector<double> all_direct;
      for (const int count : options_.learner_counts) {
        if (samples % count != 0) {
          section.notes.push_back(absl::StrCat("skipped ", mib, " MiB over ",
                                               count, " learners: ", samples,
                                               " samples do not split evenly"));
          continue;
        }
        Progress(absl::StrCat("  ", mib, " MiB over ", count, " learner(s)"));
        auto result =
            RunLargeCase(*batch, count, direct, env_, options_.large_iterations,
                         {Relay::kLearn, Relay::kLearnStream});
        if (!result.ok()) {
          return absl::Status(
              result.status().code(),
              absl::StrCat(mib, " MiB over ", count,
                           " learners: ", result.status().message()));
        }
        for (const auto& [relay, r] : result->relays) {
          reset_failed |= !r.peak_reset;
          AddLargeRows(section, "", *batch, count, relay, r, result->direct_ms);
        }
        all_direct.push_back(result->direct_ms.median);
      }
      const Summary d = Summarize(all_direct);
      Row row{absl::StrCat("Learn ", mib, " MiB direct to 1 learner")};
      row.value = d.median;
      row.unit = "ms";
      row.comparison = absl::StrCat(
          FormatNumber(batch->payload_bytes / 1e6 / (d.median / 1e3)),
          " MB/s (median of the cases above)");
      row.details = {{"direct_ms_case_medians", all_direct}};
      section.rows.push_back(std::move(row));
    }
    if (absl::Status s = AddRefusedBodyRow(section, 128); !s.ok()) return s;
    section.notes.push_back(
        reset_failed
            ? "note: /proc/<pid>/clear_refs could not reset the peak: peak RSS "
              "includes the warm-up call"
            : "peak RSS: VmHWM over the timed calls (reset with clear_refs "
              "after the warm-up call); 'first call' is the peak up to and "
              "including the warm-up.");
    return absl::OkStatus();
  });
}

absl::Status Bench::AddRefusedBodyRow(Section& section, int mib) {
  Progress(absl::StrCat("  a refused ", mib, " MiB body of empty samples"));
  constexpr int kLearners = 4;
  auto learners = StartLearners(kLearners, 32, env_);
  if (!learners.ok()) return learners.status();
  auto daemon = StartDaemon(learners->Addresses(kLearners), env_);
  if (!daemon.ok()) return daemon.status();
  auto stub = pb::Learner::NewStub(Channel(daemon->address));
  grpc::ClientContext context;
  SetDeadline(&context, kSmallCallDeadline);
  pb::DataDemand demand;
  if (grpc::Status s = stub->GetData(&context, {}, &demand); !s.ok()) {
    return FromGrpc("GetData", s);
  }
  // A valid plan, then far more (empty) samples than it has: the scanner must
  // stop at sample 129, not index 64 Mi of them.
  auto batch = std::make_unique<LargeBatch>();
  pb::LearnRequest head;
  head.set_plan_id(demand.plan_id());
  head.SerializeToString(&batch->wire);
  const int64_t body = int64_t{mib} << 20;
  batch->wire.reserve(batch->wire.size() + body);
  for (int64_t i = 0; i < body / 2; ++i) batch->wire.append("\x0a\x00", 2);
  batch->payload_bytes = static_cast<int64_t>(batch->wire.size());
  grpc::Slice slice(batch->wire.data(), batch->wire.size(),
                    grpc::Slice::STATIC_SLICE);
  batch->buffer = grpc::ByteBuffer(&slice, 1);

  const pid_t pid = daemon->process->pid();
  auto idle = ProcStatusKiB(pid, "VmRSS");
  if (!idle.ok()) return idle.status();
  const bool reset = ResetPeakRss(pid).ok();
  LargeLearnClient client(daemon->address);
  pb::LearnReply reply;
  const auto started = Clock::now();
  auto refused = client.Learn(batch->buffer, &reply);
  const double ms = ToMs(Clock::now() - started);
  if (refused.ok()) {
    return absl::InternalError(
        absl::StrCat("a Learn of ", mib, " MiB of empty samples was accepted"));
  }
  auto peak = ProcStatusKiB(pid, "VmHWM");
  if (!peak.ok()) return peak.status();
  const double idle_mib = *idle / 1024.0;
  const double peak_mib = *peak / 1024.0;
  const double body_mib = batch->payload_bytes / kMiB;

  Row row{absl::StrCat("Learn of ", mib,
                       " MiB of empty samples, refused: daemon peak RSS")};
  row.value = peak_mib;
  row.unit = "MiB";
  row.ratio = (peak_mib - idle_mib) / body_mib;
  row.comparison =
      absl::StrCat("idle ", FormatNumber(idle_mib), " MiB + ",
                   Times(*row.ratio), " body; refused in ", FormatNumber(ms),
                   " ms: ", refused.status().message().substr(0, 80));
  const double limit = 1.2 * body_mib + idle_mib;
  row.target = absl::StrCat("≤ 1.2× body + idle (", FormatNumber(limit), ")");
  row.verdict = AtMost(peak_mib, limit);
  row.details = {{"peak_mib", peak_mib},
                 {"idle_rss_mib", idle_mib},
                 {"body_bytes", batch->payload_bytes},
                 {"refused_ms", ms},
                 {"peak_reset", reset},
                 {"status", std::string(refused.status().message())}};
  section.rows.push_back(std::move(row));
  return absl::OkStatus();
}

}  // namespace aggregator::bench
