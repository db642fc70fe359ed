#include "transport/git_http.h"

#include <spdlog/spdlog.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "common/json_text.h"
#include "common/names.h"
#include "common/process_supervisor.h"
#include "common/sha256.h"
#include "workspace/git_repo.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRoutePrefix = "/git/";
constexpr const char* kChildPath = "/usr/local/bin:/usr/bin:/bin";
constexpr size_t kMaxCgiHeaderBytes = 64 * 1024;
constexpr size_t kMaxStderrBytes = 16 * 1024;
constexpr std::chrono::seconds kKillGrace{5};
constexpr const char* kNotFound = "repository not found";

std::string JsonError(const std::string& message) { return JsonErrorBody(message); }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// A header value safe to hand to the CGI: bounded, printable, from a small character set.
bool SafeHeaderValue(const std::string& v, const char* extra) {
  if (v.empty() || v.size() > 256) return false;
  for (unsigned char c : v) {
    if (!std::isalnum(c) && !std::strchr(extra, c)) return false;
  }
  return true;
}

GitRouteDecision Refuse(int status, std::string message) {
  GitRouteDecision d;
  d.status = status;
  d.message = std::move(message);
  return d;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Pure parts

GitRouteDecision ParseGitHttpRoute(const std::string& method, const std::string& path,
                                   const std::string& query) {
  const std::string prefix = kRoutePrefix;
  if (path.compare(0, prefix.size(), prefix) != 0) return Refuse(404, kNotFound);
  std::string rest = path.substr(prefix.size());
  // Domain names never need escapes, so none are decoded: "%2e%2e" stays a refusal.
  if (rest.find_first_of("%\\") != std::string::npos) return Refuse(404, kNotFound);
  size_t end = rest.find(".git/");
  if (end == std::string::npos) return Refuse(404, kNotFound);
  GitRouteDecision d;
  d.route.domain = rest.substr(0, end);
  if (!ValidateName(d.route.domain, "domain").ok()) return Refuse(404, kNotFound);
  std::string suffix = rest.substr(end + 5);
  if (suffix == "info/refs") {
    if (method != "GET") return Refuse(405, "method not allowed");
    d.route.advertisement = true;
    if (query == "service=git-upload-pack") {
      d.route.service = GitHttpRoute::Service::kUploadPack;
    } else if (query == "service=git-receive-pack") {
      d.route.service = GitHttpRoute::Service::kReceivePack;
    } else {
      return Refuse(400,
                    "only git smart HTTP is served: expected ?service=git-upload-pack or "
                    "?service=git-receive-pack");
    }
    d.route.path_info = "/repo.git/info/refs";
    return d;
  }
  if (suffix == "git-upload-pack" || suffix == "git-receive-pack") {
    if (method != "POST") return Refuse(405, "method not allowed");
    d.route.service = suffix == "git-upload-pack" ? GitHttpRoute::Service::kUploadPack
                                                  : GitHttpRoute::Service::kReceivePack;
    d.route.path_info = "/repo.git/" + suffix;
    return d;
  }
  return Refuse(404, kNotFound);
}

std::vector<std::string> BuildGitCgiEnv(const GitHttpRoute& route, const HttpRequest& request,
                                        const GitCgiSettings& settings) {
  const char* service =
      route.service == GitHttpRoute::Service::kUploadPack ? "git-upload-pack" : "git-receive-pack";
  std::vector<std::string> env = {
      std::string("PATH=") + kChildPath,
      "HOME=" + settings.home,
      "LANG=C",
      "LC_ALL=C",
      "GIT_CONFIG_NOSYSTEM=1",
      "GIT_CONFIG_GLOBAL=/dev/null",
      "GIT_ATTR_NOSYSTEM=1",
      "GIT_TERMINAL_PROMPT=0",
      "GATEWAY_INTERFACE=CGI/1.1",
      "SERVER_PROTOCOL=HTTP/1.1",
      "SERVER_SOFTWARE=kiln",
      "REQUEST_METHOD=" + std::string(route.advertisement ? "GET" : "POST"),
      "GIT_PROJECT_ROOT=" + settings.project_root,
      "PATH_INFO=" + route.path_info,
      "QUERY_STRING=" + (route.advertisement ? std::string("service=") + service : std::string()),
      "GIT_HTTP_EXPORT_ALL=1",
      "REMOTE_USER=" + route.domain,
      // HttpRequest carries no peer address; git only uses it in reflog identities.
      "REMOTE_ADDR=kiln",
  };
  if (!route.advertisement) {
    env.push_back("CONTENT_LENGTH=" + std::to_string(request.body.size()));
    std::string type = request.Header("content-type").value_or("");
    if (SafeHeaderValue(type, "-./+;= ")) env.push_back("CONTENT_TYPE=" + type);
    std::string encoding = Lower(Trim(request.Header("content-encoding").value_or("")));
    if (SafeHeaderValue(encoding, "-")) env.push_back("HTTP_CONTENT_ENCODING=" + encoding);
  }
  std::string protocol = request.Header("git-protocol").value_or("");
  if (SafeHeaderValue(protocol, "=:.,-_")) env.push_back("HTTP_GIT_PROTOCOL=" + protocol);

  // Config imposed on every git the CGI runs, whatever the repository's own config says.
  const std::vector<std::pair<std::string, std::string>> config = {
      {"http.uploadpack", "true"},
      {"http.receivepack", "true"},
      {"http.getanyfile", "false"},
      {"core.hooksPath", settings.repo_dir + "/hooks"},
      {"core.logAllRefUpdates", "false"},
      {"receive.fsckObjects", "true"},
      {"transfer.fsckObjects", "true"},
      {"receive.maxInputSize", std::to_string(settings.max_push_bytes)},
      {"receive.denyDeletes", "false"},
      {"receive.denyNonFastForwards", "false"},
      {"receive.advertisePushOptions", "false"},
      {"receive.autogc", "false"},
      {"gc.auto", "0"},
      {"uploadpack.allowReachableSHA1InWant", "false"},
  };
  env.push_back("GIT_CONFIG_COUNT=" + std::to_string(config.size()));
  for (size_t i = 0; i < config.size(); ++i) {
    env.push_back("GIT_CONFIG_KEY_" + std::to_string(i) + "=" + config[i].first);
    env.push_back("GIT_CONFIG_VALUE_" + std::to_string(i) + "=" + config[i].second);
  }
  return env;
}

CgiHeaderParser::State CgiHeaderParser::Feed(const char* data, size_t n) {
  if (state_ == State::kDone) {
    body_.append(data, n);
    return state_;
  }
  if (state_ == State::kError) return state_;
  size_t scan_from = buf_.size() >= 3 ? buf_.size() - 3 : 0;
  buf_.append(data, n);
  // The header block ends at the first empty line ("\n\n" or "\r\n\r\n").
  size_t end = std::string::npos, body_at = 0;
  for (size_t i = scan_from; i < buf_.size(); ++i) {
    if (buf_[i] != '\n') continue;
    if (i + 1 < buf_.size() && buf_[i + 1] == '\n') {
      end = i + 1, body_at = i + 2;
      break;
    }
    if (i + 2 < buf_.size() && buf_[i + 1] == '\r' && buf_[i + 2] == '\n') {
      end = i + 1, body_at = i + 3;
      break;
    }
  }
  if (end == std::string::npos) {
    if (buf_.size() > kMaxCgiHeaderBytes) state_ = State::kError;
    return state_;
  }
  state_ = ParseHeaderBlock(buf_.substr(0, end));
  if (state_ == State::kDone) body_ = buf_.substr(body_at);
  buf_.clear();
  return state_;
}

CgiHeaderParser::State CgiHeaderParser::ParseHeaderBlock(const std::string& block) {
  std::istringstream in(block);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0) return State::kError;
    std::string name = line.substr(0, colon);
    std::string value = Trim(line.substr(colon + 1));
    for (unsigned char c : name)
      if (!std::isalnum(c) && c != '-' && c != '_') return State::kError;
    std::string lname = Lower(name);
    if (lname == "status") {
      if (value.size() < 3 || !std::isdigit(static_cast<unsigned char>(value[0])) ||
          !std::isdigit(static_cast<unsigned char>(value[1])) ||
          !std::isdigit(static_cast<unsigned char>(value[2])))
        return State::kError;
      status_ = std::stoi(value.substr(0, 3));
      if (status_ < 100 || status_ > 599) return State::kError;
    } else if (lname == "content-type") {
      content_type_ = value;
    } else if (lname != "content-length" && lname != "transfer-encoding" && lname != "connection" &&
               lname != "keep-alive") {
      headers_.emplace_back(name, value);
    }
  }
  return State::kDone;
}

