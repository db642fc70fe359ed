// OperatorApi: kiln's /v1 operator endpoints, used by `kiln apply` and operators' scripts.
//
//   GET  /v1/domains/<domain>          -> 200 {domain, deploy_type, candidates, deployed,
//                                              deploy_in_progress}
//   POST /v1/domains/<domain>/apply    body {"candidate"?: name} (may be empty)
//                                      -> 200 {status: rolled_out | failed | nothing_built,
//                                              deploy_id, build_id, candidate, image, reason,
//                                              message, changed, elapsed_ms}
//                                         (answers when the rollout has finished)
// Errors: 401 without a valid token, 403 for a domain token (operator token required), 404
// for an unknown domain or path, 405 for a wrong method, 400 for a malformed body. Bodies are
// JSON {"error": message}. A token is never echoed.
//
// Ownership: keeps a reference to the ToolBackend, which must outlive the server; copies what
// it needs from the Config. Thread-safety: Register before the server starts; handlers run on
// the server's io threads and never block (the backend answers through callbacks).
#pragma once

#include <memory>
#include <set>
#include <string>

#include "config/config.h"
#include "core/tool_backend.h"
#include "transport/auth.h"
#include "transport/http_server.h"

namespace kiln {

/// Pure: what a /v1 request asks for. status 0 when valid.
struct OperatorRoute {
  int status = 0;  // else the HTTP status to answer (404, 405)
  std::string message;
  std::string action;  // "domain_status" | "apply"
  std::string domain;
};
OperatorRoute ParseOperatorRoute(const std::string& method, const std::string& path);

class OperatorApi {
 public:
  OperatorApi(const Config& config, ToolBackend& backend);
  void Register(HttpServer& server);
  void Handle(const HttpRequest& request, std::shared_ptr<HttpResponder> responder);

 private:
  ToolBackend& backend_;
  Authenticator auth_;
  std::set<std::string> domains_;
};

}  // namespace kiln
