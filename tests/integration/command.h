// Command: runs a trusted helper program (bash scripts, git, skopeo, buildah, pgrep) for the
// integration tests and captures its merged output. A thin wrapper over kiln's own
// PosixProcessRunner, so argv is never passed through a shell.
//
// Thread-safety: RunCommand may be called from any thread concurrently.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace kiln::integration {

struct CommandResult {
  int exit_code = -1;  // -1 when the program could not be started
  std::string output;  // stdout and stderr merged
  bool ok() const { return exit_code == 0; }
};

/// Runs argv (argv[0] looked up in PATH) with kiln's environment plus `extra_env`, in `cwd`
/// (empty: the current directory), killed after `timeout`. Never throws; a program that cannot
/// be started gives exit_code -1 and the reason in `output`.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& cwd = "",
                         std::chrono::seconds timeout = std::chrono::seconds(600),
                         const std::map<std::string, std::string>& extra_env = {});

/// Returns the pids (as text, one per element) of processes whose full command line matches
/// the extended regular expression `pattern` (pgrep -f), excluding this test process.
std::vector<std::string> Pgrep(const std::string& pattern);

}  // namespace kiln::integration
