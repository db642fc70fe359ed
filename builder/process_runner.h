// ProcessRunner: runs one subprocess (buildah, git, go, ...) to completion with a bounded,
// merged output capture, a timeout and cancellation, and kills its whole process group when
// it ends. An interface so tests can inject faults (FakeProcessRunner in
// builder/fake_process_runner.h); PosixProcessRunner is the real one, a thin policy layer (PATH
// lookup, the 25/75 capture, 500 ms TERM grace) over SupervisedProcess
// (common/process_supervisor.h), which owns the poll/kill/reap mechanics.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/process_supervisor.h"  // BoundedOutput (the capture's shape)
#include "common/status.h"
#include "common/subprocess.h"  // ChildConfinement
#include "core/cancel_token.h"

namespace kiln {

struct ProcessSpec {
  /// argv[0] is resolved via PATH if it has no '/'. PATH is taken from `env` when `env` is set
  /// and has one, else from kiln's environment, else "/usr/local/bin:/usr/bin:/bin".
  std::vector<std::string> argv;
  /// nullopt: inherit kiln's environment (only for trusted tools); otherwise EXACTLY this env.
  std::optional<std::map<std::string, std::string>> env;
  /// Empty: inherit kiln's working directory.
  std::string cwd;
  /// nullopt: stdin is /dev/null.
  std::optional<std::string> stdin_data;
  /// 0: none. On expiry the whole process group gets SIGTERM, then SIGKILL 500 ms later.
  std::chrono::milliseconds timeout{0};
  /// Output kept in ProcessResult::output: the first 25% and the last 75% of this budget, with a
  /// "[... N bytes elided ...]" line between them when more was produced.
  size_t max_output_bytes = 4 << 20;
  /// Issue 18: namespace, mounts, limits and user switch set up by the forked child itself
  /// before exec (common/subprocess.h); nullopt: none.
  std::optional<ChildConfinement> confine;
};

struct ProcessResult {
  /// Exit status; 128+signal when killed by a signal; 127 when the binary was not found or could
  /// not be executed; -1 when nothing was started.
  int exit_code = -1;
  bool timed_out = false;
  bool cancelled = false;
  /// stdout and stderr merged in the order they were written, bounded (see ProcessSpec).
  std::string output;
  std::chrono::milliseconds elapsed{0};
  /// Not ok if nothing ran: NotFound for a missing binary or cwd, PermissionDenied, Cancelled
  /// when the token was already cancelled, InvalidArgument for an empty argv, Internal for
  /// pipe/fork failures.
  Status start_status;
};

/// Thread-safety: implementations must allow concurrent Run() calls from many threads.
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  /// Runs `spec` to completion, blocking the calling thread (call it from a worker thread, never
  /// from an actor). `on_output` (may be empty) receives output chunks as they arrive, on the
  /// calling thread. `cancel` (may be null) is observed: once cancelled, the process group is
  /// killed (SIGTERM, then SIGKILL after 500 ms) and Run returns with cancelled=true.
  /// Any processes left in the child's process group when the child exits are SIGKILLed.
  /// Never throws; an exception from `on_output` stops further callbacks. Failures to start
  /// are reported in ProcessResult::start_status.
  virtual ProcessResult Run(const ProcessSpec& spec,
                            const std::function<void(std::string_view)>& on_output,
                            const CancelToken* cancel) = 0;
};

/// fork/exec based runner. Stateless: one instance may be shared by all threads. The child
/// gets its own process group, default signal dispositions, an empty signal mask, and no file
/// descriptors but 0/1/2. stdin_data goes through a socket written with MSG_NOSIGNAL, so a child
/// that closes its stdin early cannot kill kiln with SIGPIPE.
class PosixProcessRunner : public ProcessRunner {
 public:
  ProcessResult Run(const ProcessSpec& spec, const std::function<void(std::string_view)>& on_output,
                    const CancelToken* cancel) override;
};

/// Returns the real runner.
std::unique_ptr<ProcessRunner> MakePosixProcessRunner();

}  // namespace kiln
