// `kiln serve`: runs the core (actors) behind the HTTP transport until SIGTERM/SIGINT.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "config/config.h"

namespace kiln {

/// Blocks until a termination signal; returns the process exit code.
/// Flags: --grace SECONDS (default 30): how long running builds may finish on shutdown.
int ServeCommand(std::shared_ptr<const Config> config,
                 const std::map<std::string, std::string>& flags);

}  // namespace kiln