std::string PreReceiveHookScript(const std::string& kiln_exe, const TreeLimits& limits) {
  std::string script = R"SH(#!/bin/sh
# pre-receive hook generated and owned by kiln: rewritten whenever it differs. Do not edit.
# Accepts only refs/heads/<branch> with a valid branch name; refuses deleting a branch whose
# build is running (listed in kiln-busy-branches). Each refusal goes to the pushing client.
LC_ALL=C
export LC_ALL
busy="${GIT_DIR:-.}/kiln-busy-branches"

valid_branch() {
  b=$1
  [ "${#b}" -le 189 ] || return 1
  [ "$b" != HEAD ] || return 1
  case "$b" in
    '' | /* | */ | *//* | *..* | *[!A-Za-z0-9._/-]*) return 1 ;;
  esac
  rest=$b
  while :; do
    seg=${rest%%/*}
    [ "${#seg}" -le 63 ] || return 1
    case "$seg" in
      [!A-Za-z0-9]* | *. | *.lock) return 1 ;;
    esac
    [ "$seg" = "$rest" ] && return 0
    rest=${rest#*/}
  done
}

is_busy() {
  [ -f "$busy" ] || return 1
  while IFS= read -r line; do
    [ "$line" = "$1" ] && return 0
  done < "$busy"
  return 1
}

input=$(cat)
status=0
while read -r old new ref; do
  [ -n "$ref" ] || continue
  case "$ref" in
    refs/heads/*) ;;
    *)
      echo "kiln: refusing $ref: only branches (refs/heads/<name>) may be pushed" >&2
      status=1
      continue
      ;;
  esac
  branch=${ref#refs/heads/}
  if ! valid_branch "$branch"; then
    echo "kiln: refusing $ref: invalid branch name (segments of 1-63 letters, digits, '.', '_', '-', starting with a letter or digit, no '..', not ending in '.' or '.lock')" >&2
    status=1
    continue
  fi
  case "$new" in
    *[!0]*) ;;
    *)
      if is_busy "$branch"; then
        echo "kiln: refusing to delete $ref: a build of it is running" >&2
        status=1
      fi
      ;;
  esac
done <<EOF
$input
EOF
[ $status -eq 0 ] || exit $status
)SH";
  if (!kiln_exe.empty()) {
    // Issue 15: refs per push and every pushed tree's checked-out size, checked by kiln.
    std::string quoted = "'";
    for (char c : kiln_exe) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    script += "printf '%s\\n' \"$input\" | " + quoted + " git-hook pre-receive";
    script += " --max-tree-bytes=" + std::to_string(limits.max_tree_bytes);
    script += " --max-files=" + std::to_string(limits.max_files);
    script += " --max-file-bytes=" + std::to_string(limits.max_file_bytes);
    script += " --max-refs-per-push=" + std::to_string(limits.max_refs_per_push);
    script += " || exit 1\n";
  }
  return script + "exit 0\n";
}

// --- issue 18: build on push ---
std::vector<GitRefUpdate> ParseReceivePackCommands(const std::string& body) {
  std::vector<GitRefUpdate> out;
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  auto is_id = [&](const std::string& s) {
    return (s.size() == 40 || s.size() == 64) && std::all_of(s.begin(), s.end(), hex);
  };
  size_t pos = 0;
  while (pos + 4 <= body.size()) {
    size_t len = 0;
    for (size_t i = 0; i < 4; ++i) {
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(body[pos + i])));
      if (!hex(c)) return out;  // not pkt-lines (a compressed body, or the pack itself)
      len = len * 16 + static_cast<size_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (len == 0) break;                            // flush: the commands end here
    if (len < 4 || pos + len > body.size()) break;  // malformed or cut short
    std::string line = body.substr(pos + 4, len - 4);
    pos += len;
    line = line.substr(0, line.find('\0'));  // capabilities follow the first command
    if (!line.empty() && line.back() == '\n') line.pop_back();
    size_t a = line.find(' ');
    size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
    if (b == std::string::npos) continue;  // shallow, push-cert, ...
    GitRefUpdate u{line.substr(0, a), line.substr(a + 1, b - a - 1), line.substr(b + 1)};
    if (is_id(u.old_id) && is_id(u.new_id) && !u.ref.empty()) out.push_back(std::move(u));
  }
  return out;
}

namespace {
// The first `limit` bytes of a gzip stream (enough for the ref commands; the pack follows).
std::string GunzipHead(const std::string& in, size_t limit) {
  std::string out;
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), UINT32_MAX));
  char buf[16384];
  while (out.size() < limit) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    int rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
    if (rc != Z_OK) break;
  }
  inflateEnd(&z);
  return out;
}
}  // namespace
// --- end issue 18 ---

// ---------------------------------------------------------------------------------------------
// GitHttpHandler

struct GitHttpHandler::DomainState {
  std::string name;
  std::string project_root;  // <state>/domains/<name>
  std::string repo_dir;      // <project_root>/repo.git
  std::string lock_path;     // <project_root>/repo.lock
  std::string busy_path;     // <repo_dir>/kiln-busy-branches
  TreeLimits push_limits;    // issue 15: domains.<name>.push

  std::mutex prepare_mu;          // serializes PrepareDomain
  std::unique_ptr<GitRepo> repo;  // guarded by prepare_mu; set once
  bool hook_checked = false;      // guarded by prepare_mu
  std::mutex busy_mu;             // serializes busy-file writes

  std::mutex mu;
  int pushes_in_flight = 0;     // guarded by mu
  int pushes_since_upkeep = 0;  // guarded by mu
  bool upkeep_running = false;  // guarded by mu
};

GitHttpHandler::GitHttpHandler(const Config& config, Options options)
    : options_(std::move(options)),
      state_dir_(options_.state_dir.empty()
                     ? std::string()
                     : fs::absolute(options_.state_dir).lexically_normal().string()),
      auth_(config, /*check_host=*/false),
      worker_token_sha256_(config.scheduler.worker_token_sha256) {
  for (const auto& [name, dc] : config.domains) {
    auto d = std::make_unique<DomainState>();
    d->name = name;
    d->push_limits = TreeLimitsFromConfig(dc.push);
    d->project_root = state_dir_ + "/domains/" + name;
    d->repo_dir = d->project_root + "/repo.git";
    d->lock_path = d->project_root + "/repo.lock";
    d->busy_path = d->repo_dir + "/kiln-busy-branches";
    domains_[name] = std::move(d);
  }
}

