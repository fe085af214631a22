#include "lib/discovery/orchestrator_source.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/discovery/http_client.h"

namespace aggregator {
namespace {

using nlohmann::json;

constexpr char kApi[] = "/v1alpha1";
constexpr size_t kExcerptChars = 120;
// The API's replies nest 3 deep ({"data": {"learners": [...]}}). Anything
// much deeper is refused while parsing: nlohmann::json copies, compares and
// dumps recursively, so a reply nested ~75,000 deep overflowed the stack.
constexpr int kMaxDepth = 32;

// The start of what the server sent, printable and on one line, for errors.
std::string Excerpt(absl::string_view body) {
  std::string out = "\"";
  for (const char c : body.substr(0, kExcerptChars)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '"' && c != '\\') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    }
  }
  absl::StrAppend(&out, body.size() > kExcerptChars ? "...\"" : "\"");
  return out;
}

// The reply's "data" after the checks every reply of the API shares: HTTP
// 200, a JSON object, "success": true.
absl::StatusOr<json> Data(int status, absl::string_view body_text) {
  if (status != 200) {
    return absl::UnavailableError(
        absl::StrCat("HTTP ", status, ": ", Excerpt(body_text)));
  }
  // Containers past kMaxDepth are never built (the callback discards them);
  // the parser itself is iterative.
  bool too_deep = false;
  json body = json::parse(
      body_text,
      [&too_deep](int depth, json::parse_event_t event, json&) {
        if ((event == json::parse_event_t::object_start ||
             event == json::parse_event_t::array_start) &&
            depth >= kMaxDepth) {
          too_deep = true;
          return false;
        }
        return true;
      },
      /*allow_exceptions=*/false);
  if (too_deep) {
    return absl::DataLossError(absl::StrCat("the reply nests deeper than ",
                                            kMaxDepth,
                                            " levels: ", Excerpt(body_text)));
  }
  if (body.is_discarded()) {
    return absl::DataLossError(
        absl::StrCat("the reply is not JSON: ", Excerpt(body_text)));
  }
  if (!body.is_object() || !body.contains("success") ||
      !body["success"].is_boolean()) {
    return absl::DataLossError(
        absl::StrCat("the reply is not DI-orchestrator's (no \"success\"): ",
                     Excerpt(body_text)));
  }
  if (!body["success"].get<bool>()) {
    // Read in place (no copies); dump() is bounded by kMaxDepth.
    const json null;
    const json& code = body.contains("code") ? body["code"] : null;
    const json& message = body.contains("message") ? body["message"] : null;
    return absl::FailedPreconditionError(
        absl::StrCat("the orchestrator refused: code ", code.dump(), ": ",
                     message.is_string() ? message.get_ref<const std::string&>()
                                         : message.dump()));
  }
  // Moved out, not copied.
  return body.contains("data") ? std::move(body["data"]) : json();
}

}  // namespace

absl::StatusOr<std::vector<HostPort>> ParseReplicasReply(
    int status, absl::string_view body) {
  absl::StatusOr<json> data = Data(status, body);
  if (!data.ok()) return data.status();
  if (!data->is_object() || !data->contains("learners") ||
      !(*data)["learners"].is_array()) {
    return absl::DataLossError(
        absl::StrCat("the reply has no data.learners list: ", Excerpt(body)));
  }
  std::vector<HostPort> learners;
  const json& list = (*data)["learners"];
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    absl::StatusOr<HostPort> address =
        entry.is_string() ? HostPort::Parse(entry.get<std::string>(),
                                            /*allow_port_zero=*/false)
                          : absl::InvalidArgumentError("not a string");
    if (!address.ok() || address->is_unix()) {
      return absl::DataLossError(absl::StrCat(
          "data.learners[", i, "] ", Excerpt(entry.dump()),
          " is not \"host:port\"",
          address.ok() ? "" : absl::StrCat(": ", address.status().message())));
    }
    learners.push_back(*std::move(address));
  }
  return learners;
}

std::string PodName(const HostPort& learner, const std::string& pod_namespace) {
  absl::string_view host = learner.host;
  const std::string suffix = absl::StrCat(".", pod_namespace);
  if (absl::EndsWith(host, suffix) && host.size() > suffix.size()) {
    host.remove_suffix(suffix.size());
  }
  return std::string(host);
}

OrchestratorSource::OrchestratorSource(OrchestratorSourceConfig config)
    : config_(std::move(config)) {}

absl::StatusOr<std::vector<HostPort>> OrchestratorSource::Fetch(
    const RequestLimits& limits) {
  const std::string url =
      absl::StrCat(config_.url, kApi,
                   "/replicas?namespace=", UrlEncode(config_.pod_namespace),
                   "&aggregator=", UrlEncode(config_.name));
  absl::StatusOr<HttpReply> reply = HttpCall("GET", url, "", limits);
  if (!reply.ok()) return reply.status();
  absl::StatusOr<std::vector<HostPort>> learners =
      ParseReplicasReply(reply->status, reply->body);
  if (!learners.ok()) {
    return absl::Status(
        learners.status().code(),
        absl::StrCat("GET ", url, ": ", learners.status().message()));
  }
  return learners;
}

absl::Status OrchestratorSource::ReportFailed(
    const std::vector<HostPort>& learners, const RequestLimits& limits) {
  json pods = json::array();
  for (const HostPort& learner : learners) {
    const std::string pod = PodName(learner, config_.pod_namespace);
    if (std::find(pods.begin(), pods.end(), pod) == pods.end()) {
      pods.push_back(pod);
    }
  }
  const json body = {{"namespace", config_.pod_namespace},
                     {"coordinator", config_.name},
                     {"collectors", json::array()},
                     {"learners", pods}};
  const std::string url = absl::StrCat(config_.url, kApi, "/replicas/failed");
  absl::StatusOr<HttpReply> reply = HttpCall("POST", url, body.dump(), limits);
  if (!reply.ok()) return reply.status();
  if (absl::Status verdict = Data(reply->status, reply->body).status();
      !verdict.ok()) {
    return absl::Status(verdict.code(),
                        absl::StrCat("POST ", url, ": ", verdict.message()));
  }
  return absl::OkStatus();
}

}  // namespace aggregator
