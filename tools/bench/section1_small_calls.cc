// Section 1 of tools/bench: small calls through aggregatord and direct, and
// where their time goes (the daemon's timestamps).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/learner_names.h"
#include "tests/testing/synthetic_batch.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

namespace {

// Where one relayed call's time went, in ms, from the client's clock and the
// daemon's timestamps (lib/service/call_timing.h; both steady_clock).
struct CallStages {
  double to_aggregator = 0;  // the call sent -> the daemon's handler runs
  double to_first_call = 0;  // -> its first learner call starts
  double calls_out = 0;      // first -> last learner call started
  std::vector<double> round_trips;  // each learner's, start -> answer
  double first_out_last_in = 0;     // first call started -> last answer
  double merge = 0;                 // last answer -> the reply merged
  double hand_over = 0;             // merged -> handed to gRPC (Finish)
  double to_client = 0;             // -> the client has it
  double total = 0;
};

// Parses "arrived=T,<learner>=T0-T1,...,merged=T,replied=T" against the
// client's `sent` and `received`.
absl::StatusOr<CallStages> ParseTiming(const std::string& timing,
                                       Clock::time_point sent,
                                       Clock::time_point received) {
  auto ms = [](int64_t from, int64_t to) { return (to - from) / 1e6; };
  const int64_t sent_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              sent.time_since_epoch())
                              .count();
  const int64_t received_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          received.time_since_epoch())
          .count();
  int64_t arrived = -1, merged = -1, replied = -1;
  int64_t first_start = INT64_MAX, last_start = 0, last_end = 0;
  CallStages stages;
  for (absl::string_view field : absl::StrSplit(timing, ',')) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("timing: '", field, "'"));
    }
    const absl::string_view key = field.substr(0, eq);
    const absl::string_view value = field.substr(eq + 1);
    int64_t t = 0;
    if (const size_t dash = value.find('-'); dash != absl::string_view::npos) {
      int64_t end = 0;
      if (!absl::SimpleAtoi(value.substr(0, dash), &t) ||
          !absl::SimpleAtoi(value.substr(dash + 1), &end)) {
        return absl::InvalidArgumentError(
            absl::StrCat("timing: '", field, "'"));
      }
      first_start = std::min(first_start, t);
      last_start = std::max(last_start, t);
      last_end = std::max(last_end, end);
      stages.round_trips.push_back(ms(t, end));
      continue;
    }
    if (!absl::SimpleAtoi(value, &t)) {
      return absl::InvalidArgumentError(absl::StrCat("timing: '", field, "'"));
    }
    if (key == "arrived") arrived = t;
    if (key == "merged") merged = t;
    if (key == "replied") replied = t;
  }
  if (arrived < 0 || merged < 0 || replied < 0 || stages.round_trips.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timing without every stage: '", timing, "'"));
  }
  stages.to_aggregator = ms(sent_ns, arrived);
  stages.to_first_call = ms(arrived, first_start);
  stages.calls_out = ms(first_start, last_start);
  stages.first_out_last_in = ms(first_start, last_end);
  stages.merge = ms(last_end, merged);
  stages.hand_over = ms(merged, replied);
  stages.to_client = ms(replied, received_ns);
  stages.total = ms(sent_ns, received_ns);
  return stages;
}

}  // namespace