GitHttpHandler::~GitHttpHandler() {
  std::map<uint64_t, std::thread> workers;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    for (SupervisedProcess* cgi : children_) cgi->Terminate(kKillGrace);  // then SIGKILL
    idle_cv_.wait_for(lock, kKillGrace, [&] { return finished_.size() == workers_.size(); });
    workers.swap(workers_);
    finished_.clear();
  }
  for (auto& [id, t] : workers) t.join();
}

void GitHttpHandler::Register(HttpServer& server) {
  auto route = [this](const HttpRequest& request, std::shared_ptr<HttpResponder> responder) {
    Handle(request, std::move(responder));
  };
  auto authorize = [this](const HttpRequest& head) { return Authorize(head); };
  metrics_ = &server.metrics();
  metrics_->DeclareCounter("kiln_git_refusals_total",
                           "git requests refused by a limit (git_slots, git_slots_per_domain) or "
                           "because the client stopped reading (write_stall).");
  server.AddRoute("GET", kRoutePrefix, route, max_body_bytes(), authorize);
  server.AddRoute("POST", kRoutePrefix, route, max_body_bytes(), authorize);
}

GitHttpHandler::DomainState* GitHttpHandler::FindDomain(const std::string& domain) {
  auto it = domains_.find(domain);
  return it == domains_.end() ? nullptr : it->second.get();
}

