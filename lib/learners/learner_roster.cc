#include "lib/learners/learner_roster.h"

namespace aggregator {

const char* LearnerStateName(LearnerState state) {
  switch (state) {
    case LearnerState::kConnecting:
      return "connecting";
    case LearnerState::kReady:
      return "ready";
    case LearnerState::kFailed:
      return "failed";
    case LearnerState::kRemoved:
      return "removed";
  }
  return "unknown";
}

}  // namespace aggregator
