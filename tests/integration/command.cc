#include "tests/integration/command.h"

#include <unistd.h>

#include <sstream>

#include "builder/process_runner.h"

extern char** environ;

namespace kiln::integration {

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& cwd,
                         std::chrono::seconds timeout,
                         const std::map<std::string, std::string>& extra_env) {
  static const std::unique_ptr<ProcessRunner> runner = MakePosixProcessRunner();
  ProcessSpec spec;
  spec.argv = argv;
  spec.cwd = cwd;
  spec.timeout = timeout;
  if (!extra_env.empty()) {
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : extra_env) env[k] = v;
    spec.env = env;
  }
  ProcessResult r = runner->Run(spec, nullptr, nullptr);
  CommandResult out;
  if (!r.start_status.ok()) {
    out.output = r.start_status.ToString();
    return out;
  }
  out.exit_code = r.timed_out ? 124 : r.exit_code;
  out.output = r.output;
  return out;
}

std::vector<std::string> Pgrep(const std::string& pattern) {
  CommandResult r = RunCommand({"pgrep", "-f", pattern}, "", std::chrono::seconds(10));
  std::vector<std::string> pids;
  std::istringstream in(r.output);
  std::string line;
  std::string self = std::to_string(::getpid());
  while (std::getline(in, line))
    if (!line.empty() && line != self) pids.push_back(line);
  return pids;
}

}  // namespace kiln::integration