void GitHttpHandler::CountRefusal(const std::string& reason) {
  if (metrics_) metrics_->Increment("kiln_git_refusals_total", {{"reason", reason}});
}

namespace {

HttpRefusal GitRefusal(int status, const std::string& message, std::string reason,
                       HttpHeaders headers = {}) {
  return HttpRefusal::Make(status, message, std::move(reason), std::move(headers));
}

}  // namespace

std::optional<HttpRefusal> GitHttpHandler::SlotRefusalLocked(const std::string& domain) {
  if (workers_.size() - finished_.size() >= options_.max_concurrent) {
    return GitRefusal(503,
                      "too many git requests running on this server (server.git_slots = " +
                          std::to_string(options_.max_concurrent) + "); retry in a moment",
                      "git_slots", {{"Retry-After", "1"}});
  }
  auto it = running_.find(domain);
  if (it != running_.end() && it->second >= options_.max_concurrent_per_domain) {
    return GitRefusal(503,
                      "too many git requests running for this domain "
                      "(server.git_slots_per_domain = " +
                          std::to_string(options_.max_concurrent_per_domain) +
                          "); let your clones and pushes finish, then retry",
                      "git_slots_per_domain", {{"Retry-After", "1"}});
  }
  return std::nullopt;
}

// Issue 20: constant-time against every worker hash; upload-pack only (never a push).
bool GitHttpHandler::WorkerFetch(const HttpRequest& head, const GitHttpRoute& route) const {
  if (worker_token_sha256_.empty() || route.service != GitHttpRoute::Service::kUploadPack)
    return false;
  const std::string v = head.Header("authorization").value_or("");
  const std::string scheme = "Bearer ";
  if (v.size() <= scheme.size() || v.compare(0, scheme.size(), scheme) != 0) return false;
  std::string presented = Sha256Hex(std::string_view(v).substr(scheme.size()));
  bool match = false;
  for (const std::string& h : worker_token_sha256_)
    match = ConstantTimeEquals(presented, h) || match;
  return match;
}

