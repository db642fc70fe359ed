// HTTP client: one synchronous HTTP/1.1 exchange over a fresh HTTP or HTTPS connection (Beast +
// OpenSSL). Generic building blocks shared by the registry client (registry/registry_client.cc)
// and the Kubernetes client (k8s/kube_client.cc):
//   - HttpOrigin / ParseHttpUrl: "http(s)://host[:port][/path]" into scheme, host and port;
//   - TlsContext: the client TLS settings (CA file or CA PEM data, else the system store;
//     optional client certificate and key, from files or PEM data);
//   - HttpRoundTrip: connect, TLS handshake (SNI, hostname or IP verification), write the
//     request, read the response with a body size limit; every step has its own timeout.
// Retries, authentication and error wording stay with the callers: a round trip reports a
// failure kind and a short lower-case detail (never a header or body, so never a credential).
//
// Ownership: a TlsContext is shared (shared_ptr) by the clients that use it; HttpRoundTrip only
// borrows it (and the request and response) for the call.
//
// Thread-safety: HttpOrigin and HttpClientRequest/HttpClientResponse are plain values. A TlsContext
// is immutable after Create() and may be shared by any number of threads (each round trip makes its
// own SSL object from it). HttpRoundTrip keeps no state and may run on many threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kiln {

/// Scheme, host and port of a server.
struct HttpOrigin {
  bool tls = false;
  std::string host;  // name, IPv4 or IPv6 literal (without brackets)
  std::string port;  // decimal; defaulted to 80 / 443 by ParseHttpUrl
  /// "host:port" (IPv6 literals as written, without brackets).
  std::string HostPort() const { return host + ":" + port; }
  bool operator==(const HttpOrigin& o) const {
    return tls == o.tls && host == o.host && port == o.port;
  }
  bool operator!=(const HttpOrigin& o) const { return !(*this == o); }
};

/// Parses "http(s)://host[:port][/path...][?query]" into *origin; *rest gets the path and query
/// ("" when none). Returns false (outputs unspecified) for another scheme, userinfo ("user@"),
/// an empty host or a bad port.
bool ParseHttpUrl(const std::string& url, HttpOrigin* origin, std::string* rest);

/// Client TLS settings. At most one of ca_file / ca_pem (neither: the system default store);
/// client certificate and key are optional, but come together (file or PEM each).
struct TlsOptions {
  std::optional<std::string> ca_file;
  std::optional<std::string> ca_pem;
  std::optional<std::string> client_cert_file;
  std::optional<std::string> client_cert_pem;
  std::optional<std::string> client_key_file;
  std::optional<std::string> client_key_pem;  // secret: never appears in a message
};

/// An OpenSSL client context built from TlsOptions; verifies the peer always.
class TlsContext {
 public:
  /// Builds the context. FailedPrecondition "cannot load CA file <path>: <reason>",
  /// "cannot load CA data: <reason>", "cannot load client certificate ...", "cannot load client
  /// key ..." (never the key itself), "client certificate and key must be given together".
  static Status Create(const TlsOptions& opts, std::shared_ptr<const TlsContext>* out);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  /// The boost::asio::ssl::context (opaque here so this header stays light).
  void* native() const { return ctx_; }

 private:
  TlsContext() = default;
  void* ctx_ = nullptr;  // boost::asio::ssl::context*, owned
};

struct HttpClientRequest {
  std::string method = "GET";                                // GET, HEAD, PUT, POST, PATCH, DELETE
  std::string target = "/";                                  // path and query
  std::vector<std::pair<std::string, std::string>> headers;  // Host and User-Agent are added
  std::string body;             // sent with Content-Length when non-empty or for PUT/POST/PATCH
  size_t body_limit = 1 << 20;  // largest response body accepted
};

struct HttpClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names; last value wins
  std::string body;
  /// The header's value, "" when absent; name in lower case.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

enum class HttpFailure {
  kNone,       // a response was read (any status)
  kConnect,    // name resolution or TCP connect failed / timed out
  kTls,        // TLS itself failed (certificate verification, protocol); not worth retrying
  kIo,         // handshake, write or read failed / timed out after connecting (reset, EOF)
  kBodyLimit,  // the response body exceeds HttpClientRequest::body_limit
};

struct HttpResult {
  HttpFailure failure = HttpFailure::kNone;
  std::string detail;  // lower-case reason, e.g. "connection refused", "certificate verify failed"
  bool ok() const { return failure == HttpFailure::kNone; }
};

/// One exchange over a new connection to `origin`. `tls` is required for an https origin
/// (kTls "TLS is not configured" without it) and ignored otherwise. `timeout` bounds each step
/// (connect, handshake, write, read) separately. *response is reset first. Never throws for
/// network problems; an unknown method yields kIo "unknown method".
HttpResult HttpRoundTrip(const HttpOrigin& origin, const TlsContext* tls,
                         const HttpClientRequest& req, std::chrono::milliseconds timeout,
                         HttpClientResponse* response);

/// The Status of a failed round trip (x.failure != kNone), shared by the registry and Kubernetes
/// clients: Unavailable "<where> unreachable|connection failed: <detail>" for kConnect/kIo
/// (*retryable = true), FailedPrecondition "<where> TLS handshake failed: <detail>" for kTls
/// and ResourceExhausted "<where>: response to <path> exceeds <limit> bytes" for kBodyLimit.
Status HttpFailureStatus(const HttpResult& x, const std::string& where, const std::string& path,
                         size_t body_limit, bool* retryable);

/// Blocks the calling thread before retry number `attempt` (1 = the first retry):
/// base * 2^(attempt-1) (exponent capped at 10) plus a random jitter of up to half that.
void SleepBeforeRetry(std::chrono::milliseconds base, int attempt);

/// Percent-encodes everything but ALPHA / DIGIT / "-" / "_" / "." / "~".
std::string UrlEncode(const std::string& s);

}  // namespace kiln
