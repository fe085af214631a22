#include "lib/config/learner_sources_reader.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/config/typed_readers.h"

namespace aggregator {
namespace {

// A DNS name: labels of letters, digits, '-' and '_', 1 to 63 characters
// each, 253 in all (a final '.' allowed); not an address.
bool ReadDnsName(YamlReader* reader, const Field& field, std::string* out) {
  std::string name;
  if (!ReadString(reader, field, &name)) return false;
  absl::string_view labels = absl::StripSuffix(name, ".");
  if (IsIpAddress(name)) {
    reader->Error(field, absl::StrCat(Quote(name),
                                      " is an address, not a name: list it "
                                      "under learners instead"));
    return false;
  }
  const bool valid =
      !labels.empty() && labels.size() <= 253 &&
      absl::c_all_of(absl::StrSplit(labels, '.'), [](absl::string_view l) {
        return !l.empty() && l.size() <= 63 &&
               std::all_of(l.begin(), l.end(), [](char c) {
                 return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                        c == '-' || c == '_';
               });
      });
  if (!valid) {
    reader->Error(field,
                  absl::StrCat("not a DNS name: ", Quote(name),
                               " (labels of letters, digits, '-' and '_', "
                               "1 to 63 characters each, separated by '.')"));
    return false;
  }
  *out = std::move(name);
  return true;
}

// dns.nameserver: an IP address with an optional port (default 53).
void ReadNameserver(YamlReader* reader, const Field& field,
                    std::optional<HostPort>* out) {
  std::string text;
  if (!ReadString(reader, field, &text)) return;
  absl::StatusOr<HostPort> address =
      IsIpAddress(text) ? HostPort::Tcp(text, 53)
                        : HostPort::Parse(text, /*allow_port_zero=*/false);
  if (!address.ok() || address->is_unix() || !IsIpAddress(address->host)) {
    reader->Error(field,
                  absl::StrCat("expected a DNS server's IP address with an "
                               "optional port (\"10.96.0.10\", "
                               "\"127.0.0.1:5353\", \"[fd00::a]:53\"), got ",
                               Quote(text)));
    return;
  }
  *out = *std::move(address);
}

// learner_sources[].dns; nullopt when its name is missing or invalid.
std::optional<LearnerSourceConfig> ReadDnsSource(YamlReader* reader,
                                                 const Field& field) {
  DnsSourceConfig dns;
  std::optional<Field> name;
  std::optional<Field> port;
  reader->ReadMap(
      field,
      {
          {"name", [&](const Field& f) { name = f; }},
          {"port", [&](const Field& f) { port = f; }},
          {"refresh",
           [&](const Field& f) { ReadDuration(reader, f, &dns.refresh); }},
          {"timeout",
           [&](const Field& f) { ReadDuration(reader, f, &dns.timeout); }},
          {"nameserver",
           [&](const Field& f) { ReadNameserver(reader, f, &dns.nameserver); }},
      });
  if (!port) {
    reader->Error(field, "missing \"port\" (the learners' port, 1 to 65535)");
  } else {
    ReadInt(reader, *port, 1, kMaxPort, &dns.port);
  }
  if (!name) {
    reader->Error(field,
                  "missing \"name\" (the DNS name whose A and AAAA records "
                  "are the learners, e.g. learners.ns.svc.cluster.local)");
    return std::nullopt;
  }
  if (!ReadDnsName(reader, *name, &dns.name)) return std::nullopt;
  return dns;
}

// A non-empty string written at `written`, else the value of $`env` when it
// is set and not empty (the DI-engine original's defaults).
bool ReadWrittenOrEnv(YamlReader* reader, const Field& section,
                      const std::optional<Field>& written, const char* key,
                      const char* env, const char* what, std::string* out) {
  if (written) {
    if (!ReadString(reader, *written, out)) return false;
    if (out->empty()) {
      reader->Error(*written, "must not be empty");
      return false;
    }
    return true;
  }
  const char* value = std::getenv(env);
  if (value == nullptr || *value == '\0') {
    reader->Error(section, absl::StrCat("missing \"", key, "\" (", what,
                                        "); or set ", env));
    return false;
  }
  *out = value;
  return true;
}

// orchestrator.url, or $`env`: http:// or https://, a host, no query; a
// final '/' is dropped.
bool ReadUrl(YamlReader* reader, const Field& section,
             const std::optional<Field>& written, const char* env,
             std::string* out) {
  std::string url;
  if (!ReadWrittenOrEnv(reader, section, written, "url", env,
                        "the orchestrator's server, e.g. "
                        "http://di-server.di-system:8080",
                        &url)) {
    return false;
  }
  absl::string_view rest = url;
  const bool scheme = absl::ConsumePrefix(&rest, "http://") ||
                      absl::ConsumePrefix(&rest, "https://");
  const bool clean = std::none_of(url.begin(), url.end(), [](char c) {
    return static_cast<unsigned char>(c) <= 0x20 || c == '?' || c == '#';
  });
  if (!scheme || rest.empty() || rest[0] == '/' || !clean) {
    const std::string what = written ? "" : absl::StrCat(" (from ", env, ")");
    reader->Error(
        written ? *written : section,
        absl::StrCat("expected an http:// or https:// URL with a host and "
                     "no query, e.g. \"http://di-server.di-system:8080\", "
                     "got ",
                     Quote(url), what));
    return false;
  }
  while (!url.empty() && url.back() == '/') url.pop_back();
  *out = std::move(url);
  return true;
}

// learner_sources[].orchestrator; nullopt when url, namespace or name is
// missing (and not in the environment) or invalid.
std::optional<LearnerSourceConfig> ReadOrchestratorSource(YamlReader* reader,
                                                          const Field& field) {
  OrchestratorSourceConfig orchestrator;
  std::optional<Field> url;
  std::optional<Field> pod_namespace;
  std::optional<Field> name;
  reader->ReadMap(
      field, {
                 {"url", [&](const Field& f) { url = f; }},
                 {"namespace", [&](const Field& f) { pod_namespace = f; }},
                 {"name", [&](const Field& f) { name = f; }},
                 {"refresh",
                  [&](const Field& f) {
                    ReadDuration(reader, f, &orchestrator.refresh);
                  }},
                 {"timeout",
                  [&](const Field& f) {
                    ReadDuration(reader, f, &orchestrator.timeout);
                  }},
                 {"report_failed_after",
                  [&](const Field& f) {
                    ReadDuration(reader, f, &orchestrator.report_failed_after);
                  }},
             });
  // Each is read (and reported) even when one before it failed.
  bool ok =
      ReadUrl(reader, field, url, "KUBERNETES_SERVER_URL", &orchestrator.url);
  ok = ReadWrittenOrEnv(reader, field, pod_namespace, "namespace",
                        "KUBERNETES_POD_NAMESPACE",
                        "this aggregator's namespace",
                        &orchestrator.pod_namespace) &&
       ok;
  ok = ReadWrittenOrEnv(reader, field, name, "name", "KUBERNETES_POD_NAME",
                        "this aggregator's pod name", &orchestrator.name) &&
       ok;
  if (!ok) return std::nullopt;
  return orchestrator;
}

}  // namespace

void ReadLearnerSources(YamlReader* reader, const Field& field,
                        std::vector<LearnerSourceConfig>* sources) {
  sources->clear();
  // Each source's key and where it was first written.
  std::map<std::string, YAML::Mark> first_use;
  reader->ReadList(field, [&](const Field& item) {
    if (!item.node.IsMap() || item.node.size() != 1) {
      reader->Error(
          item, absl::StrCat(
                    "expected a map of one key, dns or orchestrator "
                    "(e.g. {dns: {name: learners.ns.svc.cluster.local, "
                    "port: 22300}}), got ",
                    item.node.IsMap()
                        ? absl::StrCat("a map of ", item.node.size(), " keys")
                        : Describe(item.node)));
      return;
    }
    std::optional<LearnerSourceConfig> source;
    reader->ReadMap(
        item,
        {{"dns", [&](const Field& f) { source = ReadDnsSource(reader, f); }},
         {"orchestrator", [&](const Field& f) {
            source = ReadOrchestratorSource(reader, f);
          }}});
    if (!source) return;
    auto [first, inserted] =
        first_use.emplace(LearnerSourceKey(*source), item.mark);
    if (!inserted) {
      reader->Error(item, absl::StrCat("the same source as the one at ",
                                       Position(first->second), " (",
                                       LearnerSourceTarget(*source), ")"));
      return;
    }
    sources->push_back(*std::move(source));
  });
}

}  // namespace aggregator
