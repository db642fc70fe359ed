// KubeConfig: where the Kubernetes API server is and how kiln authenticates to it, loaded either
// from the in-cluster service account (KUBERNETES_SERVICE_HOST/PORT and the files under
// /var/run/secrets/kubernetes.io/serviceaccount) or from a kubeconfig file (YAML, yaml-cpp).
// TokenSource: the bearer token, fixed or read from a file that is re-read when it changes and
// on demand after a 401 (projected service-account tokens rotate).
//
// Refused with a clear message: insecure-skip-tls-verify, exec and auth-provider credential
// plugins, basic auth (username/password), plain-http servers. Credentials (token, client key)
// never appear in a Status message or a log line; file paths may.
//
// Ownership: a KubeConfig shares its TokenSource (shared_ptr) with the KubeClient built from it.
//
// Thread-safety: the loaders are pure functions of their inputs and the files they read.
// KubeConfig is a plain value. TokenSource is thread-safe (its cache is under a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/base64.h"  // DecodeBase64 (was declared here)
#include "common/status.h"
#include "net/http_client.h"

namespace kiln {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The bearer token kiln presents. Either a fixed value or a file that is re-read whenever its
/// identity (device, inode, size, mtime) changes, and when Refresh() is called after a 401.
class TokenSource {
 public:
  /// A fixed token (kubeconfig `token`).
  static std::shared_ptr<TokenSource> Fixed(std::string token);
  /// A token file (in-cluster `token`, kubeconfig `tokenFile`); read lazily.
  static std::shared_ptr<TokenSource> File(std::string path);

  TokenSource(const TokenSource&) = delete;
  TokenSource& operator=(const TokenSource&) = delete;

  /// The current token (surrounding whitespace trimmed). FailedPrecondition "cannot read token
  /// file <path>" or "token file <path> is empty".
  Status Get(std::string* token);
  /// Forgets the cached file contents so the next Get() reads the file again. Returns true when
  /// the token is file-backed (a retry may help), false for a fixed token.
  bool Refresh();
  /// "token file <path>" or "token from <origin>" — for messages; never the token.
  std::string Describe() const;

 private:
  TokenSource() = default;
  std::string fixed_;
  std::string path_;    // "" for a fixed token
  std::string origin_;  // where a fixed token came from (for Describe)
  std::mutex mu_;
  std::string cached_;                     // guarded by mu_
  bool have_ = false;                      // guarded by mu_
  uint64_t dev_ = 0, ino_ = 0, size_ = 0;  // guarded by mu_
  int64_t mtime_ns_ = -1;                  // guarded by mu_
};

struct KubeConfig {
  std::string server;                  // "https://host:port"
  TlsOptions tls;                      // CA (file or data) and optional client certificate + key
  std::shared_ptr<TokenSource> token;  // null when authenticating by client certificate only
  std::string namespace_;              // default namespace ("" when none is given)
  std::string source;                  // "in-cluster service account" or "kubeconfig <path> ..."
};

/// Where in-cluster settings come from; FromEnvironment() reads the real process environment.
struct InClusterSource {
  std::string service_host;  // KUBERNETES_SERVICE_HOST
  std::string service_port;  // KUBERNETES_SERVICE_PORT
  std::string sa_dir = kServiceAccountDir;
  static InClusterSource FromEnvironment(const std::string& sa_dir = kServiceAccountDir);
};

/// In-cluster config: server https://<host>:<port> (IPv6 bracketed), CA <sa_dir>/ca.crt, token
/// file <sa_dir>/token, namespace from <sa_dir>/namespace when present.
/// FailedPrecondition "not running in a Kubernetes cluster: KUBERNETES_SERVICE_HOST and
/// KUBERNETES_SERVICE_PORT are not set" or "... cannot read <sa_dir>/token".
Status LoadInClusterConfig(const InClusterSource& src, KubeConfig* out);

/// Kubeconfig: current-context (or `context` when not empty) -> context -> cluster + user.
/// Relative file paths are resolved against the kubeconfig's directory. InvalidArgument
/// "kubeconfig <path>: <what is wrong>" for every problem (missing context/cluster/user, no
/// server, unsupported or refused settings); FailedPrecondition when the file cannot be read.
Status LoadKubeconfig(const std::string& path, const std::string& context, KubeConfig* out);

/// Parses kubeconfig text (for tests); `path` is used in messages and `base_dir` to resolve
/// relative paths.
Status ParseKubeconfig(const std::string& text, const std::string& path,
                       const std::string& base_dir, const std::string& context, KubeConfig* out);

}  // namespace kiln