Section Bench::SmallCalls() {
  const int iterations = options_.small_iterations;
  const int warmup = std::max(20, iterations / 10);
  const bool baseline = !options_.baseline_daemon.empty();
  Section section{
      "1", absl::StrCat("Small calls: 4 learners via aggregatord and via the "
                        "minimal relay vs 1 learner direct (",
                        iterations, " calls each after ", warmup,
                        " warm-up, interleaved",
                        baseline ? ", with the baseline daemon" : "", ")")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    auto learners = StartLearners(4, 32, env_);
    if (!learners.ok()) return learners.status();
    auto direct_learner = StartLearners(1, 128, env_);
    if (!direct_learner.ok()) return direct_learner.status();
    auto daemon = StartDaemon(learners->Addresses(4), env_);
    if (!daemon.ok()) return daemon.status();
    // The floor: the least a relay does for the same fan-out.
    std::vector<std::string> relay_argv = {options_.minimal_relay, "--listen",
                                           "127.0.0.1:0"};
    for (const std::string& address : learners->Addresses(4)) {
      relay_argv.insert(relay_argv.end(), {"--learner", address});
    }
    auto minimal_relay =
        LearnerProcess::SpawnServer(relay_argv, env_, "minimal_relay");
    if (!minimal_relay.ok()) return minimal_relay.status();
    if (absl::Status s =
            (*minimal_relay)->WaitListening(Clock::now() + kStartDeadline);
        !s.ok()) {
      return s;
    }
    auto relayed = pb::Learner::NewStub(Channel((*minimal_relay)->address()));
    auto aggregated = pb::Learner::NewStub(Channel(daemon->address));
    auto direct = pb::Learner::NewStub(Channel((*direct_learner)[0].address()));
    // The baseline daemon (another build) serves the same learners.
    std::optional<RunningDaemon> old_daemon;
    std::unique_ptr<pb::Learner::Stub> old;
    if (baseline) {
      auto started =
          StartDaemon(learners->Addresses(4), env_, options_.baseline_daemon);
      if (!started.ok()) return started.status();
      old_daemon = *std::move(started);
      old = pb::Learner::NewStub(Channel(old_daemon->address));
    }
    const pb::LearnRequest batch = SyntheticBatch(128, 64, "s");

    using Call =
        std::function<grpc::Status(pb::Learner::Stub&, grpc::ClientContext*)>;
    struct Method {
      const char* name;
      double target_ms;
      double python_ms;
      Call call;
    };
    pb::Resource resource;
    pb::DataDemand demand;
    pb::LearnReply learned;
    const std::vector<Method> methods = {
        {"GetResource", 0.2, kPythonResourceMs,
         [&](pb::Learner::Stub& stub, grpc::ClientContext* context) {
           return stub.GetResource(context, {}, &resource);
         }},
        {"GetData", 0.4, kPythonGetDataMs,
         [&](pb::Learner::Stub& stub, grpc::ClientContext* context) {
           return stub.GetData(context, {}, &demand);
         }},
        {"Learn 128 × 64 B", 0.5, kPythonLearnMs,
         [&](pb::Learner::Stub& stub, grpc::ClientContext* context) {
           return stub.Learn(context, batch, &learned);
         }},
    };
    // One call, timed from just before the stub call to its return; the
    // context (with its deadline) is made before the clock starts.
    auto time_call = [](pb::Learner::Stub& stub,
                        const Call& call) -> absl::StatusOr<double> {
      grpc::ClientContext context;
      SetDeadline(&context, kSmallCallDeadline);
      const auto started = Clock::now();
      const grpc::Status status = call(stub, &context);
      const auto finished = Clock::now();
      if (!status.ok()) return FromGrpc("call", status);
      return ToMs(finished - started);
    };

    // The aggregator splits by a plan, and a plan trains once: each Learn
    // follows a GetData of its own (for 128 samples), outside the clock.
    auto plan = [&](pb::Learner::Stub& stub) -> absl::Status {
      grpc::ClientContext context;
      SetDeadline(&context, kSmallCallDeadline);
      const grpc::Status s = stub.GetData(&context, {}, &demand);
      if (!s.ok()) return FromGrpc("GetData", s);
      if (demand.batch_size() != 128) {
        return absl::InternalError(
            absl::StrCat("GetData via aggregatord demands ",
                         demand.batch_size(), " samples, expected 128"));
      }
      return absl::OkStatus();
    };
    for (const Method& method : methods) {
      const bool learn = absl::StartsWith(method.name, "Learn");
      std::vector<double> via, via_old, via_relay, to_one;
      auto timed = [&](pb::Learner::Stub& stub, const char* where,
                       std::vector<double>* out, bool keep) -> absl::Status {
        if (learn && &stub != direct.get() && &stub != relayed.get()) {
          if (absl::Status s = plan(stub); !s.ok()) return s;
        }
        auto ms = time_call(stub, method.call);
        if (!ms.ok()) {
          return absl::Status(ms.status().code(),
                              absl::StrCat(method.name, " ", where, ": ",
                                           ms.status().message()));
        }
        if (keep) out->push_back(*ms);
        return absl::OkStatus();
      };
      // The relays take turns at going first: in a fixed order the second
      // call of a round measured about 7% slower than the first, whatever
      // served it (aggregatord and the baseline swapped, 6 runs).
      struct Relayed {
        pb::Learner::Stub* stub;
        const char* where;
        std::vector<double>* out;
      };
      std::vector<Relayed> relays = {
          {aggregated.get(), "via aggregatord", &via}};
      if (old != nullptr) {
        relays.push_back({old.get(), "via the baseline aggregatord", &via_old});
      }
      relays.push_back({relayed.get(), "via the minimal relay", &via_relay});
      for (int i = 0; i < warmup + iterations; ++i) {
        const bool keep = i >= warmup;
        for (size_t k = 0; k < relays.size(); ++k) {
          const Relayed& r = relays[(i + k) % relays.size()];
          if (absl::Status s = timed(*r.stub, r.where, r.out, keep); !s.ok()) {
            return s;
          }
        }
        if (absl::Status s = timed(*direct, "direct", &to_one, keep); !s.ok()) {
          return s;
        }
      }
      if (learn) {
        // The last reply was the direct learner's; check one of each.
        if (absl::Status s = CheckReceived(learned, 128, "direct"); !s.ok()) {
          return s;
        }
        if (absl::Status s = plan(*aggregated); !s.ok()) return s;
        grpc::ClientContext context;
        SetDeadline(&context, kSmallCallDeadline);
        const grpc::Status s = aggregated->Learn(&context, batch, &learned);
        if (!s.ok()) return FromGrpc("Learn", s);
        if (absl::Status c = CheckReceived(learned, 128, "aggregatord");
            !c.ok()) {
          return c;
        }
      }
      const Summary a = Summarize(via);
      const Summary d = Summarize(to_one);
      const Summary r = Summarize(via_relay);
      const double ratio = a.median / d.median;
      Row median{absl::StrCat(method.name, " via aggregatord, median")};
      median.value = a.median;
      median.unit = "ms";
      median.comparison =
          absl::StrCat(Times(ratio), " direct (", FormatNumber(d.median),
                       " ms), ", Times(a.median / r.median),
                       " the minimal relay (", FormatNumber(r.median), " ms)");
      median.ratio = ratio;
      median.target = absl::StrCat("≤ ", method.target_ms, " ms");
      median.verdict = AtMost(a.median, method.target_ms);
      median.details = {{"aggregated_ms", ToJson(a)},
                        {"direct_ms", ToJson(d)},
                        {"minimal_relay_ms", ToJson(r)}};
      section.rows.push_back(std::move(median));

      // The floor: aggregatord against the least a relay does, in the same
      // interleaving (issue 25: within 1.15x for GetData and Learn).
      Row floor{absl::StrCat(method.name, " aggregatord / the minimal relay")};
      floor.value = a.median / r.median;
      floor.unit = "×";
      floor.ratio = floor.value;
      floor.comparison =
          absl::StrCat("medians; the relay ", Times(r.median / d.median),
                       " direct, p99 ", FormatNumber(r.p99), " ms");
      if (!absl::StartsWith(method.name, "GetResource")) {
        floor.target = "≤ 1.15×";
        floor.verdict = AtMost(*floor.value, 1.15);
      }
      section.rows.push_back(std::move(floor));

      Row p99{absl::StrCat(method.name, " via aggregatord, p99")};
      p99.value = a.p99;
      p99.unit = "ms";
      p99.ratio = a.p99 / d.p99;
      p99.comparison = absl::StrCat(Times(*p99.ratio), " direct p99 (",
                                    FormatNumber(d.p99), " ms)");
      section.rows.push_back(std::move(p99));

      if (old != nullptr) {
        const Summary o = Summarize(via_old);
        Row row{absl::StrCat(method.name, " via the baseline, median")};
        row.value = o.median;
        row.unit = "ms";
        row.ratio = o.median / d.median;
        row.comparison =
            absl::StrCat(Times(*row.ratio), " direct; this build ",
                         Times(a.median / o.median), " of it; p99 ",
                         FormatNumber(o.p99), " ms");
        row.details = {{"baseline_ms", ToJson(o)},
                       {"daemon", options_.baseline_daemon}};
        section.rows.push_back(std::move(row));
      }

      Row one{absl::StrCat(method.name, " direct to 1 learner, median")};
      one.value = d.median;
      one.unit = "ms";
      one.comparison = absl::StrCat("p99 ", FormatNumber(d.p99), " ms");
      section.rows.push_back(std::move(one));

      Row python{absl::StrCat("Python original: ", method.name)};
      python.value = method.python_ms;
      python.unit = "ms";
      python.ratio = method.python_ms / a.median;
      python.comparison = absl::StrCat(kPublished, "; aggregatord median ",
                                       Times(*python.ratio), " faster");
      section.rows.push_back(std::move(python));

      if (absl::StartsWith(method.name, "GetResource")) continue;
      if (absl::Status s = AddBreakdownRows(
              section, method.name, *aggregated,
              [&] { return learn ? plan(*aggregated) : absl::OkStatus(); },
              method.call);
          !s.ok()) {
        return s;
      }
    }
    if (const int warnings = daemon->process->warnings(); warnings > 0) {
      section.notes.push_back(
          absl::StrCat("note: aggregatord logged ", warnings,
                       " warning(s); last lines:\n", daemon->process->Tail(5)));
    }
    section.notes.push_back(
        "where it goes: the daemon's timestamps of calls that ask for them "
        "(x-aggregator-timing), medians of each stage over " +
        std::to_string(options_.breakdown_iterations) +
        " calls timed apart from the rows above.");
    return absl::OkStatus();
  });
}

