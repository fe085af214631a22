#include "lib/learners/call_path.h"

#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace aggregator {
namespace {

// A path longer than this many bytes is not one aggregators wrote.
constexpr size_t kMaxPathBytes = 4096;

// What an id may hold: ',' separates ids, and metadata values are ASCII.
bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

std::string Metadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const char* key) {
  const auto found = metadata.find(key);
  if (found == metadata.end()) return "";
  return std::string(found->second.data(), found->second.size());
}

}  // namespace

std::string NewAggregatorId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string name;
  for (const char* c = host; *c != '\0' && name.size() < 63; ++c) {
    name.push_back(IsIdChar(*c) ? *c : '_');
  }
  if (name.empty()) name = "aggregatord";
  std::random_device entropy;
  return absl::StrFormat("%s/%08x", name, entropy());
}

std::vector<std::string> IncomingPath(const grpc::ServerContextBase& context) {
  std::string value = Metadata(context.client_metadata(), kCallPathKey);
  if (value.size() > kMaxPathBytes) value.resize(kMaxPathBytes);
  std::vector<std::string> path;
  for (absl::string_view id : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    path.emplace_back(id);
  }
  return path;
}

grpc::Status CheckPath(const std::vector<std::string>& path,
                       const std::string& self, const char* method) {
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != self) continue;
    std::vector<std::string> cycle(path.begin() + i, path.end());
    cycle.push_back(self);
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat(method, ": call loop ", absl::StrJoin(cycle, " -> "),
                     ": a learner address leads back to aggregator ", self,
                     ", which already relayed this call; refused"));
  }
  if (path.size() >= kMaxTreeDepth) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat(method, ": this call has passed through ", path.size(),
                     " aggregators (", absl::StrJoin(path, " -> "),
                     "); a tree of aggregators may be at most ", kMaxTreeDepth,
                     " deep"));
  }
  return grpc::Status::OK;
}

std::string OutgoingPath(const std::vector<std::string>& path,
                         const std::string& self) {
  return path.empty() ? self
                      : absl::StrCat(absl::StrJoin(path, ","), ",", self);
}

std::string AnsweringAggregator(const grpc::ClientContext& context) {
  std::string id =
      Metadata(context.GetServerInitialMetadata(), kAggregatorIdKey);
  return id.empty()
             ? Metadata(context.GetServerTrailingMetadata(), kAggregatorIdKey)
             : id;
}

}  // namespace aggregator
