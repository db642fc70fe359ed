#include "builder/process_runner.h"

#include <cstdlib>

#include "common/process_supervisor.h"
#include "common/subprocess.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTermGrace{500};  // SIGTERM -> SIGKILL

std::string SearchPath(const ProcessSpec& spec) {
  std::string path_var;
  bool have_path = false;
  if (spec.env) {
    auto it = spec.env->find("PATH");
    if (it != spec.env->end()) path_var = it->second, have_path = true;
  }
  if (!have_path) {
    const char* p = ::getenv("PATH");
    path_var = p ? p : "/usr/local/bin:/usr/bin:/bin";
  }
  return FindExecutable(spec.argv[0], path_var);
}

}  // namespace

ProcessResult PosixProcessRunner::Run(const ProcessSpec& spec,
                                      const std::function<void(std::string_view)>& on_output,
                                      const CancelToken* cancel) {
  const Clock::time_point start = Clock::now();
  ProcessResult result;
  auto finish = [&](Status s) {
    result.start_status = std::move(s);
    result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    return result;
  };
  if (spec.argv.empty() || spec.argv[0].empty())
    return finish(Status::InvalidArgument("empty argv"));
  if (cancel != nullptr && cancel->cancelled()) {
    result.cancelled = true;
    return finish(Status::Cancelled("cancelled before start"));
  }

  std::string path = SearchPath(spec);
  if (path.empty()) {
    result.exit_code = 127;
    return finish(Status::NotFound(spec.argv[0] + ": command not found"));
  }
  SpawnSpec child;
  child.path = path;
  child.argv = spec.argv;
  if (spec.env) {
    child.env.emplace();
    for (const auto& [k, v] : *spec.env) {
      if (k.empty() || k.find('=') != std::string::npos)
        return finish(Status::InvalidArgument("bad environment variable name"));
      child.env->push_back(k + "=" + v);
    }
  }
  child.cwd = spec.cwd;
  child.confine = spec.confine;

  SupervisedSpec supervised;
  supervised.spawn = std::move(child);
  if (spec.stdin_data) supervised.stdin_bytes = *spec.stdin_data;
  supervised.merge_stderr = true;
  supervised.out.sink = on_output;
  supervised.out.capture_bytes = spec.max_output_bytes;
  supervised.out.keep = OutputSpec::Keep::kHeadAndTail;
  if (cancel != nullptr) {
    supervised.cancel_fd = cancel->fd();
    supervised.cancel_requested = [cancel] { return cancel->cancelled(); };
  }
  if (spec.timeout.count() > 0) supervised.deadline = start + spec.timeout;
  supervised.kill_grace = kTermGrace;
  ProcessOutcome outcome;
  Status started = RunProcess(std::move(supervised), &outcome);
  if (!started.ok()) {
    result.exit_code = 127;
    return finish(started);
  }
  result.exit_code = outcome.exit_code;
  result.timed_out = outcome.timed_out;
  result.cancelled = outcome.cancelled;
  result.output = std::move(outcome.out);
  return finish(Status::Ok());
}

std::unique_ptr<ProcessRunner> MakePosixProcessRunner() {
  return std::make_unique<PosixProcessRunner>();
}

}  // namespace kiln
