#include "lib/config/config_diff.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace aggregator {
namespace {

std::string Describe(const std::optional<HostPort>& address) {
  return address.has_value() ? address->ToString() : "";
}

template <typename T>
void Changed(const char* field, const T& from, const T& to,
             std::vector<std::string>* out) {
  if (from != to) out->push_back(absl::StrCat(field, " ", from, " -> ", to));
}

void Changed(const char* field, std::chrono::milliseconds from,
             std::chrono::milliseconds to, std::vector<std::string>* out) {
  if (from != to) {
    out->push_back(
        absl::StrCat(field, " ", from.count(), "ms -> ", to.count(), "ms"));
  }
}

// "<label> +1 -0 ~1": entries added, removed, and kept (the same key) with
// other settings; or "<label> reordered".
template <typename T, typename KeyOf>
void DescribeKeyed(const char* label, const std::vector<T>& running,
                   const std::vector<T>& next, KeyOf key_of,
                   std::vector<std::string>* out) {
  auto find = [&](const std::vector<T>& in, const std::string& key) {
    return std::find_if(in.begin(), in.end(),
                        [&](const T& entry) { return key_of(entry) == key; });
  };
  int added = 0;
  int removed = 0;
  int changed = 0;
  for (const T& entry : next) {
    auto same = find(running, key_of(entry));
    if (same == running.end()) {
      ++added;
    } else if (*same != entry) {
      ++changed;
    }
  }
  for (const T& entry : running) {
    if (find(next, key_of(entry)) == next.end()) ++removed;
  }
  if (added + removed + changed > 0) {
    out->push_back(
        absl::StrCat(label, " +", added, " -", removed, " ~", changed));
  } else if (running != next) {
    out->push_back(absl::StrCat(label, " reordered"));
  }
}

// "workers ~changed +added -removed".
void DescribeWorkers(const std::vector<WorkerSpec>& running,
                     const std::vector<WorkerSpec>& next,
                     std::vector<std::string>* out) {
  auto find = [](const std::vector<WorkerSpec>& in, const std::string& name) {
    return std::find_if(in.begin(), in.end(),
                        [&](const WorkerSpec& w) { return w.name == name; });
  };
  std::vector<std::string> workers;
  for (const WorkerSpec& worker : next) {
    auto same = find(running, worker.name);
    if (same == running.end()) {
      workers.push_back("+" + worker.name);
    } else if (*same != worker) {
      workers.push_back("~" + worker.name);
    }
  }
  for (const WorkerSpec& worker : running) {
    if (find(next, worker.name) == next.end())
      workers.push_back("-" + worker.name);
  }
  if (!workers.empty()) {
    out->push_back(absl::StrCat("workers ", absl::StrJoin(workers, " ")));
  }
}

}  // namespace