absl::Status Bench::AddBreakdownRows(
    Section& section, const std::string& name, pb::Learner::Stub& stub,
    const std::function<absl::Status()>& prepare,
    const std::function<grpc::Status(pb::Learner::Stub&, grpc::ClientContext*)>&
        call) {
  std::vector<double> to_aggregator, to_first_call, calls_out, round_trips,
      slowest, first_out_last_in, merge, hand_over, to_client, total;
  const int iterations = options_.breakdown_iterations;
  const int warmup = std::max(10, iterations / 10);
  for (int i = 0; i < warmup + iterations; ++i) {
    if (absl::Status s = prepare(); !s.ok()) return s;
    grpc::ClientContext context;
    SetDeadline(&context, kSmallCallDeadline);
    context.AddMetadata(kTimingKey, "1");
    const auto sent = Clock::now();
    const grpc::Status status = call(stub, &context);
    const auto received = Clock::now();
    if (!status.ok()) return FromGrpc(name.c_str(), status);
    if (i < warmup) continue;
    const auto& trailers = context.GetServerTrailingMetadata();
    auto found = trailers.find(kTimingKey);
    if (found == trailers.end()) {
      section.notes.push_back(absl::StrCat(
          "note: no breakdown for ", name,
          ": the daemon sends no x-aggregator-timing (an older build?)"));
      return absl::OkStatus();
    }
    auto stages =
        ParseTiming(std::string(found->second.data(), found->second.size()),
                    sent, received);
    if (!stages.ok()) return stages.status();
    to_aggregator.push_back(stages->to_aggregator);
    to_first_call.push_back(stages->to_first_call);
    calls_out.push_back(stages->calls_out);
    for (double ms : stages->round_trips) round_trips.push_back(ms);
    slowest.push_back(*std::max_element(stages->round_trips.begin(),
                                        stages->round_trips.end()));
    first_out_last_in.push_back(stages->first_out_last_in);
    merge.push_back(stages->merge);
    hand_over.push_back(stages->hand_over);
    to_client.push_back(stages->to_client);
    total.push_back(stages->total);
  }
  auto add = [&](const std::string& stage, const std::vector<double>& values,
                 const std::string& comparison) {
    const Summary summary = Summarize(values);
    Row row{absl::StrCat("  ", name, ": ", stage)};
    row.value = summary.median;
    row.unit = "ms";
    row.comparison = comparison;
    row.details = {{"ms", ToJson(summary)}};
    section.rows.push_back(std::move(row));
    return summary.median;
  };
  auto median = [](const std::vector<double>& values) {
    return FormatNumber(Summarize(values).median);
  };
  double sum = 0;
  sum += add("coordinator → aggregator", to_aggregator,
             "call sent → the daemon's handler runs");
  sum += add("fan-out start", to_first_call,
             absl::StrCat("handler → first learner call; all out in +",
                          median(calls_out), " ms"));
  add("a learner's round trip", round_trips,
      absl::StrCat("its call out → its answer in; the slowest of 4 ",
                   median(slowest), " ms"));
  sum += add("first call out → last answer in", first_out_last_in,
             "the learners, as the aggregator waits for them");
  sum += add("merge", merge,
             absl::StrCat("last answer → reply merged; handed to gRPC +",
                          median(hand_over), " ms"));
  sum += Summarize(hand_over).median;
  sum += add("reply → coordinator", to_client,
             "handed to gRPC → the client has it");
  add("total, timing asked", total,
      absl::StrCat("the stages' medians add up to ", FormatNumber(sum), " ms"));
  return absl::OkStatus();
}

}  // namespace aggregator::bench
