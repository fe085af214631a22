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

std::string LateAfterName(const StragglerConfig::LateAfter& late_after) {
  switch (late_after.mode) {
    case StragglerConfig::LateAfter::Mode::kAuto:
      return "auto";
    case StragglerConfig::LateAfter::Mode::kOff:
      return "off";
    case StragglerConfig::LateAfter::Mode::kFixed:
      break;
  }
  return absl::StrCat(late_after.fixed.count(), "ms");
}

const char* LearnerSourceKind(const LearnerSourceConfig& source) {
  return std::holds_alternative<DnsSourceConfig>(source) ? "dns"
                                                         : "orchestrator";
}

namespace {

// What a source asks: "name:port", or "url namespace/name".
std::string SourceWhere(const LearnerSourceConfig& source) {
  if (const auto* dns = std::get_if<DnsSourceConfig>(&source)) {
    return HostPort::Tcp(dns->name, dns->port).ToString();
  }
  const auto& orchestrator = std::get<OrchestratorSourceConfig>(source);
  return absl::StrCat(orchestrator.url, " ", orchestrator.pod_namespace, "/",
                      orchestrator.name);
}

}  // namespace

std::string LearnerSourceTarget(const LearnerSourceConfig& source) {
  std::string target = SourceWhere(source);
  const auto* dns = std::get_if<DnsSourceConfig>(&source);
  if (dns != nullptr && dns->nameserver) {
    absl::StrAppend(&target, " via ", dns->nameserver->ToString());
  }
  return target;
}

std::string LearnerSourceKey(const LearnerSourceConfig& source) {
  return absl::StrCat(LearnerSourceKind(source), " ", SourceWhere(source));
}

}  // namespace aggregator
