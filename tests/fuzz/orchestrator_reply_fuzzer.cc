// libFuzzer target: the DI-orchestrator reply parser
// (lib/discovery/orchestrator_source, ParseReplicasReply), which reads what
// an HTTP server sends. The input is the reply's body; its first byte picks
// the HTTP status ('5': 500, else 200).
//
// Checked on every input: the parser never crashes (a reply nested ~75,000
// deep overflowed the stack: issue 26 item 1), answers within libFuzzer's
// timeout, and says why when it refuses. What it accepts is a list of TCP
// learners with a port; a status other than 200 is UNAVAILABLE.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "lib/discovery/orchestrator_source.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int status = data[0] == '5' ? 500 : 200;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  const auto learners = aggregator::ParseReplicasReply(status, body);
  if (status != 200) {
    FUZZ_CHECK(learners.status().code() == absl::StatusCode::kUnavailable);
    return 0;
  }
  if (!learners.ok()) {
    FUZZ_CHECK(!learners.status().message().empty());
    return 0;
  }
  for (const aggregator::HostPort& learner : *learners) {
    FUZZ_CHECK(!learner.is_unix());
    FUZZ_CHECK(!learner.host.empty());
    FUZZ_CHECK(learner.port > 0);
  }
  return 0;
}