absl::StatusOr<std::string> DescribeReload(const AggregatorConfig& running,
                                           const AggregatorConfig& next) {
  // Every field is named here, so one added to AggregatorConfig stops this
  // compiling until it is classed as frozen (needs a restart) or described.
  const auto& [source, listen, tls, learner_tls, allow_insecure, admin,
               learners, workers, learner_sources, service, connect,
               max_message_bytes, log, drain_timeout, metrics, unix_socket] =
      next;
  (void)source;  // where it came from, not what it says

  std::vector<std::string> frozen;
  if (running.listen != listen) {
    frozen.push_back(absl::StrCat("listen (running ", running.listen.ToString(),
                                  ", file says ", listen.ToString(), ")"));
  }
  if (running.admin.listen != admin.listen) {
    frozen.push_back(
        absl::StrCat("admin.listen (running '", Describe(running.admin.listen),
                     "', file says '", Describe(admin.listen), "')"));
  }
  // The certificates may change; whether there is TLS, or mTLS, may not.
  auto tls_mode = [](const std::optional<ServerTlsConfig>& tls) {
    return !tls ? "off" : tls->client_ca.empty() ? "TLS" : "mTLS";
  };
  if (std::string(tls_mode(running.tls)) != tls_mode(tls)) {
    frozen.push_back(absl::StrCat("tls (running ", tls_mode(running.tls),
                                  ", file says ", tls_mode(tls), ")"));
  }
  if (running.max_message_bytes != max_message_bytes) {
    frozen.push_back(absl::StrCat("max_message_bytes (running ",
                                  running.max_message_bytes, ", file says ",
                                  max_message_bytes, ")"));
  }
  if (running.metrics.listen != metrics.listen) {
    frozen.push_back(absl::StrCat(
        "metrics.listen (running '", Describe(running.metrics.listen),
        "', file says '", Describe(metrics.listen), "')"));
  }
  if (running.unix_socket != unix_socket) {
    frozen.push_back(absl::StrFormat(
        "unix_socket.mode (running \"%04o\", file says \"%04o\")",
        running.unix_socket.mode, unix_socket.mode));
  }
  if (!frozen.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reload refused: ", absl::StrJoin(frozen, ", "),
        " cannot change without a restart; the running configuration stays"));
  }

  std::vector<std::string> changes;
  if (running.tls != tls) changes.push_back("tls certificates");
  if (running.allow_insecure != allow_insecure) {
    changes.push_back(
        absl::StrCat("allow_insecure ", allow_insecure ? "true" : "false"));
  }
  // A learner kept under its id changed address or TLS.
  DescribeKeyed(
      "learners", running.learners, learners,
      [](const LearnerEndpoint& learner) { return learner.id; }, &changes);
  DescribeWorkers(running.workers, workers, &changes);
  DescribeKeyed("learner_sources", running.learner_sources, learner_sources,
                LearnerSourceKey, &changes);
  // Already applied to each of `learners` (and described there); the
  // discovered learners take it from here.
  if (!learner_sources.empty() && running.learner_tls != learner_tls) {
    changes.push_back("learner_tls");
  }
  const auto& [min_learners, call_timeout, merge, max_inflight_bytes,
               on_learner_failure, straggler] = service;
  Changed("min_learners", running.service.min_learners, min_learners, &changes);
  Changed("call_timeout", running.service.call_timeout, call_timeout, &changes);
  Changed("drain_timeout", running.drain_timeout, drain_timeout, &changes);
  if (running.service.max_inflight_bytes != max_inflight_bytes) {
    changes.push_back(absl::StrCat(
        "max_inflight_bytes ",
        max_inflight_bytes ? absl::StrCat(*max_inflight_bytes) : "auto"));
  }
  // resource_refresh is written at the top level, so it is named as such.
  ConnectConfig connect_but_refresh = running.connect;
  connect_but_refresh.resource_refresh = connect.resource_refresh;
  if (connect_but_refresh != connect) changes.push_back("connect");
  Changed("resource_refresh", running.connect.resource_refresh,
          connect.resource_refresh, &changes);
  if (running.service.on_learner_failure != on_learner_failure) {
    changes.push_back(absl::StrCat("on_learner_failure ",
                                   OnLearnerFailureName(on_learner_failure)));
  }
  if (running.service.straggler.late_after != straggler.late_after) {
    changes.push_back(
        absl::StrCat("straggler.late_after ",
                     LateAfterName(running.service.straggler.late_after),
                     " -> ", LateAfterName(straggler.late_after)));
  }
  // The rest of the section.
  StragglerConfig straggler_but_late = running.service.straggler;
  straggler_but_late.late_after = straggler.late_after;
  if (!(straggler_but_late == straggler)) changes.push_back("straggler");
  if (running.service.merge.homogeneous_keys != merge.homogeneous_keys) {
    changes.push_back("merge.homogeneous_keys");
  }
  if (running.service.merge.per_sample_keys != merge.per_sample_keys) {
    changes.push_back("merge.per_sample_keys");
  }
  const auto& [level, format] = log;
  Changed("log.level", running.log.level, level, &changes);
  // Reloadable: the next line is written in the new format.
  Changed("log.format", running.log.format, format, &changes);
  return changes.empty() ? std::string("no changes")
                         : absl::StrJoin(changes, "; ");
}

}  // namespace aggregator
