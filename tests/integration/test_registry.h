// TestRegistry: a real docker-registry (htpasswd auth, plain HTTP on 127.0.0.1) for the
// integration tests, started and stopped through scripts/registry.sh, with kiln's base images
// pushed into it through scripts/base_images.sh.
//
// Ownership: the registry process belongs to this object between Start and Stop; its data
// lives in the directory given to Start (deleted by the caller). Thread-safety: not
// thread-safe for Start/Stop; the const accessors and ManifestDigest may be called from any
// thread once started.
#pragma once

#include <string>

#include "common/status.h"

namespace kiln::integration {

class TestRegistry {
 public:
  TestRegistry(std::string source_dir, std::string dir, int port);
  ~TestRegistry();

  /// Starts the registry (a no-op when it already runs from this directory). Returns
  /// Unavailable with the script's output when it cannot start (port taken, binary missing).
  Status Start();
  /// Stops it; the data directory is kept, so Start brings the same images back.
  /// Returns Internal when the script fails.
  Status Stop();
  /// Builds (or reuses) and pushes kiln/busybox:1 and kiln/go-builder:1.19. Returns Internal
  /// with the script's output tail on failure.
  Status PushBaseImages();

  /// The digest ("sha256:...") the registry serves for `reference` ("repo@sha256:..." or
  /// "repo:tag"), read with skopeo and the registry's auth file. Returns NotFound when the
  /// registry does not have it (or cannot be reached).
  Status ManifestDigest(const std::string& reference, std::string* digest) const;

  std::string host() const;  // "127.0.0.1:PORT"
  std::string url() const;   // "http://127.0.0.1:PORT"
  std::string auth_file() const { return dir_ + "/auth.json"; }
  /// The registry password (for asserting it never leaks into results or logs).
  std::string password() const;
  int port() const { return port_; }

 private:
  std::string source_dir_;
  std::string dir_;
  int port_;
  bool started_ = false;
};

}  // namespace kiln::integration
