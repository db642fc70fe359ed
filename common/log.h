// Logging setup for kiln (spdlog). Call InitLogging once from main before any thread starts.
// After that, spdlog's default logger is thread-safe.
//
// Rule: no credential (token, password, auth file content) is ever passed to a log call.
#pragma once

#include <string>

namespace kiln {

/// level: "trace", "debug", "info", "warn", "error". Logs go to stderr.
void InitLogging(const std::string& level = "info");

}  // namespace kiln
