#include "lib/config/config.h"

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

}  // namespace aggregator
