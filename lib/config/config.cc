#include "lib/config/config.h"

#include "absl/strings/str_cat.h"

namespace aggregator {

const char* RestartPolicyName(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::kAlways:
      return "always";
    case RestartPolicy::kOnFailure:
      return "on-failure";
    case RestartPolicy::kNever:
      return "never";
  }
  return "on-failure";
}

const char* OnLearnerFailureName(OnLearnerFailure policy) {
  return policy == OnLearnerFailure::kShrink ? "shrink" : "fail";
}

const char* LearnerSourceKind(const LearnerSourceConfig& source) {
  return std::holds_alternative<DnsSourceConfig>(source) ? "dns"
                                                         : "orchestrator";
}

std::string LearnerSourceTarget(const LearnerSourceConfig& source) {
  if (const auto* dns = std::get_if<DnsSourceConfig>(&source)) {
    std::string target = HostPort::Tcp(dns->name, dns->port).ToString();
    if (dns->nameserver) {
      absl::StrAppend(&target, " via ", dns->nameserver->ToString());
    }
    return target;
  }
  const auto& orchestrator = std::get<OrchestratorSourceConfig>(source);
  return absl::StrCat(orchestrator.url, " ", orchestrator.pod_namespace, "/",
                      orchestrator.name);
}

std::string LearnerSourceKey(const LearnerSourceConfig& source) {
  if (const auto* dns = std::get_if<DnsSourceConfig>(&source)) {
    return absl::StrCat("dns ", HostPort::Tcp(dns->name, dns->port).ToString());
  }
  const auto& orchestrator = std::get<OrchestratorSourceConfig>(source);
  return absl::StrCat("orchestrator ", orchestrator.url, " ",
                      orchestrator.pod_namespace, "/", orchestrator.name);
}

}  // namespace aggregator