std::optional<HttpRefusal> GitHttpHandler::Authorize(const HttpRequest& head) {
  GitRouteDecision parsed = ParseGitHttpRoute(head.method, head.path, head.query);
  if (!parsed.ok()) {
    HttpHeaders headers;
    if (parsed.status == 405) headers.emplace_back("Allow", "GET, POST");
    return GitRefusal(parsed.status, parsed.message, "not_found", std::move(headers));
  }
  AuthDecision auth;
  if (WorkerFetch(head, parsed.route)) {  // issue 20: a pool worker reads any domain
    auth.principal = Principal{Principal::Kind::kDomain, parsed.route.domain};
  } else {
    auth = auth_.Authenticate(head.Header("authorization").value_or(""));
  }
  if (!auth.ok()) {
    return GitRefusal(auth.status, auth.message, "unauthenticated",
                      {{"WWW-Authenticate", auth.www_authenticate}});
  }
  if (auth.principal->kind != Principal::Kind::kDomain) {
    return GitRefusal(403, "operator tokens cannot use git; use a domain token", "forbidden");
  }
  // Another domain's repository and a missing one look the same.
  if (auth.principal->domain != parsed.route.domain || !FindDomain(parsed.route.domain) ||
      state_dir_.empty()) {
    return GitRefusal(404, kNotFound, "not_found");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return GitRefusal(503, "server is stopping", "stopping");
  std::optional<HttpRefusal> full = SlotRefusalLocked(parsed.route.domain);
  if (full) CountRefusal(full->reason);
  return full;
}

void GitHttpHandler::Handle(const HttpRequest& request, std::shared_ptr<HttpResponder> responder) {
  GitRouteDecision parsed = ParseGitHttpRoute(request.method, request.path, request.query);
  if (!parsed.ok()) {
    HttpHeaders headers;
    if (parsed.status == 405) headers.emplace_back("Allow", "GET, POST");
    return responder->Reply(parsed.status, "application/json", JsonError(parsed.message),
                            std::move(headers));
  }
  AuthDecision auth;
  if (WorkerFetch(request, parsed.route)) {  // issue 20: a pool worker reads any domain
    auth.principal = Principal{Principal::Kind::kDomain, parsed.route.domain};
  } else {
    auth = auth_.Authenticate(request.Header("authorization").value_or(""));
  }
  if (!auth.ok()) {
    return responder->Reply(auth.status, "application/json", JsonError(auth.message),
                            {{"WWW-Authenticate", auth.www_authenticate}});
  }
  if (auth.principal->kind != Principal::Kind::kDomain) {
    return responder->Reply(403, "application/json",
                            JsonError("operator tokens cannot use git; use a domain token"));
  }
  // Another domain's repository and a missing one look the same.
  if (auth.principal->domain != parsed.route.domain || !FindDomain(parsed.route.domain) ||
      state_dir_.empty()) {
    return responder->Reply(404, "application/json", JsonError(kNotFound));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ReapFinished();
  if (stopping_) {
    return responder->Reply(503, "application/json", JsonError("server is stopping"));
  }
  // Checked again: the authorizer ran before the body was read, other requests may have
  // taken the slots since.
  if (std::optional<HttpRefusal> full = SlotRefusalLocked(parsed.route.domain)) {
    CountRefusal(full->reason);
    return responder->Reply(full->status, "application/json", full->body, full->headers);
  }
  uint64_t id = next_worker_++;
  const std::string domain = parsed.route.domain;
  ++running_[domain];
  worker_domain_[id] = domain;
  workers_.emplace(id, std::thread([this, id, route = parsed.route, request,
                                    responder = std::move(responder)]() mutable {
                     Serve(std::move(route), std::move(request), std::move(responder));
                     WorkerDone(id);
                   }));
}

void GitHttpHandler::WorkerDone(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto wd = worker_domain_.find(id);
  if (wd != worker_domain_.end()) {
    auto r = running_.find(wd->second);
    if (r != running_.end() && --r->second == 0) running_.erase(r);
    worker_domain_.erase(wd);
  }
  finished_.push_back(id);
  idle_cv_.notify_all();
}

void GitHttpHandler::ReapFinished() {
  for (uint64_t id : finished_) {
    auto it = workers_.find(id);
    if (it == workers_.end()) continue;
    it->second.join();  // its function returned; joining only waits for the thread's exit
    workers_.erase(it);
  }
  finished_.clear();
}

bool GitHttpHandler::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return finished_.size() == workers_.size(); });
}

