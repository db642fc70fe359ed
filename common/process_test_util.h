// Test helpers about processes that are not the test's children (grandchildren of a supervised
// child): whether one is still alive. Header-only; for tests. Thread-safe (reads /proc only).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace kiln {

/// True while `pid` exists (a zombie counts as existing).
inline bool ProcessAlive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

/// Waits up to `limit` for `pid` to disappear; a zombie ("pid (comm) Z ...", waiting for a
/// reaper that is not us) counts as gone: it can no longer run.
inline bool GoneWithin(pid_t pid, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (!ProcessAlive(pid)) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string content((std::istreambuf_iterator<char>(stat)), {});
    auto close = content.rfind(')');
    if (close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z')
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace kiln
