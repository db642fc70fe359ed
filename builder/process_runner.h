// ProcessRunner: runs one subprocess (buildah, git, go, ...) to completion with a bounded,
// merged output capture, a timeout and cancellation, and kills its whole process group when
// it ends. An interface so tests can inject faults; PosixProcessRunner is the real one.
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

#include "common/status.h"
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
/// descriptors but 0/1/2. SIGPIPE is blocked in the calling thread for the duration of Run, so
/// a child that closes its stdin early cannot kill kiln.
class PosixProcessRunner : public ProcessRunner {
 public:
  ProcessResult Run(const ProcessSpec& spec, const std::function<void(std::string_view)>& on_output,
                    const CancelToken* cancel) override;
};

/// Returns the real runner.
std::unique_ptr<ProcessRunner> MakePosixProcessRunner();

/// Keeps the head (25%) and tail (75%) of a byte stream within a budget. Not thread-safe.
class BoundedOutput {
 public:
  explicit BoundedOutput(size_t max_bytes);
  /// Adds bytes; never fails (excess bytes are counted, then dropped).
  void Append(std::string_view chunk);
  /// head + "\n[... N bytes elided ...]\n" + tail, or everything if nothing was elided.
  std::string Take();

 private:
  const size_t head_max_;
  const size_t tail_max_;
  std::string head_;
  std::string tail_;  // may hold up to 2*tail_max_ before trimming, to amortize erases
  size_t elided_ = 0;
};

}  // namespace kiln