Status GitHttpHandler::PrepareDomain(const std::string& domain) {
  DomainState* d = FindDomain(domain);
  if (!d || state_dir_.empty()) return Status::NotFound("unknown domain '" + domain + "'");
  std::lock_guard<std::mutex> lock(d->prepare_mu);
  std::error_code ec;
  fs::create_directories(state_dir_ + "/home", ec);
  if (ec) return Status::Internal("cannot create " + state_dir_ + "/home: " + ec.message());
  if (d->repo && d->hook_checked) return Status::Ok();
  if (!d->repo) {
    Status s = GitRepo::Open(d->repo_dir, &d->repo);
    if (!s.ok()) return s;
  }
  // Checked once per process; rewritten when it differs (a new kiln version, or an edit).
  std::string hook = d->repo_dir + "/hooks/pre-receive";
  const std::string script = PreReceiveHookScript(options_.hook_exe, d->push_limits);
  struct stat st;
  if (ReadWholeFile(hook) != script || ::stat(hook.c_str(), &st) != 0 || !(st.st_mode & S_IXUSR)) {
    fs::create_directories(d->repo_dir + "/hooks", ec);
    if (ec) return Status::Internal("cannot create hooks directory: " + ec.message());
    Status s = WriteFileAtomic(hook, script, 0755);
    if (!s.ok()) return s;
  }
  d->hook_checked = true;
  return Status::Ok();
}

Status GitHttpHandler::SetBusyBranches(const std::string& domain,
                                       const std::set<std::string>& branches) {
  DomainState* d = FindDomain(domain);
  if (!d) return Status::NotFound("unknown domain '" + domain + "'");
  Status s = PrepareDomain(domain);
  if (!s.ok()) return s;
  return WriteBusyFile(*d, branches);
}

Status GitHttpHandler::WriteBusyFile(DomainState& d, const std::set<std::string>& branches) {
  std::string content;
  for (const std::string& b : branches) {
    Status s = ValidateRef(b);
    if (!s.ok()) return s;
    content += b.compare(0, 11, "refs/heads/") == 0 ? b.substr(11) : b;
    content += '\n';
  }
  std::lock_guard<std::mutex> lock(d.busy_mu);
  return WriteFileAtomic(d.busy_path, content, 0644,
                         Durability::kAtomicOnly);  // rewritten per push
}

