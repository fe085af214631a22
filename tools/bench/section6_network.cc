// Section 6 of tools/bench: large batches over links with a bandwidth limit, in
// a network namespace the bench creates and runs itself again in.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/process/subprocess.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

namespace {

// The hosts of section 6, all on the namespace's loopback: the coordinator
// (the bench) at 127.0.0.1, aggregatord at 127.0.0.2, the learners at
// 127.0.0.3. What is sent to a host shares one class of the bandwidth limit,
// as its network link would: a batch to aggregatord crosses one link, the
// aggregator's slices to the learners (or the direct batch) another.
constexpr char kNetnsDaemonHost[] = "127.0.0.2";
constexpr char kNetnsLearnerHost[] = "127.0.0.3";

// Runs a command of the namespace's set-up, with a deadline.
absl::Status RunSetup(const std::vector<std::string>& argv) {
  SubprocessOptions run;
  run.argv = argv;
  auto process = Subprocess::Start(run);
  if (!process.ok()) return process.status();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string errors;
  while (true) {
    auto line = (*process)->ReadLine(deadline, /*from_stderr=*/true);
    if (!line.ok()) break;
    absl::StrAppend(&errors, *line, " ");
  }
  auto exit = (*process)->Wait(deadline);
  if (!exit.ok()) return exit.status();
  if (!exit->ok()) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), ": ",
                                            exit->ToString(), ": ", errors));
  }
  return absl::OkStatus();
}

absl::Status LimitLoopback(const std::string& rate) {
  // A fresh namespace has nothing but lo: nothing can leave the machine.
  const std::vector<std::vector<std::string>> commands = {
      {"ip", "link", "set", "lo", "up"},
      {"tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb",
       "default", "1", "r2q", "1000"},
      // The replies and acknowledgements: not limited.
      {"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1",
       "htb", "rate", "100gbit", "burst", "4m", "cburst", "4m"},
      {"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:2",
       "htb", "rate", rate, "burst", "256k", "cburst", "256k"},
      {"tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:3",
       "htb", "rate", rate, "burst", "256k", "cburst", "256k"},
      {"tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip",
       "prio", "1", "u32", "match", "ip", "dst",
       absl::StrCat(kNetnsDaemonHost, "/32"), "flowid", "1:2"},
      {"tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip",
       "prio", "1", "u32", "match", "ip", "dst",
       absl::StrCat(kNetnsLearnerHost, "/32"), "flowid", "1:3"},
  };
  for (const auto& command : commands) {
    if (absl::Status s = RunSetup(command); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

Section Bench::Network() {
  Section section{
      "6", absl::StrCat("A network that is not loopback: a batch over 4 "
                        "learners with each host's link limited to ",
                        options_.netns_rate,
                        " (tc htb on the loopback of a network namespace the "
                        "bench creates; median of ",
                        options_.netns_iterations, " after 1 warm-up)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    if (geteuid() != 0) {
      section.notes.push_back(
          "NOT MEASURED: a network namespace (unshare --net) and tc need "
          "root; run the bench as root for this section.");
      return absl::OkStatus();
    }
    auto out = dir_.Write("network-section.json", "");
    if (!out.ok()) return out.status();
    SubprocessOptions run;
    run.argv = {"unshare",
                "--net",
                "--",
                SelfExecutable(),
                "--netns-child-out",
                *out,
                "--daemon",
                options_.daemon,
                "--learner",
                options_.learner,
                "--netns-rate",
                options_.netns_rate,
                "--netns-iterations",
                absl::StrCat(options_.netns_iterations),
                "--sample-bytes",
                absl::StrCat(options_.large_sample_bytes),
                "--stream-message-bytes",
                absl::StrCat(options_.stream_message_bytes),
                "--netns-sizes-mib",
                absl::StrJoin(options_.netns_sizes_mib, ",")};
    for (const auto& [key, value] : env_.vars) {
      run.argv.push_back("--env");
      run.argv.push_back(absl::StrCat(key, "=", value));
    }
    run.capture_output = false;  // its progress goes where ours does
    auto child = Subprocess::Start(run);
    if (!child.ok()) return child.status();
    auto exit = (*child)->Wait(Clock::now() + std::chrono::minutes(10));
    if (!exit.ok()) {
      (*child)->Stop(std::chrono::seconds(2));
      return absl::DeadlineExceededError(
          "section 6's child did not finish within 10 minutes");
    }
    std::ifstream in(*out);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json json =
        nlohmann::json::parse(text.str(), nullptr,
                              /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return absl::InternalError(
          absl::StrCat("section 6's child (unshare --net) ended with ",
                       exit->ToString(), " and no result"));
    }
    auto measured = SectionFromJson(json);
    if (!measured.ok()) return measured.status();
    section.rows = std::move(measured->rows);
    section.notes = std::move(measured->notes);
    section.failed = measured->failed;
    return absl::OkStatus();
  });
}

Section Bench::NetworkInNamespace() {
  const int iterations = options_.netns_iterations;
  Section section{"6", "in the namespace"};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    if (absl::Status s = LimitLoopback(options_.netns_rate); !s.ok()) return s;
    for (const int mib : options_.netns_sizes_mib) {
      const int64_t samples =
          int64_t{mib} * (1 << 20) / options_.large_sample_bytes;
      const auto batch = BuildLargeBatch(samples, options_.large_sample_bytes,
                                         options_.stream_message_bytes);
      auto direct_learner = StartLearners(1, samples, env_, kNetnsLearnerHost);
      if (!direct_learner.ok()) return direct_learner.status();
      LargeLearnClient direct((*direct_learner)[0].address());
      pb::LearnReply reply;
      if (auto warm = direct.Learn(batch->buffer, &reply); !warm.ok()) {
        return warm.status();
      }
      Progress(absl::StrCat("  ", mib, " MiB over 4 learners at ",
                            options_.netns_rate));
      auto result = RunLargeCase(*batch, 4, direct, env_, iterations,
                                 {Relay::kLearn, Relay::kLearnStream},
                                 kNetnsLearnerHost, kNetnsDaemonHost);
      if (!result.ok()) return result.status();
      const Summary& d = result->direct_ms;
      Row one{absl::StrCat("Learn ", mib, " MiB direct to 1 learner")};
      one.value = d.median;
      one.unit = "ms";
      one.comparison = absl::StrCat(
          FormatNumber(batch->payload_bytes / 1e6 / (d.median / 1e3)),
          " MB/s over a ", options_.netns_rate, " link");
      one.details = {{"direct_ms", ToJson(d)}, {"rate", options_.netns_rate}};
      section.rows.push_back(std::move(one));
      for (const auto& [relay, r] : result->relays) {
        const size_t first = section.rows.size();
        AddLargeRows(section, "", *batch, 4, relay, r, d);
        Row& time = section.rows[first];
        time.details["rate"] = options_.netns_rate;
        if (relay == Relay::kLearnStream && mib == 64) {
          time.target = "≤ 1.35× direct";
          time.verdict = AtMost(*time.ratio, 1.35);
        } else {
          time.target =
              relay == Relay::kLearn ? "(store-and-forward ≈ 2×)" : "";
          time.verdict = Verdict::kNone;
        }
      }
    }
    section.notes.push_back(absl::StrCat(
        "hosts on the namespace's loopback: coordinator 127.0.0.1, "
        "aggregatord ",
        kNetnsDaemonHost, ", learners ", kNetnsLearnerHost,
        "; what is sent to a host shares one htb class of ",
        options_.netns_rate, " (its link), replies are not limited."));
    return absl::OkStatus();
  });
}

}  // namespace aggregator::bench
