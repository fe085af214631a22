// The status page served on GET / of the metrics listener: one read-only HTML
// document with no external assets (it works on an air-gapped host) and no
// scripts, which the browser reloads every few seconds. Learner ids,
// addresses and error texts come from peers: everything shown is escaped.
#ifndef LIB_SERVER_STATUS_PAGE_H_
#define LIB_SERVER_STATUS_PAGE_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "lib/server/admin_service.h"

namespace aggregator {

// What the page shows beside ServerStatus.
struct StatusPageFacts {
  std::string version;
  std::string aggregator_id;
  std::chrono::steady_clock::duration uptime{};
  uint64_t membership_generation = 0;
  int min_learners = 0;
};

// How often the browser reloads the page.
inline constexpr int kStatusPageRefreshSeconds = 5;

std::string RenderStatusPage(const ServerStatus& status,
                             const StatusPageFacts& facts);

// `text` safe in HTML text and in quoted attribute values.
std::string HtmlEscape(absl::string_view text);

}  // namespace aggregator

#endif  // LIB_SERVER_STATUS_PAGE_H_