void GitHttpHandler::Serve(GitHttpRoute route, HttpRequest request,
                           std::shared_ptr<HttpResponder> responder) {
  DomainState& d = *FindDomain(route.domain);
  Status s = PrepareDomain(route.domain);
  if (!s.ok()) {
    spdlog::error("git: domain {}: repository unavailable: {}", route.domain, s.ToString());
    return responder->Reply(500, "application/json", JsonError("repository unavailable"));
  }
  auto start = std::chrono::steady_clock::now();
  int exit_code = -1;
  if (!route.is_push()) {
    RunCgi(route, request, d, responder, &exit_code);
    return;
  }
  if (options_.busy_branches) {
    s = WriteBusyFile(d, options_.busy_branches(route.domain));
    if (!s.ok())
      spdlog::warn("git: domain {}: busy branches not updated: {}", d.name, s.ToString());
  }
  {
    std::lock_guard<std::mutex> lock(d.mu);
    ++d.pushes_in_flight;
  }
  {
    FileLock shared(d.lock_path, LOCK_SH);  // waits while an upkeep run holds it exclusively
    if (!shared.held()) spdlog::warn("git: domain {}: cannot lock {}", d.name, d.lock_path);
    // Issue 18: the landed updates are told before the client hears the push is done.
    std::function<void(int)> landed;
    if (options_.refs_updated)
      landed = [&](int code) {
        if (code != 0) return;
        auto updates = LandedUpdates(d, request);
        if (!updates.empty()) options_.refs_updated(route.domain, updates);
      };
    RunCgi(route, request, d, responder, &exit_code, landed);
  }
  {
    std::lock_guard<std::mutex> lock(d.mu);
    --d.pushes_in_flight;
    if (exit_code == 0) ++d.pushes_since_upkeep;
  }
  if (exit_code == 0 && options_.pushed) options_.pushed(route.domain);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("git: push to {} ({} bytes) finished in {:.1f} ms, exit {}", d.name,
               request.body.size(), ms, exit_code);
  MaybeUpkeep(d);
}

// Issue 18: the updates the push asked for that the repository now holds (one for-each-ref,
// run under the push's shared repo.lock). Reading the refs after git is done, rather than
// trusting a hook or a diff of the refs before and after, leaves out refused updates and those a
// concurrent push to the same branch overwrote (that push reports its own).
std::vector<std::pair<std::string, std::string>> GitHttpHandler::LandedUpdates(
    DomainState& d, const HttpRequest& request) {
  std::vector<std::pair<std::string, std::string>> out;
  auto enc = request.headers.find("content-encoding");
  const bool gzip = enc != request.headers.end() && enc->second.find("gzip") != std::string::npos;
  std::vector<GitRefUpdate> asked =
      ParseReceivePackCommands(gzip ? GunzipHead(request.body, 1 << 20) : request.body);
  GitCommand cmd;
  cmd.args = {"for-each-ref", "--format=%(objectname) %(refname)"};
  for (const GitRefUpdate& u : asked)
    if (u.ref.rfind("refs/heads/", 0) == 0 && u.new_id.find_first_not_of('0') != std::string::npos)
      cmd.args.push_back(u.ref);
  if (cmd.args.size() == 2 || !d.repo) return out;
  cmd.home = state_dir_ + "/home";
  cmd.timeout_ms = 30 * 1000;
  GitResult r;
  Status s = d.repo->RunGit(cmd, &r);
  if (!s.ok() || r.exit_code != 0) {
    spdlog::warn("git: domain {}: cannot read the pushed refs: {}", d.name,
                 s.ok() ? r.ErrorSummary() : s.ToString());
    return out;
  }
  std::map<std::string, std::string> now;  // ref -> value
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    size_t sp = line.find(' ');
    if (sp != std::string::npos) now[line.substr(sp + 1)] = line.substr(0, sp);
  }
  for (const GitRefUpdate& u : asked) {
    auto it = now.find(u.ref);
    if (it != now.end() && it->second == u.new_id) out.emplace_back(u.ref, u.new_id);
  }
  return out;
}

