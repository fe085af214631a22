// Section A of tools/bench (--compare-allocators): the linked tcmalloc against
// preloaded jemalloc and full tcmalloc.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/bench/bench.h"

namespace aggregator::bench {

namespace {

// The allocators compared: each applies to the daemon and to every learner.
// aggregatord and example_learner link tcmalloc
// (//third_party/system:tcmalloc), so glibc's malloc cannot be chosen by
// environment any more; a preloaded allocator still takes precedence over the
// linked one. The glibc figures that led to linking tcmalloc are in
// tools/bench/BENCH.md.
std::vector<ChildEnv> AllocatorVariants(std::vector<std::string>* missing) {
  std::vector<ChildEnv> variants = {{"as built (tcmalloc)", {}}};
  const std::pair<const char*, const char*> preloads[] = {
      {"jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
      {"tcmalloc (full, preloaded)",
       "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"},
  };
  for (const auto& [label, path] : preloads) {
    if (access(path, R_OK) == 0) {
      variants.push_back({label, {{"LD_PRELOAD", path}}});
    } else {
      missing->push_back(absl::StrCat(label, " (", path, " not installed)"));
    }
  }
  return variants;
}

}  // namespace

Section Bench::Allocators() {
  const int iterations = options_.large_iterations;
  Section section{"A", absl::StrCat("Allocators in aggregatord and the "
                                    "learners: Learn over 4 learners (median "
                                    "of ",
                                    iterations, " after 1 warm-up)")};
  return Run(std::move(section), [&](Section& section) -> absl::Status {
    std::vector<std::string> missing;
    const std::vector<ChildEnv> variants = AllocatorVariants(&missing);
    const int64_t sample = options_.large_sample_bytes;
    const auto batch64 = BuildLargeBatch(int64_t{64} * (1 << 20) / sample,
                                         sample, options_.stream_message_bytes);
    const auto batch256 =
        BuildLargeBatch(int64_t{256} * (1 << 20) / sample, sample,
                        options_.stream_message_bytes);
    for (const ChildEnv& variant : variants) {
      for (const LargeBatch* batch : {batch64.get(), batch256.get()}) {
        Progress(absl::StrCat("  ", variant.label, ": ",
                              MiBText(batch->payload_bytes),
                              " MiB over 4 learners"));
        auto direct_learner = StartLearners(1, batch->samples, variant);
        if (!direct_learner.ok()) return direct_learner.status();
        LargeLearnClient direct((*direct_learner)[0].address());
        pb::LearnReply reply;
        if (auto warm = direct.Learn(batch->buffer, &reply); !warm.ok()) {
          return warm.status();
        }
        auto result = RunLargeCase(*batch, 4, direct, variant, iterations,
                                   {Relay::kLearn});
        if (!result.ok()) {
          return absl::Status(
              result.status().code(),
              absl::StrCat(variant.label, ": ", result.status().message()));
        }
        const size_t first = section.rows.size();
        AddLargeRows(section, variant.label + ": ", *batch, 4, Relay::kLearn,
                     result->relays.at(Relay::kLearn), result->direct_ms);
        for (size_t i = first; i < section.rows.size(); ++i) {
          section.rows[i].details["allocator"] = variant.label;
          section.rows[i].details["env"] = variant.vars;
        }
      }
    }
    for (const ChildEnv& variant : variants) {
      if (variant.vars.empty()) continue;
      section.notes.push_back(absl::StrCat(variant.label, ": ",
                                           variant.vars[0].first, "=",
                                           variant.vars[0].second));
    }
    for (const std::string& m : missing) {
      section.notes.push_back(absl::StrCat("not compared: ", m));
    }
    return absl::OkStatus();
  });
}

}  // namespace aggregator::bench
