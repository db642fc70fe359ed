#include "app/apply_command.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/json_text.h"
#include "common/names.h"
#include "net/http_client.h"

namespace kiln {

ApplyOutcome InterpretApplyResponse(int http_status, const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  std::string error = j.is_object() && j.contains("error") && j["error"].is_string()
                          ? j["error"].get<std::string>()
                          : "";
  if (http_status != 200) {
    std::string why = error.empty() ? "unexpected answer" : error;
    if (http_status == 401) why = "kiln refused the token (401): " + why;
    if (http_status == 403) why = "forbidden (403): " + why;
    if (http_status == 404) why = "not found (404): " + why;
    return {1, "kiln apply: " + why + " (HTTP " + std::to_string(http_status) + ")"};
  }
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
    return {1,
            "kiln apply: " + (error.empty() ? std::string("malformed answer from kiln") : error)};
  std::string status = j["status"].get<std::string>();
  auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  if (status == "nothing_built") return {2, "kiln apply: nothing built yet: " + str("message")};
  std::string image;
  if (j.contains("image") && j["image"].is_object() && j["image"].contains("ref") &&
      j["image"]["ref"].is_string())
    image = j["image"]["ref"].get<std::string>();
  if (status == "rolled_out") {
    bool changed = j.value("changed", true);
    return {0, std::string("kiln apply: ") + (changed ? "deployed " : "already deployed ") + image +
                   " (candidate " + str("candidate") + ", build " + str("build_id") + ", deploy " +
                   str("deploy_id") + ")"};
  }
  std::string reason = str("reason"), message = str("message");
  return {1, "kiln apply: deploy " + (status.empty() ? std::string("failed") : status) +
                 (reason.empty() ? "" : ": " + reason) + (message.empty() ? "" : ": " + message) +
                 " (candidate " + str("candidate") + ", build " + str("build_id") + ")"};
}

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

int ApplyCommand(const std::map<std::string, std::string>& flags) {
  auto flag = [&](const char* n) { return flags.count(n) ? flags.at(n) : std::string(); };
  for (const auto& [k, v] : flags)
    if (k != "server" && k != "domain" && k != "candidate" && k != "timeout" && k != "token-file" &&
        k != "ca-file") {
      std::cerr << "kiln apply: unknown flag --" << k << "\n";
      return 1;
    }
  std::string server = flag("server"), domain = flag("domain"), candidate = flag("candidate");
  if (server.empty() || domain.empty()) {
    std::cerr << "kiln apply: --server URL and --domain D are required\n";
    return 1;
  }
  if (!ValidateName(domain, "domain").ok() ||
      (!candidate.empty() && !ValidateName(candidate, "candidate").ok())) {
    std::cerr << "kiln apply: invalid domain or candidate name\n";
    return 1;
  }
  int timeout_s = 600;
  if (!flag("timeout").empty()) {
    try {
      size_t used = 0;
      timeout_s = std::stoi(flag("timeout"), &used);
      if (used != flag("timeout").size() || timeout_s <= 0) throw std::invalid_argument("x");
    } catch (...) {
      std::cerr << "kiln apply: --timeout must be a positive number of seconds\n";
      return 1;
    }
  }
  std::string token;
  if (!flag("token-file").empty()) {
    std::ifstream in(flag("token-file"));
    if (!in) {
      std::cerr << "kiln apply: cannot read --token-file " << flag("token-file") << "\n";
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    token = Trim(ss.str());
  } else if (const char* t = std::getenv("KILN_TOKEN")) {
    token = Trim(t);
  }
  if (token.empty()) {
    std::cerr << "kiln apply: no operator token: set $KILN_TOKEN or pass --token-file\n";
    return 1;
  }
  HttpOrigin origin;
  std::string rest;
  if (!ParseHttpUrl(server, &origin, &rest)) {
    std::cerr << "kiln apply: --server must be an http(s)://host:port URL\n";
    return 1;
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::shared_ptr<const TlsContext> tls;
  if (origin.tls) {
    TlsOptions to;
    if (!flag("ca-file").empty()) to.ca_file = flag("ca-file");
    Status st = TlsContext::Create(to, &tls);
    if (!st.ok()) {
      std::cerr << "kiln apply: " << st.message() << "\n";
      return 1;
    }
  }
  HttpClientRequest req;
  req.method = "POST";
  req.target = rest + "/v1/domains/" + domain + "/apply";
  req.headers = {{"Authorization", "Bearer " + token},
                 {"Content-Type", "application/json"},
                 {"Accept", "application/json"}};
  nlohmann::json body = nlohmann::json::object();
  if (!candidate.empty()) body["candidate"] = candidate;
  req.body = DumpJson(body);
  HttpClientResponse resp;
  HttpResult hr = HttpRoundTrip(origin, tls.get(), req, std::chrono::seconds(timeout_s), &resp);
  if (!hr.ok()) {
    std::cerr << "kiln apply: cannot get an answer from kiln at " << origin.HostPort() << ": "
              << hr.detail << "\n";
    return 1;
  }
  ApplyOutcome out = InterpretApplyResponse(resp.status, resp.body);
  if (resp.status == 200) std::cout << resp.body << std::endl;
  std::cerr << out.message << "\n";
  return out.exit_code;
}

}  // namespace kiln
