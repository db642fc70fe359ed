// Parsing and validation of kiln's JSON config into the structs of config/config.h, and the
// `kiln check-config` command. Validation collects every problem it finds (not just the
// first) as `path: reason`, where path names the offending key, e.g.
// `domains.epp.build.timeout_s` or `domains.epp.build.layered.outputs[0].to`.
//
// Pure functions apart from the file checks (auth_file, ca_file, kubeconfig must be readable
// regular files) and LoadConfigFile's read. No shared state; thread-safe.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"

namespace kiln {

/// One thing wrong with a config. `path` is "" for problems with the whole document
/// (unreadable file, malformed JSON, not an object).
struct ConfigProblem {
  std::string path;
  std::string reason;
};

/// "path: reason", or just "reason" when path is empty.
std::string FormatConfigProblem(const ConfigProblem& problem);

/// Parses JSON text. Returns all problems found (empty == valid). `out` is filled as far as
/// possible. Relative file paths in the config (state_dir, auth_file, ca_file, kubeconfig) are
/// kept as written and checked relative to the current directory.
std::vector<ConfigProblem> ParseConfig(const std::string& json_text, Config* out);

/// Like ParseConfig, but relative file paths are resolved against `base_dir` (made absolute)
/// before they are checked and stored in `out`. Returns all problems found.
std::vector<ConfigProblem> ParseConfigRelativeTo(const std::string& json_text,
                                                 const std::string& base_dir, Config* out);

/// Reads the file, parses, validates. Relative paths in the config resolve against the
/// directory of the config file. A read failure is one problem with path "".
std::vector<ConfigProblem> LoadConfigFile(const std::string& path, Config* out);

/// Things that are valid but worth an operator's attention (e.g. a domain whose build steps
/// may reach the network). Same `path: reason` shape; never fails.
std::vector<ConfigProblem> CollectConfigWarnings(const Config& config);

/// Runs `kiln check-config`: validates the file, then checks this host for safe builds
/// (config/host_checks.h: build user, subuid/subgid ranges, user namespaces, credential file
/// permissions), and prints each problem as "path: reason" to `err` (a problem with an
/// empty path is prefixed with the config file path instead), each warning as
/// "WARNING: path: reason" to `out`, and "config OK: N domains, M registries" to `out` when
/// valid. Returns the process exit code: 0 valid, 1 invalid.
int CheckConfigCommand(const std::string& path, std::ostream& out, std::ostream& err);

/// Issue 20: one `scheduler.workers` entry, "host:port" or "[IPv6]:port", into host (without
/// brackets) and port. Returns "" when valid, else the reason ("is not host:port", ...).
std::string ParseWorkerAddress(const std::string& entry, std::string* host, int* port);

}  // namespace kiln
