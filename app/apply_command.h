// `kiln apply`: the loop engine's backstop before the judge measures. Asks the running kiln
// (POST /v1/domains/<d>/apply with the operator token) to make sure the domain's latest
// successful build is deployed, waits for the answer, and maps it to an exit code:
// 0 deployed (or already was), 2 nothing built yet, 1 failure (with the reason).
// Thread-safety: single-threaded CLI code.
#pragma once

#include <map>
#include <string>

namespace kiln {

struct ApplyOutcome {
  int exit_code = 1;
  std::string message;  // one line for stderr
};

/// Pure: interprets the operator API's answer (HTTP status and body).
ApplyOutcome InterpretApplyResponse(int http_status, const std::string& body);

/// Runs the command with parsed flags (server, domain, candidate?, timeout?, token-file?,
/// ca-file?); the token comes from $KILN_TOKEN or --token-file. Prints the JSON answer on
/// stdout and a summary line on stderr; returns the exit code.
int ApplyCommand(const std::map<std::string, std::string>& flags);

}  // namespace kiln
