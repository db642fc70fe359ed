#include "actors/protocol.h"

#include <caf/actor_system_config.hpp>

namespace kiln {

void AddMessageTypes(caf::actor_system_config& cfg) {
  cfg.add_message_type<JobRequest>("kiln::JobRequest");
  cfg.add_message_type<SchedulerStats>("kiln::SchedulerStats");
  cfg.add_message_type<PushedRef>("kiln::PushedRef");  // also std::vector<kiln::PushedRef>
}

}  // namespace kiln
