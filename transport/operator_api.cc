#include "transport/operator_api.h"

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/names.h"

namespace kiln {
namespace {

constexpr char kPrefix[] = "/v1/";

std::string JsonError(const std::string& m) { return JsonErrorBody(m); }

}  // namespace

OperatorRoute ParseOperatorRoute(const std::string& method, const std::string& path) {
  OperatorRoute r;
  const std::string prefix = "/v1/domains/";
  if (path.rfind(prefix, 0) != 0) return {404, "no such endpoint: " + path.substr(0, 100), "", ""};
  std::string rest = path.substr(prefix.size());
  std::string domain = rest, tail;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    domain = rest.substr(0, slash);
    tail = rest.substr(slash);
  }
  if (!ValidateName(domain, "domain").ok()) return {404, "no such domain", "", ""};
  if (tail.empty() || tail == "/") {
    if (method != "GET") return {405, "use GET for " + prefix + "<domain>", "", ""};
    return {0, "", "domain_status", domain};
  }
  if (tail == "/apply") {
    if (method != "POST") return {405, "use POST for " + prefix + "<domain>/apply", "", ""};
    return {0, "", "apply", domain};
  }
  return {404, "no such endpoint: " + path.substr(0, 100), "", ""};
}

OperatorApi::OperatorApi(const Config& config, ToolBackend& backend)
    : backend_(backend), auth_(config, /*check_host=*/false) {
  for (const auto& [name, d] : config.domains) domains_.insert(name);
}

void OperatorApi::Register(HttpServer& server) {
  auto route = [this](const HttpRequest& request, std::shared_ptr<HttpResponder> responder) {
    Handle(request, std::move(responder));
  };
  server.AddRoute("", kPrefix, route, 64 * 1024);
}

void OperatorApi::Handle(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) {
  AuthDecision auth = auth_.Authenticate(request.Header("authorization").value_or(""));
  if (!auth.ok())
    return responder->Reply(auth.status, "application/json", JsonError(auth.message),
                            {{"WWW-Authenticate", auth.www_authenticate}});
  if (auth.principal->kind != Principal::Kind::kOperator)
    return responder->Reply(403, "application/json",
                            JsonError("the /v1 operator API needs an operator token"));
  OperatorRoute route = ParseOperatorRoute(request.method, request.path);
  if (route.status != 0) {
    HttpHeaders headers;
    if (route.status == 405)
      headers.emplace_back("Allow", route.message.rfind("use GET", 0) == 0 ? "GET" : "POST");
    return responder->Reply(route.status, "application/json", JsonError(route.message),
                            std::move(headers));
  }
  if (!domains_.count(route.domain))
    return responder->Reply(404, "application/json", JsonError("no such domain"));
  nlohmann::json args = nlohmann::json::object();
  if (route.action == "apply" && !request.body.empty()) {
    args = nlohmann::json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded() || !args.is_object())
      return responder->Reply(400, "application/json", JsonError("the body must be a JSON object"));
  }
  ToolCall call{route.domain, route.action, std::move(args)};
  backend_.Call(std::move(call), nullptr, [responder](ToolResult r) {
    int status = 200;
    // Argument errors from the core come back as {"error": ...} without a status field.
    if (r.is_error && !r.structured.contains("status")) status = 400;
    responder->Reply(status, "application/json", DumpJson(r.structured));
  });
}

}  // namespace kiln
