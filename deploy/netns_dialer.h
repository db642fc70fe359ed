// NetnsDialer: opens TCP sockets inside another process's network namespace (a candidate's
// loopback-only sandbox network). One dedicated thread per dialer setns()es into
// /proc/<pid>/ns/net once and then serves socket() requests; a socket stays in the namespace it
// was created in, so the caller may connect and use it from any thread. Holding the namespace
// fd keeps the namespace object alive, not the candidate's processes.
//
// Ownership: the caller owns returned descriptors. Thread-safety: thread-safe; shared by the
// forwarder's I/O thread and the deploy thread (hold it in a shared_ptr). Close() stops the
// thread; later calls fail with Unavailable.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "deploy/task_thread.h"

namespace kiln {

class NetnsDialer {
 public:
  /// Joins the network namespace of `pid`. NotFound when the process is gone; Internal when
  /// setns() fails.
  static Status Open(pid_t pid, std::shared_ptr<NetnsDialer>* out);
  ~NetnsDialer();
  NetnsDialer(const NetnsDialer&) = delete;
  NetnsDialer& operator=(const NetnsDialer&) = delete;

  /// A new non-blocking, close-on-exec IPv4 TCP socket in the namespace. Unavailable after
  /// Close(); Internal when socket() fails.
  Status Socket(int* fd);

  /// Socket() + connect to 127.0.0.1:port in the namespace, waiting at most `timeout`.
  /// The returned descriptor is non-blocking. Unavailable when refused or timed out.
  Status Connect(int port, std::chrono::milliseconds timeout, int* fd);

  /// Stops the thread. Idempotent.
  void Close();

  /// Count of relayed connections using this namespace (maintained by the forwarder), so the
  /// deployer can let them drain before it stops the candidate.
  void AddConnections(int delta) { connections_ += delta; }
  int connections() const { return connections_.load(); }

 private:
  NetnsDialer() = default;
  std::atomic<int> connections_{0};
  TaskThread thread_;
};

/// One HTTP/1.0 GET of `path` on a connected socket `fd` (non-blocking); sets *status to the
/// response's status code. Unavailable on a timeout, a closed connection or a malformed reply.
Status HttpGetStatus(int fd, const std::string& path, std::chrono::milliseconds timeout,
                     int* status);

}  // namespace kiln
