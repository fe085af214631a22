// OrchestratorSource: learner_sources[].orchestrator, DI-orchestrator's
// replica API as DI-engine's LearnerAggregator used it:
//   GET  {url}/v1alpha1/replicas?namespace=NS&aggregator=NAME
//        -> {"success": true, "code": 0, "message": "...", "data":
//            {"namespace", "coordinator", "collectors": [...],
//             "learners": ["<pod>.<namespace>:<port>", ...]}}
//   POST {url}/v1alpha1/replicas/failed
//        {"namespace": NS, "coordinator": NAME, "collectors": [],
//         "learners": [pod names]}
// A reply that is not HTTP 200, not JSON, not of that shape, or says
// "success": false is an error naming what was wrong.
//
// Thread-safety: one call at a time (the loop's thread for this source).
#ifndef LIB_DISCOVERY_ORCHESTRATOR_SOURCE_H_
#define LIB_DISCOVERY_ORCHESTRATOR_SOURCE_H_

#include <string>
#include <vector>

#include "lib/config/config.h"
#include "lib/discovery/learner_source.h"

namespace aggregator {

class OrchestratorSource : public LearnerSource {
 public:
  explicit OrchestratorSource(OrchestratorSourceConfig config);

  absl::StatusOr<std::vector<HostPort>> Fetch(
      const RequestLimits& limits) override;
  // The learners by pod name (PodName), as the orchestrator deletes pods.
  absl::Status ReportFailed(const std::vector<HostPort>& learners,
                            const RequestLimits& limits) override;

 private:
  const OrchestratorSourceConfig config_;
};

// The pod of a learner address "<pod>.<namespace>:<port>": its host without
// ".<namespace>" (what DI-orchestrator's failed-replica API looks pods up
// by); a host of another form is sent as it is.
std::string PodName(const HostPort& learner, const std::string& pod_namespace);

// The learners of a GET replicas reply (HTTP `status`, `body`), or why the
// reply is not one (what Fetch names after "GET <url>: "). A reply nested
// deeper than the API's few levels is refused while it is parsed. Fetch's
// parser, on its own for the fuzz target (tests/fuzz).
absl::StatusOr<std::vector<HostPort>> ParseReplicasReply(
    int status, absl::string_view body);

}  // namespace aggregator

#endif  // LIB_DISCOVERY_ORCHESTRATOR_SOURCE_H_
