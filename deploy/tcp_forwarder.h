// TcpForwarder: listens on 127.0.0.1:<port> of the host and relays each accepted connection to
// 127.0.0.1:<port> inside the network namespace of the current target (a NetnsDialer), byte for
// byte in both directions with half-close. SetTarget() switches where NEW connections go;
// established ones stay with the namespace they were opened in until either side closes. With
// no target, accepted connections are closed at once. Each relayed connection is counted on
// its target's NetnsDialer (connections()) from the moment it is accepted, so the caller can let
// the old target drain after SetTarget().
//
// Ownership: owns its io_context and one I/O thread (started by Listen()); shares the target
// dialer with the caller. Thread-safety: all methods are thread-safe. Stop() closes the listener
// and every relayed connection and joins the thread; it is idempotent and the destructor calls it.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace kiln {

class NetnsDialer;

class TcpForwarder {
 public:
  /// `port` is both the host port and the port inside the target namespaces.
  explicit TcpForwarder(int port);
  ~TcpForwarder();
  TcpForwarder(const TcpForwarder&) = delete;
  TcpForwarder& operator=(const TcpForwarder&) = delete;

  /// Binds 127.0.0.1:port and starts the I/O thread; Ok at once when already listening.
  /// Unavailable (with the OS reason) when the port cannot be bound; FailedPrecondition after
  /// Stop().
  Status Listen();
  /// New connections go to `target` (nullptr: refused).
  void SetTarget(std::shared_ptr<NetnsDialer> target);
  /// Number of relayed connections currently open (for tests and status).
  int open_connections() const;
  void Stop();

  struct Impl;

 private:
  const int port_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
