#include "deploy/deployer.h"

namespace kiln {

const char* DeployStateName(DeployState s) {
  switch (s) {
    case DeployState::kInProgress: return "in_progress";
    case DeployState::kRolledOut: return "rolled_out";
    case DeployState::kFailed: return "failed";
  }
  return "failed";
}

}  // namespace kiln