void GitHttpHandler::RunCgi(const GitHttpRoute& route, const HttpRequest& request, DomainState& d,
                            const std::shared_ptr<HttpResponder>& responder, int* exit_code,
                            const std::function<void(int exit_code)>& before_finish) {
  GitCgiSettings settings;
  settings.project_root = d.project_root;
  settings.repo_dir = d.repo_dir;
  settings.home = state_dir_ + "/home";
  settings.max_push_bytes = options_.max_push_bytes;

  // Response state, touched only by the stdout sink (on this thread) and after Wait().
  CgiHeaderParser parser;
  bool started = false, bad_headers = false;
  bool stalled = false;  // the client stopped reading: the CGI was killed
  std::unique_ptr<SupervisedProcess> cgi;

  SupervisedSpec spec;
  spec.spawn.path = options_.http_backend;
  spec.spawn.argv = {"git-http-backend"};
  spec.spawn.env = BuildGitCgiEnv(route, request, settings);
  spec.spawn.cwd = d.project_root;
  if (!request.body.empty()) spec.stdin_bytes = request.body;
  spec.err.capture_bytes = kMaxStderrBytes;
  spec.deadline = std::chrono::steady_clock::now() + options_.cgi_timeout;
  spec.kill_grace = kKillGrace;
  spec.out.sink = [&](std::string_view chunk) {
    if (stalled || bad_headers) return;  // the CGI is being stopped; drop the rest
    if (started) {
      // Backpressure: the pipe fills while the client is slow, so git waits too; a client
      // that takes nothing for write_stall_timeout (or left) loses the CGI and its slot.
      if (!responder->WaitWritable(std::chrono::steady_clock::now() +
                                   options_.write_stall_timeout)) {
        stalled = true;
        spdlog::warn("git: domain {}: client stopped reading {}; stopping git-http-backend", d.name,
                     route.path_info);
        CountRefusal("write_stall");
        cgi->Kill();
        return;
      }
      responder->Write(std::string(chunk));
      return;
    }
    CgiHeaderParser::State st = parser.Feed(chunk.data(), chunk.size());
    if (st == CgiHeaderParser::State::kDone) {
      started = true;
      std::string ct =
          parser.content_type().empty() ? "application/octet-stream" : parser.content_type();
      responder->StartStream(parser.status(), ct, parser.headers());
      responder->Write(parser.TakeBody());
    } else if (st == CgiHeaderParser::State::kError) {
      bad_headers = true;
      cgi->Terminate(kKillGrace);
    }
  };
  Status spawned = SupervisedProcess::Start(std::move(spec), &cgi);
  if (!spawned.ok()) {
    spdlog::error("git: domain {}: cannot start {}: {}", d.name, options_.http_backend,
                  spawned.message());
    responder->Reply(500, "application/json", JsonError("git backend failed to start"));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    children_.insert(cgi.get());
    if (stopping_) cgi->Terminate(kKillGrace);
  }
  ProcessOutcome outcome = cgi->Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    children_.erase(cgi.get());
  }
  *exit_code = outcome.exit_code;
  if (outcome.timed_out)
    spdlog::warn("git: domain {}: git-http-backend ran over {} s; stopped it", d.name,
                 options_.cgi_timeout.count());
  const std::string& err_text = outcome.err;
  if (!err_text.empty() || *exit_code != 0) {
    std::string first = err_text.substr(0, err_text.find('\n'));
    spdlog::warn("git: domain {}: git-http-backend {} exit {}: {}", d.name, route.path_info,
                 *exit_code, first.substr(0, 300));
  }
  if (before_finish && !stalled) before_finish(*exit_code);  // issue 18
  if (stalled) return responder->Abort();  // a cut-short stream must not look complete
  if (started) return responder->Finish();
  responder->Reply(
      502, "application/json",
      JsonError(bad_headers ? "git backend sent malformed headers" : "git backend failed"));
}

void GitHttpHandler::MaybeUpkeep(DomainState& d) {
  if (options_.upkeep_every_pushes <= 0) return;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.pushes_since_upkeep < options_.upkeep_every_pushes || d.pushes_in_flight > 0 ||
        d.upkeep_running)
      return;
    d.upkeep_running = true;
  }
  bool ran = false;
  {
    FileLock exclusive(d.lock_path, LOCK_EX | LOCK_NB);  // skipped while any push holds it
    if (exclusive.held()) {
      GitCommand cmd;
      cmd.args = {"-c",     "gc.auto=" + std::to_string(options_.gc_auto),
                  "-c",     "gc.autoPackLimit=" + std::to_string(options_.gc_auto_pack_limit),
                  "-c",     "gc.autoDetach=false",
                  "gc",     "--auto",
                  "--quiet"};
      cmd.home = state_dir_ + "/home";
      GitResult r;
      Status s = d.repo->RunGit(cmd, &r);
      if (!s.ok() || r.exit_code != 0)
        spdlog::warn("git: domain {}: upkeep (git gc --auto) failed: {}", d.name,
                     s.ok() ? r.ErrorSummary() : s.ToString());
      ran = true;
    }
  }
  std::lock_guard<std::mutex> lock(d.mu);
  d.upkeep_running = false;
  if (ran) {
    d.pushes_since_upkeep = 0;
    ++upkeep_runs_;
  }
}

}  // namespace kiln
