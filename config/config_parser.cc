#include "config/config_parser.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "common/names.h"
#include "common/sha256.h"
#include "config/base_image_policy.h"
#include "config/host_checks.h"

namespace kiln {
namespace {

using nlohmann::json;

const char* const kToolNames[] = {"build_candidate", "deploy_candidate", "candidate_status",
                                  "build_log",       "cancel_build",     "list_candidates"};
const char* const kLogLevels[] = {"trace", "debug", "info", "warn", "error"};

std::string Join(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

std::string Index(const std::string& base, size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

bool IsToolName(const std::string& s) {
  for (const char* t : kToolNames)
    if (s == t) return true;
  return false;
}

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || IsDigit(c); }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Issue 15: a POSIX-portable user name ([A-Za-z_][A-Za-z0-9_.-]{0,31}).
bool IsUserName(const std::string& user) {
  bool ok = !user.empty() && user.size() <= 32 && (IsAlpha(user[0]) || user[0] == '_');
  for (char c : user) ok = ok && (IsAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '.');
  return ok;
}

// [A-Za-z_][A-Za-z0-9_]*
bool IsEnvName(const std::string& s) {
  if (s.empty() || !(IsAlpha(s[0]) || s[0] == '_')) return false;
  for (char c : s)
    if (!(IsAlpha(c) || IsDigit(c) || c == '_')) return false;
  return true;
}

// [a-z][a-z0-9_]{0,63}
bool IsAliasName(const std::string& s) {
  if (s.empty() || s.size() > 64 || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s)
    if (!(IsLowerAlnum(c) || c == '_')) return false;
  return true;
}

// An OCI repository name: '/'-separated components of lowercase alphanumerics, each starting
// and ending with one, with '.', '_' or '-' only between them.
bool IsRepositoryName(const std::string& s) {
  if (s.empty() || s.size() > 255) return false;
  size_t start = 0;
  while (true) {
    size_t slash = s.find('/', start);
    std::string comp =
        s.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (comp.empty() || !IsLowerAlnum(comp.front()) || !IsLowerAlnum(comp.back())) return false;
    for (char c : comp)
      if (!(IsLowerAlnum(c) || c == '.' || c == '_' || c == '-')) return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

// Kubernetes DNS-1123 label (max 63) or, with dots allowed, subdomain (max 253).
bool IsDnsName(const std::string& s, bool allow_dots) {
  size_t max = allow_dots ? 253 : 63;
  if (s.empty() || s.size() > max || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back()))
    return false;
  for (char c : s)
    if (!(IsLowerAlnum(c) || c == '-' || (allow_dots && c == '.'))) return false;
  return true;
}

bool HasDotDotSegment(const std::string& p) {
  size_t start = 0;
  while (true) {
    size_t slash = p.find('/', start);
    if (p.compare(start, slash == std::string::npos ? std::string::npos : slash - start, "..") == 0)
      return true;
    if (slash == std::string::npos) return false;
    start = slash + 1;
  }
}

// Returns "" when `s` is host:port (port optional unless `port_required`), else the reason.
std::string CheckHostPort(const std::string& s, bool port_required) {
  std::string host, port;
  bool has_port = false;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos) return "unterminated '[' in IPv6 address";
    host = s.substr(1, close - 1);
    std::string rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return "expected ':' after ']'";
      has_port = true;
      port = rest.substr(1);
    }
    if (host.empty()) return "host is empty";
    for (char c : host)
      if (!(IsLowerHex(c) || (c >= 'A' && c <= 'F') || c == ':' || c == '.'))
        return "invalid IPv6 address";
  } else {
    size_t colon = s.find(':');
    if (colon != std::string::npos && s.find(':', colon + 1) != std::string::npos)
      return "an IPv6 address must be written in brackets, e.g. [::1]:8700";
    host = s.substr(0, colon);
    if (colon != std::string::npos) {
      has_port = true;
      port = s.substr(colon + 1);
    }
    if (host.empty()) return "host is empty";
    for (char c : host)
      if (!(IsAlpha(c) || IsDigit(c) || c == '.' || c == '-')) return "invalid host name";
  }
  if (!has_port) return port_required ? "must be host:port" : "";
  if (port.empty() || port.size() > 5) return "port must be a number between 1 and 65535";
  for (char c : port)
    if (!IsDigit(c)) return "port must be a number between 1 and 65535";
  int n = std::stoi(port);
  if (n < 1 || n > 65535) return "port must be a number between 1 and 65535";
  return "";
}

// The part of an http(s) URL after its scheme; false when the scheme is neither.
bool StripHttpScheme(const std::string& url, std::string* rest) {
  for (const char* scheme : {"http://", "https://"}) {
    const size_t n = std::char_traits<char>::length(scheme);
    if (url.compare(0, n, scheme) == 0) {
      *rest = url.substr(n);
      return true;
    }
  }
  return false;
}

// Parses "http(s)://host[:port][/]" into its authority. Returns "" or the reason it is not one.
std::string ParseBaseUrl(const std::string& url, std::string* authority) {
  std::string rest;
  if (!StripHttpScheme(url, &rest)) return "must start with http:// or https://";
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('@') != std::string::npos) return "must not contain credentials (use auth_file)";
  if (rest.find_first_of("/?#") != std::string::npos)
    return "must be scheme://host[:port] with no path, query or fragment";
  std::string why = CheckHostPort(rest, false);
  if (!why.empty()) return why;
  *authority = rest;
  return "";
}

// --- Issue 16 ---
// "http(s)://host[:port][/path]": "" or the reason it is not one (no credentials, query,
// fragment or control characters; a path prefix is allowed for a reverse proxy).
std::string CheckPublicUrl(const std::string& url) {
  std::string rest;
  if (!StripHttpScheme(url, &rest)) return "must start with http:// or https://";
  for (char c : url)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '"' || c == '\\' || c == '\'')
      return "must not contain spaces, quotes or control characters";
  if (url.size() > 512) return "must be at most 512 characters";
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  if (authority.find('@') != std::string::npos) return "must not contain credentials";
  if (rest.find_first_of("?#") != std::string::npos) return "must have no query or fragment";
  return CheckHostPort(authority, false);
}
// --- end issue 16 ---

// Returns "" when `file` can be opened for reading and is a regular file, else the reason.
std::string CheckReadableFile(const std::string& file) {
  // O_NONBLOCK: opening a FIFO must not hang check-config.
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "cannot open '" + file + "': " + std::strerror(errno);
  struct stat st;
  int rc = ::fstat(fd, &st);
  int saved = errno;
  ::close(fd);
  if (rc != 0) return "cannot stat '" + file + "': " + std::strerror(saved);
  if (!S_ISREG(st.st_mode)) return "'" + file + "' is not a regular file";
  return "";
}

std::string TypeName(const json& v) {
  if (v.is_number_float()) return "a fractional number";
  return std::string(v.type_name());
}

// Reports keys that appear twice in one object (nlohmann::json silently keeps the last one),
// by following the parser's events with a stack of open objects and arrays.
class DuplicateKeyTracker {
 public:
  explicit DuplicateKeyTracker(std::vector<ConfigProblem>* problems) : problems_(problems) {}

  bool OnEvent(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        frames_.push_back(Frame{ChildPath(), false, 0, {}, {}});
        break;
      case json::parse_event_t::array_start:
        frames_.push_back(Frame{ChildPath(), true, 0, {}, {}});
        break;
      case json::parse_event_t::key: {
        Frame& top = frames_.back();
        top.key = parsed.is_string() ? parsed.get<std::string>() : std::string();
        if (!top.keys.insert(top.key).second)
          problems_->push_back({Join(top.path, top.key), "duplicate key"});
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        ValueDone();
        break;
      case json::parse_event_t::value:
        ValueDone();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    std::string path;
    bool is_array = false;
    size_t index = 0;
    std::string key;
    std::set<std::string> keys;
  };

  std::string ChildPath() const {
    if (frames_.empty()) return "";
    const Frame& top = frames_.back();
    return top.is_array ? Index(top.path, top.index) : Join(top.path, top.key);
  }

  void ValueDone() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
  }

  std::vector<ConfigProblem>* const problems_;
  std::vector<Frame> frames_;
};

// Walks a parsed JSON document into a Config, recording every problem. Single use; not
// thread-safe; `problems` must outlive it.
class ConfigReader {
 public:
  ConfigReader(std::string base_dir, std::vector<ConfigProblem>* problems)
      : base_dir_(std::move(base_dir)), problems_(problems) {}

  void Read(const json& root, Config* out);

 private:
  void Problem(const std::string& path, std::string reason) {
    problems_->push_back({path, std::move(reason)});
  }

  void CheckKeys(const json& obj, const std::string& path,
                 std::initializer_list<const char*> allowed);
  const json* Find(const json& obj, const char* key, const std::string& path, bool required);
  const json* Section(const json& obj, const char* key, const std::string& path, bool required);
  bool ReadString(const json& obj, const char* key, const std::string& path, bool required,
                  std::string* out);
  void ReadNullableString(const json& obj, const char* key, const std::string& path,
                          std::optional<std::string>* out);
  void ReadBool(const json& obj, const char* key, const std::string& path, bool* out);
  bool ReadStringList(const json& obj, const char* key, const std::string& path, bool required,
                      std::vector<std::string>* out);
  bool ReadStringMap(const json& obj, const char* key, const std::string& path,
                     std::map<std::string, std::string>* out);
  template <typename T>
  void ReadInt(const json& obj, const char* key, const std::string& path, int64_t lo, int64_t hi,
               T* out);

  std::string Resolve(const std::string& p) const;
  void CheckFile(const std::string& file, const std::string& path);
  void CheckRelativePath(const std::string& p, const std::string& path);
  void CheckTokenList(const std::vector<std::string>& tokens, const std::string& path);

  void ReadServer(const json& obj, ServerConfig* out);
  void ReadScheduler(const json& obj, SchedulerConfig* out);
  void ReadRegistries(const json& obj, std::map<std::string, RegistryConfig>* out);
  void ReadDomain(const std::string& name, const json& obj, DomainConfig* out);
  void ReadPushLimits(const json& obj, const std::string& path, PushLimitsConfig* out);  // issue 15
  void ReadToolAliases(const json& obj, const std::string& path, DomainConfig* out);
  void ReadBuild(const json& obj, const std::string& path, BuildConfig* out);
  void ReadContainerfile(const json& obj, const std::string& path, ContainerfileBuild* out);
  void ReadLayered(const json& obj, const std::string& path, LayeredBuild* out);
  // Issue 15: build.limits and deploy.local.limits.
  void ReadSandboxLimits(const json& obj, const std::string& path, SandboxLimitsConfig* out);
  void CheckBaseImage(const std::string& image, const std::string& path);
  void ReadImage(const json& obj, const std::string& path, ImageConfig* out);
  void ReadDeploy(const json& obj, const std::string& path, DeployConfig* out);
  void CheckUniqueTokens(const Config& config);
  void CheckDomainBuildSlots(const Config& config);  // per-domain build slots (issue 15)
  // --- Issue 19: storage budget ---
  void ReadGigabytes(const json& obj, const char* key, const std::string& path, double* out);
  void ReadStorage(const json& obj, StorageConfig* out);
  void ReadDomainStorage(const json& obj, const std::string& path, DomainStorageConfig* out);
  void CheckDomainStorage(const Config& config);
  // --- end issue 19 ---

  const std::string base_dir_;
  std::vector<ConfigProblem>* const problems_;
  // Registry authorities (host[:port]) by registry name, for image references.
  std::map<std::string, std::string> registry_authority_;
};

void ConfigReader::CheckKeys(const json& obj, const std::string& path,
                             std::initializer_list<const char*> allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* a : allowed) known = known || it.key() == a;
    if (known) continue;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    Problem(Join(path, it.key()), "unknown key (expected one of: " + list + ")");
  }
}

const json* ConfigReader::Find(const json& obj, const char* key, const std::string& path,
                               bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) Problem(Join(path, key), "missing required key");
    return nullptr;
  }
  return &*it;
}

const json* ConfigReader::Section(const json& obj, const char* key, const std::string& path,
                                  bool required) {
  const json* v = Find(obj, key, path, required);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    Problem(Join(path, key), "must be an object, got " + TypeName(*v));
    return nullptr;
  }
  return v;
}

bool ConfigReader::ReadString(const json& obj, const char* key, const std::string& path,
                              bool required, std::string* out) {
  const json* v = Find(obj, key, path, required);
  if (v == nullptr) return false;
  if (!v->is_string()) {
    Problem(Join(path, key), "must be a string, got " + TypeName(*v));
    return false;
  }
  const std::string& s = v->get_ref<const std::string&>();
  if (s.empty()) {
    Problem(Join(path, key), "must not be empty");
    return false;
  }
  *out = s;
  return true;
}

void ConfigReader::ReadNullableString(const json& obj, const char* key, const std::string& path,
                                      std::optional<std::string>* out) {
  const json* v = Find(obj, key, path, false);
  if (v == nullptr || v->is_null()) return;
  std::string s;
  if (ReadString(obj, key, path, false, &s)) *out = s;
}

void ConfigReader::ReadBool(const json& obj, const char* key, const std::string& path, bool* out) {
  const json* v = Find(obj, key, path, false);
  if (v == nullptr) return;
  if (!v->is_boolean()) {
    Problem(Join(path, key), "must be a boolean, got " + TypeName(*v));
    return;
  }
  *out = v->get<bool>();
}

bool ConfigReader::ReadStringList(const json& obj, const char* key, const std::string& path,
                                  bool required, std::vector<std::string>* out) {
  const json* v = Find(obj, key, path, required);
  if (v == nullptr) return false;
  std::string p = Join(path, key);
  if (!v->is_array()) {
    Problem(p, "must be an array of strings, got " + TypeName(*v));
    return false;
  }
  out->clear();
  bool ok = true;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_string()) {
      Problem(Index(p, i), "must be a string, got " + TypeName(e));
      ok = false;
      continue;
    }
    out->push_back(e.get<std::string>());
  }
  return ok;
}

bool ConfigReader::ReadStringMap(const json& obj, const char* key, const std::string& path,
                                 std::map<std::string, std::string>* out) {
  const json* v = Find(obj, key, path, false);
  if (v == nullptr) return false;
  std::string p = Join(path, key);
  if (!v->is_object()) {
    Problem(p, "must be an object of strings, got " + TypeName(*v));
    return false;
  }
  out->clear();
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it->is_string()) {
      Problem(Join(p, it.key()), "must be a string, got " + TypeName(*it));
      continue;
    }
    (*out)[it.key()] = it->get<std::string>();
  }
  return true;
}

template <typename T>
void ConfigReader::ReadInt(const json& obj, const char* key, const std::string& path, int64_t lo,
                           int64_t hi, T* out) {
  const json* v = Find(obj, key, path, false);
  if (v == nullptr) return;
  std::string p = Join(path, key);
  if (!v->is_number_integer()) {
    Problem(p, "must be an integer, got " + TypeName(*v));
    return;
  }
  bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi);
  int64_t n = too_big ? hi : v->get<int64_t>();
  if (too_big || n < lo || n > hi) {
    Problem(p, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                   v->dump());
    return;
  }
  *out = static_cast<T>(n);
}

std::string ConfigReader::Resolve(const std::string& p) const {
  if (base_dir_.empty() || p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(base_dir_) / p).lexically_normal().string();
}

void ConfigReader::CheckFile(const std::string& file, const std::string& path) {
  std::string why = CheckReadableFile(file);
  // Issue 16: every config error says what to change.
  if (!why.empty()) Problem(path, why + "; fix the path or create the file (readable by kiln)");
}

void ConfigReader::CheckRelativePath(const std::string& p, const std::string& path) {
  if (p[0] == '/') {
    Problem(path, "must be a relative path");
  } else if (HasDotDotSegment(p)) {
    Problem(path, "must not contain '..' segments");
  }
}

void ConfigReader::CheckTokenList(const std::vector<std::string>& tokens, const std::string& path) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!IsSha256Hex(tokens[i]))
      Problem(Index(path, i),
              "must be 64 lowercase hex characters (the token's SHA-256, see `kiln hash-token`)");
}

void ConfigReader::Read(const json& root, Config* out) {
  if (!root.is_object()) {
    Problem("", "config must be a JSON object, got " + TypeName(root));
    return;
  }
  CheckKeys(root, "",
            {"log_level", "server", "scheduler", "registries", "operator_token_sha256", "domains",
             "push", "storage"});
  std::string level;
  if (ReadString(root, "log_level", "", false, &level)) {
    bool known = false;
    for (const char* l : kLogLevels) known = known || level == l;
    if (known) {
      out->log_level = level;
    } else {
      Problem("log_level", "must be one of trace, debug, info, warn, error");
    }
  }
  if (const json* s = Section(root, "server", "", true)) ReadServer(*s, &out->server);
  if (const json* s = Section(root, "scheduler", "", false)) ReadScheduler(*s, &out->scheduler);
  if (const json* s = Section(root, "registries", "", true)) ReadRegistries(*s, &out->registries);
  if (ReadStringList(root, "operator_token_sha256", "", false, &out->operator_token_sha256))
    CheckTokenList(out->operator_token_sha256, "operator_token_sha256");
  // Issue 15: the global push limits, read before the domains that start from them.
  if (const json* s = Section(root, "push", "", false)) ReadPushLimits(*s, "push", &out->push);
  // Issue 19: storage budget.
  if (const json* s = Section(root, "storage", "", false)) ReadStorage(*s, &out->storage);
  if (const json* s = Section(root, "domains", "", true)) {
    if (s->empty()) Problem("domains", "at least one domain is required");
    for (auto it = s->begin(); it != s->end(); ++it) {
      DomainConfig& d = out->domains[it.key()];
      d.name = it.key();
      d.push = out->push;
      ReadDomain(it.key(), *it, &d);
    }
  }
  CheckUniqueTokens(*out);
  CheckDomainBuildSlots(*out);
  CheckDomainStorage(*out);  // issue 19
}

// --- Issue 19: storage budget ------------------------------------------------------------
void ConfigReader::ReadGigabytes(const json& obj, const char* key, const std::string& path,
                                 double* out) {
  const json* v = Find(obj, key, path, false);
  if (v == nullptr) return;
  std::string p = Join(path, key);
  if (!v->is_number()) {
    Problem(p, "must be a number of GB, got " + TypeName(*v));
    return;
  }
  double n = v->get<double>();
  if (!(n >= 0 && n <= 1000000)) {
    Problem(p, "must be between 0 (no budget) and 1000000 GB, got " + v->dump());
    return;
  }
  *out = n;
}

void ConfigReader::ReadStorage(const json& obj, StorageConfig* out) {
  const std::string path = "storage";
  CheckKeys(obj, path,
            {"max_gb", "gc_interval_s", "candidate_idle_s", "workspace_idle_s", "headroom_pct"});
  ReadGigabytes(obj, "max_gb", path, &out->max_gb);
  ReadInt(obj, "gc_interval_s", path, 10, 86400, &out->gc_interval_s);
  ReadInt(obj, "candidate_idle_s", path, 0, 31536000, &out->candidate_idle_s);
  ReadInt(obj, "workspace_idle_s", path, 0, 31536000, &out->workspace_idle_s);
  ReadInt(obj, "headroom_pct", path, 0, 90, &out->headroom_pct);
}

void ConfigReader::ReadDomainStorage(const json& obj, const std::string& path,
                                     DomainStorageConfig* out) {
  CheckKeys(obj, path, {"max_gb"});
  ReadGigabytes(obj, "max_gb", path, &out->max_gb);
}

void ConfigReader::CheckDomainStorage(const Config& config) {
  if (config.storage.max_gb <= 0) return;
  for (const auto& [name, d] : config.domains)
    if (d.storage.max_gb > config.storage.max_gb)
      Problem(Join(Join(Join("domains", name), "storage"), "max_gb"),
              "must not exceed storage.max_gb (" + json(config.storage.max_gb).dump() + "), got " +
                  json(d.storage.max_gb).dump());
}
// --- end issue 19 ------------------------------------------------------------------------

// --- per-domain build slots (issue 15) ---
void ConfigReader::CheckDomainBuildSlots(const Config& config) {
  for (const auto& [name, d] : config.domains)
    if (d.max_parallel_builds && *d.max_parallel_builds > config.scheduler.max_parallel_builds)
      Problem(Join(Join("domains", name), "max_parallel_builds"),
              "must not exceed scheduler.max_parallel_builds (" +
                  std::to_string(config.scheduler.max_parallel_builds) + "), got " +
                  std::to_string(*d.max_parallel_builds));
}
// --- end per-domain build slots ---

void ConfigReader::ReadServer(const json& obj, ServerConfig* out) {
  const std::string path = "server";
  CheckKeys(obj, path,
            {"listen", "state_dir", "allowed_origins", "max_request_bytes", "max_sessions",
             "max_inflight_per_session",
             // HTTP transport caps (issue 15)
             "max_connections", "idle_timeout_s", "header_timeout_s", "write_timeout_s",
             "max_sessions_per_domain", "git_slots", "git_slots_per_domain", "metrics_listen",
             // issue 16
             "public_url"});
  std::string listen;
  if (ReadString(obj, "listen", path, false, &listen)) {
    std::string why = CheckHostPort(listen, true);
    if (why.empty()) {
      out->listen = listen;
    } else {
      Problem("server.listen", why);
    }
  }
  std::string state_dir;
  if (ReadString(obj, "state_dir", path, true, &state_dir)) out->state_dir = Resolve(state_dir);
  if (ReadStringList(obj, "allowed_origins", path, false, &out->allowed_origins)) {
    for (size_t i = 0; i < out->allowed_origins.size(); ++i) {
      std::string authority;
      std::string why = ParseBaseUrl(out->allowed_origins[i], &authority);
      if (!why.empty()) Problem(Index("server.allowed_origins", i), "origin " + why);
    }
  }
  ReadInt(obj, "max_request_bytes", path, 1 << 10, int64_t{1} << 30, &out->max_request_bytes);
  ReadInt(obj, "max_sessions", path, 1, 100000, &out->max_sessions);
  ReadInt(obj, "max_inflight_per_session", path, 1, 1024, &out->max_inflight_per_session);
  // --- HTTP transport caps (issue 15) ---
  ReadInt(obj, "max_connections", path, 1, 1000000, &out->max_connections);
  ReadInt(obj, "idle_timeout_s", path, 1, 3600, &out->idle_timeout_s);
  ReadInt(obj, "header_timeout_s", path, 1, 600, &out->header_timeout_s);
  ReadInt(obj, "write_timeout_s", path, 1, 3600, &out->write_timeout_s);
  ReadInt(obj, "max_sessions_per_domain", path, 0, 100000, &out->max_sessions_per_domain);
  ReadInt(obj, "git_slots", path, 1, 1024, &out->git_slots);
  ReadInt(obj, "git_slots_per_domain", path, 1, 1024, &out->git_slots_per_domain);
  std::string metrics_listen;
  auto ml = obj.find("metrics_listen");
  if (ml != obj.end() && ml->is_string() && ml->get_ref<const std::string&>().empty()) {
    out->metrics_listen = "";  // "" disables, like "off"
  } else if (ReadString(obj, "metrics_listen", path, false, &metrics_listen)) {
    if (metrics_listen == "off") {
      out->metrics_listen = "";
    } else if (std::string why = CheckHostPort(metrics_listen, true); !why.empty()) {
      Problem("server.metrics_listen",
              why + " (or \"off\" to serve /metrics only to the operator)");
    } else if (metrics_listen == out->listen) {
      Problem("server.metrics_listen",
              "must differ from server.listen (the agents' port); use another port or \"off\"");
    } else {
      out->metrics_listen = metrics_listen;
    }
  }
  // --- end HTTP transport caps ---
  // --- Issue 16: server.public_url ---
  std::string public_url;
  if (ReadString(obj, "public_url", path, false, &public_url)) {
    std::string why = CheckPublicUrl(public_url);
    if (why.empty()) {
      while (!public_url.empty() && public_url.back() == '/') public_url.pop_back();
      out->public_url = public_url;
    } else {
      Problem("server.public_url",
              why + ", e.g. \"https://kiln.example.com\" (the address agents push to)");
    }
  }
  if (out->public_url.empty()) out->public_url = "http://" + out->listen;
  // --- end issue 16 ---
}

void ConfigReader::ReadScheduler(const json& obj, SchedulerConfig* out) {
  const std::string path = "scheduler";
  CheckKeys(obj, path,
            {"max_parallel_builds", "build_log_max_bytes", "workers", "worker_tls",
             "worker_token_sha256", "worker_service"});
  ReadInt(obj, "max_parallel_builds", path, 1, 64, &out->max_parallel_builds);
  ReadInt(obj, "build_log_max_bytes", path, 4 << 10, int64_t{1} << 30, &out->build_log_max_bytes);
  if (ReadStringList(obj, "workers", path, false, &out->workers)) {  // issue 20
    std::set<std::string> seen;
    for (size_t i = 0; i < out->workers.size(); ++i) {
      std::string host;
      int port = 0;
      std::string why = ParseWorkerAddress(out->workers[i], &host, &port);
      if (why.empty() && !seen.insert(out->workers[i]).second) why = "is listed twice";
      if (!why.empty())
        Problem(Index(Join(path, "workers"), i), "\"" + out->workers[i] + "\" " + why);
    }
  }
  // Issue 20: the pool from the worker Service's EndpointSlices (Kubernetes).
  if (const json* ws = Section(obj, "worker_service", path, false)) {
    const std::string wp = Join(path, "worker_service");
    CheckKeys(*ws, wp, {"service", "namespace", "port_name", "kubeconfig"});
    if (ReadString(*ws, "service", wp, true, &out->worker_service)) {
      Status ok = ValidateName(out->worker_service, "service");
      if (!ok.ok()) Problem(Join(wp, "service"), ok.message());
    }
    ReadString(*ws, "namespace", wp, false, &out->worker_service_namespace);
    ReadString(*ws, "port_name", wp, false, &out->worker_service_port_name);
    std::string kc;
    if (ReadString(*ws, "kubeconfig", wp, false, &kc)) {
      out->worker_service_kubeconfig = Resolve(kc);
      CheckFile(*out->worker_service_kubeconfig, Join(wp, "kubeconfig"));
    }
    if (!out->workers.empty())
      Problem(wp,
              "set either scheduler.workers (a static list) or scheduler.worker_service "
              "(EndpointSlices), not both");
  }
  // Issue 20: the pool's mutual TLS and the workers' git credential.
  if (const json* t = Section(obj, "worker_tls", path, false)) {
    const std::string tp = Join(path, "worker_tls");
    CheckKeys(*t, tp, {"certificate", "key", "worker_ca"});
    for (auto [key, field] :
         {std::pair<const char*, std::string*>{"certificate", &out->worker_tls_certificate},
          {"key", &out->worker_tls_key},
          {"worker_ca", &out->worker_tls_ca}}) {
      if (ReadString(*t, key, tp, true, field)) {
        *field = Resolve(*field);
        CheckFile(*field, Join(tp, key));
      }
    }
  } else if (!out->workers.empty() || !out->worker_service.empty()) {
    Problem(Join(path, "worker_tls"),
            std::string("missing required key (scheduler.") +
                (out->workers.empty() ? "worker_service" : "workers") +
                " is set): {certificate, key, worker_ca} for the pool's mutual TLS");
  }
  if (ReadStringList(obj, "worker_token_sha256", path, false, &out->worker_token_sha256))
    CheckTokenList(out->worker_token_sha256, Join(path, "worker_token_sha256"));
}

void ConfigReader::ReadRegistries(const json& obj, std::map<std::string, RegistryConfig>* out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string path = Join("registries", it.key());
    RegistryConfig& r = (*out)[it.key()];
    r.name = it.key();
    Status name_ok = ValidateName(it.key(), "registry");
    if (!name_ok.ok()) Problem(path, name_ok.message());
    if (!it->is_object()) {
      Problem(path, "must be an object, got " + TypeName(*it));
      continue;
    }
    CheckKeys(*it, path, {"url", "auth_file", "ca_file"});
    if (ReadString(*it, "url", path, true, &r.url)) {
      std::string authority;
      std::string why = ParseBaseUrl(r.url, &authority);
      if (why.empty()) {
        registry_authority_[it.key()] = authority;
      } else {
        Problem(Join(path, "url"), why);
      }
    }
    ReadNullableString(*it, "auth_file", path, &r.auth_file);
    if (r.auth_file) {
      r.auth_file = Resolve(*r.auth_file);
      CheckFile(*r.auth_file, Join(path, "auth_file"));
    }
    ReadNullableString(*it, "ca_file", path, &r.ca_file);
    if (r.ca_file) {
      r.ca_file = Resolve(*r.ca_file);
      CheckFile(*r.ca_file, Join(path, "ca_file"));
    }
  }
}

void ConfigReader::ReadDomain(const std::string& name, const json& obj, DomainConfig* out) {
  const std::string path = Join("domains", name);
  Status name_ok = ValidateName(name, "domain");
  if (!name_ok.ok()) Problem(path, name_ok.message());
  if (!obj.is_object()) {
    Problem(path, "must be an object, got " + TypeName(obj));
    return;
  }
  CheckKeys(obj, path,
            {"token_sha256", "weight", "max_candidates", "tool_aliases", "build", "image", "deploy",
             "push", "max_parallel_builds", "storage"});
  if (ReadStringList(obj, "token_sha256", path, true, &out->token_sha256)) {
    if (out->token_sha256.empty())
      Problem(Join(path, "token_sha256"), "at least one token hash is required");
    CheckTokenList(out->token_sha256, Join(path, "token_sha256"));
  }
  ReadInt(obj, "weight", path, 1, 1000, &out->weight);
  ReadInt(obj, "max_candidates", path, 1, 10000, &out->max_candidates);
  ReadToolAliases(obj, path, out);
  // --- per-domain build slots (issue 15) ---
  int slots = 0;
  ReadInt(obj, "max_parallel_builds", path, 1, 64, &slots);
  if (slots > 0) out->max_parallel_builds = slots;
  // --- end per-domain build slots ---
  if (const json* s = Section(obj, "build", path, true))
    ReadBuild(*s, Join(path, "build"), &out->build);
  if (const json* s = Section(obj, "image", path, true))
    ReadImage(*s, Join(path, "image"), &out->image);
  if (const json* s = Section(obj, "deploy", path, false))
    ReadDeploy(*s, Join(path, "deploy"), &out->deploy);
  if (const json* s = Section(obj, "push", path, false))
    ReadPushLimits(*s, Join(path, "push"), &out->push);
  // Issue 19: the domain's storage budget.
  if (const json* s = Section(obj, "storage", path, false))
    ReadDomainStorage(*s, Join(path, "storage"), &out->storage);
}

// --- Issue 15: push limits ---------------------------------------------------------------
void ConfigReader::ReadPushLimits(const json& obj, const std::string& path, PushLimitsConfig* out) {
  CheckKeys(obj, path, {"max_tree_bytes", "max_files", "max_file_bytes", "max_refs_per_push"});
  ReadInt(obj, "max_tree_bytes", path, int64_t{1} << 10, int64_t{1} << 40, &out->max_tree_bytes);
  ReadInt(obj, "max_files", path, 1, 10000000, &out->max_files);
  ReadInt(obj, "max_file_bytes", path, int64_t{1} << 10, int64_t{64} << 30, &out->max_file_bytes);
  ReadInt(obj, "max_refs_per_push", path, 1, 10000, &out->max_refs_per_push);
}
// --- end issue 15 ------------------------------------------------------------------------

void ConfigReader::ReadToolAliases(const json& obj, const std::string& path, DomainConfig* out) {
  if (!ReadStringMap(obj, "tool_aliases", path, &out->tool_aliases)) return;
  const std::string p = Join(path, "tool_aliases");
  for (const auto& [alias, target] : out->tool_aliases) {
    if (!IsAliasName(alias)) {
      Problem(Join(p, alias), "alias must match [a-z][a-z0-9_]{0,63}");
    } else if (IsToolName(alias)) {
      Problem(Join(p, alias), "alias must not shadow the tool of the same name");
    }
    if (!IsToolName(target))
      Problem(Join(p, alias),
              "target '" + target +
                  "' is not a tool (expected one of: build_candidate, deploy_candidate, "
                  "candidate_status, build_log, cancel_build, list_candidates)");
  }
}

void ConfigReader::ReadBuild(const json& obj, const std::string& path, BuildConfig* out) {
  CheckKeys(obj, path,
            {"mode", "timeout_s", "network", "user", "max_file_mb", "containerfile", "layered",
             "base_images", "limits", "on_push", "compression", "cancel_on_disconnect"});
  // Issue 18.
  if (ReadString(obj, "compression", path, false, &out->compression) &&
      out->compression != "auto" && out->compression != "gzip" && out->compression != "none")
    Problem(Join(path, "compression"), "must be one of auto, gzip, none");
  std::string mode;
  if (ReadString(obj, "mode", path, true, &mode)) {
    if (mode == "containerfile" || mode == "layered") {
      out->mode = mode;
    } else {
      Problem(Join(path, "mode"), "must be one of containerfile, layered");
    }
  }
  ReadInt(obj, "timeout_s", path, 1, 86400, &out->timeout_s);
  bool network_set = false;
  std::string network;
  if (ReadString(obj, "network", path, false, &network)) {
    if (network == "none" || network == "host") {
      out->network = network;
      network_set = true;
    } else {
      Problem(Join(path, "network"), "must be one of none, host");
    }
  }
  std::string user;
  if (ReadString(obj, "user", path, false, &user)) {
    // A POSIX-portable user name; root is refused (builds never run as root).
    bool ok = user.size() <= 32 && (IsAlpha(user[0]) || user[0] == '_');
    for (char c : user) ok = ok && (IsAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '.');
    if (!ok) {
      Problem(Join(path, "user"), "must be a user name ([A-Za-z_][A-Za-z0-9_.-]{0,31})");
    } else if (user == "root") {
      Problem(Join(path, "user"), "must not be root: build steps run unprivileged");
    } else {
      out->user = user;
    }
  }
  ReadInt(obj, "max_file_mb", path, 1, int64_t{1} << 20, &out->max_file_mb);
  // --- issue 18: build.on_push ---
  ReadBool(obj, "on_push", path, &out->on_push);
  ReadBool(obj, "cancel_on_disconnect", path, &out->cancel_on_disconnect);  // issue 17
  // --- end issue 18 ---
  // --- issue 15: build.base_images (config/base_image_policy.h) ---
  std::vector<std::string> base_images;
  if (ReadStringList(obj, "base_images", path, false, &base_images)) {
    bool ok = true;
    for (size_t i = 0; i < base_images.size(); ++i) {
      std::string why = ValidateBaseImagePattern(base_images[i]);
      if (!why.empty()) {
        Problem(Index(Join(path, "base_images"), i), why);
        ok = false;
      }
    }
    if (ok) out->base_images = base_images;
  }
  // --- end issue 15 ---
  // Issue 15: build.limits.
  if (const json* s = Section(obj, "limits", path, false))
    ReadSandboxLimits(*s, Join(path, "limits"), &out->limits);
  if (const json* s = Section(obj, "containerfile", path, false))
    ReadContainerfile(*s, Join(path, "containerfile"), &out->containerfile);
  // build.network is the setting; containerfile.network (a boolean) is its older spelling.
  if (const json* cf = Section(obj, "containerfile", path, false)) {
    auto it = cf->find("network");
    if (network_set && it != cf->end() && it->is_boolean() &&
        it->get<bool>() != (out->network == "host"))
      Problem(Join(path, "containerfile.network"),
              "contradicts build.network (drop containerfile.network)");
  }
  if (!network_set && out->containerfile.network) out->network = "host";
  out->containerfile.network = out->network == "host";
  bool need_layered = mode == "layered";
  if (const json* s = Section(obj, "layered", path, false)) {
    out->layered.emplace();
    ReadLayered(*s, Join(path, "layered"), &*out->layered);
  } else if (need_layered && obj.find("layered") == obj.end()) {
    Problem(Join(path, "layered"), "missing required key (build.mode is layered)");
  }
}

// Issue 15: sandbox limits.
void ConfigReader::ReadSandboxLimits(const json& obj, const std::string& path,
                                     SandboxLimitsConfig* out) {
  CheckKeys(obj, path, {"max_processes", "max_memory_mb"});
  ReadInt(obj, "max_processes", path, 1, int64_t{1} << 20, &out->max_processes);
  ReadInt(obj, "max_memory_mb", path, 16, int64_t{1} << 20, &out->max_memory_mb);
}

void ConfigReader::ReadContainerfile(const json& obj, const std::string& path,
                                     ContainerfileBuild* out) {
  CheckKeys(obj, path, {"file", "context", "target", "build_args", "network", "step_cache"});
  if (ReadString(obj, "file", path, false, &out->file))
    CheckRelativePath(out->file, Join(path, "file"));
  if (ReadString(obj, "context", path, false, &out->context))
    CheckRelativePath(out->context, Join(path, "context"));
  ReadNullableString(obj, "target", path, &out->target);
  if (out->target) {
    Status s = ValidateName(*out->target, "target stage");
    if (!s.ok()) Problem(Join(path, "target"), s.message());
  }
  if (ReadStringMap(obj, "build_args", path, &out->build_args)) {
    for (const auto& kv : out->build_args)
      if (!IsEnvName(kv.first))
        Problem(Join(Join(path, "build_args"), kv.first),
                "build argument name must match [A-Za-z_][A-Za-z0-9_]*");
  }
  ReadBool(obj, "network", path, &out->network);
  if (ReadString(obj, "step_cache", path, false, &out->step_cache) && out->step_cache != "auto" &&
      out->step_cache != "always" && out->step_cache != "never")
    Problem(Join(path, "step_cache"), "must be \"auto\", \"always\" or \"never\"");
}

void ConfigReader::ReadLayered(const json& obj, const std::string& path, LayeredBuild* out) {
  CheckKeys(obj, path, {"base_image", "command", "env", "caches", "outputs", "entrypoint"});
  if (ReadString(obj, "base_image", path, true, &out->base_image))
    CheckBaseImage(out->base_image, Join(path, "base_image"));
  if (ReadStringList(obj, "command", path, true, &out->command)) {
    if (out->command.empty()) {
      Problem(Join(path, "command"), "must not be empty");
    } else if (out->command[0].empty()) {
      Problem(Join(path, "command[0]"), "program name must not be empty");
    }
  }
  if (ReadStringMap(obj, "env", path, &out->env)) {
    for (const auto& kv : out->env)
      if (!IsEnvName(kv.first))
        Problem(Join(Join(path, "env"), kv.first),
                "environment variable name must match [A-Za-z_][A-Za-z0-9_]*");
  }
  if (ReadStringMap(obj, "caches", path, &out->caches)) {
    for (const auto& [var, cache] : out->caches) {
      const std::string p = Join(Join(path, "caches"), var);
      if (!IsEnvName(var))
        Problem(p, "environment variable name must match [A-Za-z_][A-Za-z0-9_]*");
      Status s = ValidateName(cache, "cache");
      if (!s.ok()) Problem(p, s.message());
    }
  }
  const json* outputs = Find(obj, "outputs", path, true);
  if (outputs != nullptr) {
    const std::string p = Join(path, "outputs");
    if (!outputs->is_array()) {
      Problem(p, "must be an array of {from, to} objects, got " + TypeName(*outputs));
    } else if (outputs->empty()) {
      Problem(p, "at least one output is required");
    } else {
      for (size_t i = 0; i < outputs->size(); ++i) {
        const json& o = (*outputs)[i];
        const std::string op = Index(p, i);
        if (!o.is_object()) {
          Problem(op, "must be an object, got " + TypeName(o));
          continue;
        }
        CheckKeys(o, op, {"from", "to"});
        LayeredOutput lo;
        if (ReadString(o, "from", op, true, &lo.from)) CheckRelativePath(lo.from, Join(op, "from"));
        if (ReadString(o, "to", op, true, &lo.to)) {
          if (lo.to[0] != '/') {
            Problem(Join(op, "to"), "must be an absolute path in the image");
          } else if (HasDotDotSegment(lo.to)) {
            Problem(Join(op, "to"), "must not contain '..' segments");
          }
        }
        out->outputs.push_back(lo);
      }
    }
  }
  ReadStringList(obj, "entrypoint", path, false, &out->entrypoint);
}

void ConfigReader::CheckBaseImage(const std::string& image, const std::string& path) {
  const std::string shape = "must be <registry host:port>/<repository>@sha256:<64 lowercase hex>";
  size_t at = image.rfind('@');
  if (at == std::string::npos) {
    Problem(path, "must be pinned by digest: " + shape);
    return;
  }
  std::string digest = image.substr(at + 1);
  if (!IsSha256Digest(digest)) {
    Problem(path, "malformed digest: " + shape);
    return;
  }
  std::string name = image.substr(0, at);
  size_t slash = name.find('/');
  if (slash == std::string::npos) {
    Problem(path, "names no registry: " + shape);
    return;
  }
  std::string host = name.substr(0, slash);
  if (!IsRepositoryName(name.substr(slash + 1))) {
    Problem(path,
            "malformed repository (lowercase [a-z0-9._-] components separated by '/'): " + shape);
    return;
  }
  for (const auto& kv : registry_authority_)
    if (kv.second == host) return;
  Problem(path, "registry '" + host + "' matches the url of no entry in registries");
}

void ConfigReader::ReadImage(const json& obj, const std::string& path, ImageConfig* out) {
  CheckKeys(obj, path, {"registry", "repository"});
  // Registries are read before domains, so the names are known here.
  if (ReadString(obj, "registry", path, true, &out->registry) &&
      registry_authority_.count(out->registry) == 0) {
    Problem(Join(path, "registry"),
            "unknown registry '" + out->registry + "' (not a key of registries)");
  }
  if (ReadString(obj, "repository", path, true, &out->repository) &&
      !IsRepositoryName(out->repository)) {
    Problem(Join(path, "repository"),
            "must be lowercase [a-z0-9._-] components separated by '/', e.g. loop/app");
  }
}

void ConfigReader::ReadDeploy(const json& obj, const std::string& path, DeployConfig* out) {
  CheckKeys(obj, path, {"type", "kubernetes", "local"});
  std::string type;
  if (ReadString(obj, "type", path, true, &type)) {
    if (type == "kubernetes" || type == "local" || type == "none") {
      out->type = type;
    } else {
      Problem(Join(path, "type"), "must be one of kubernetes, local, none");
    }
  }
  // Issue 16: only what the chosen type uses is validated (a leftover "kubernetes" block of a
  // domain whose deploy.type is "none" must not stop kiln because its kubeconfig is gone).
  const bool known_type = out->type == type;
  for (const char* section : {"kubernetes", "local"})
    if (known_type && type != section && obj.is_object() && obj.contains(section))
      out->ignored_sections.push_back(section);
  auto used = [&](const char* section) { return !known_type || type == section; };
  if (const json* k =
          used("kubernetes") ? Section(obj, "kubernetes", path, type == "kubernetes") : nullptr) {
    const std::string p = Join(path, "kubernetes");
    CheckKeys(*k, p,
              {"namespace", "deployment", "container", "kubeconfig", "rollout_timeout_s",
               // Issue 16: Kubernetes deploy failures say why
               "unready_timeout_s"});
    KubernetesDeploy kd;
    if (ReadString(*k, "namespace", p, true, &kd.namespace_) && !IsDnsName(kd.namespace_, false))
      Problem(Join(p, "namespace"), "must be a DNS-1123 label (lowercase [a-z0-9-], max 63)");
    if (ReadString(*k, "deployment", p, true, &kd.deployment) && !IsDnsName(kd.deployment, true))
      Problem(Join(p, "deployment"),
              "must be a DNS-1123 subdomain (lowercase [a-z0-9.-], max 253)");
    if (ReadString(*k, "container", p, true, &kd.container) && !IsDnsName(kd.container, false))
      Problem(Join(p, "container"), "must be a DNS-1123 label (lowercase [a-z0-9-], max 63)");
    ReadNullableString(*k, "kubeconfig", p, &kd.kubeconfig);
    if (kd.kubeconfig) {
      kd.kubeconfig = Resolve(*kd.kubeconfig);
      CheckFile(*kd.kubeconfig, Join(p, "kubeconfig"));
    }
    ReadInt(*k, "rollout_timeout_s", p, 1, 86400, &kd.rollout_timeout_s);
    // --- Issue 16: Kubernetes deploy failures say why ---
    ReadInt(*k, "unready_timeout_s", p, 1, 86400, &kd.unready_timeout_s);
    // --- end Issue 16 ---
    out->kubernetes = kd;
  }
  if (const json* l = used("local") ? Section(obj, "local", path, false) : nullptr) {
    const std::string p = Join(path, "local");
    CheckKeys(*l, p, {"port", "health_path", "user", "max_rootfs_mb", "max_file_mb", "limits"});
    LocalDeploy ld;
    ReadInt(*l, "port", p, 1, 65535, &ld.port);
    if (ReadString(*l, "health_path", p, false, &ld.health_path) && ld.health_path[0] != '/')
      Problem(Join(p, "health_path"), "must start with '/'");
    // Issue 15: the local sandbox's user and limits.
    std::string user;
    if (ReadString(*l, "user", p, false, &user)) {
      if (!IsUserName(user)) {
        Problem(Join(p, "user"), "must be a user name ([A-Za-z_][A-Za-z0-9_.-]{0,31})");
      } else if (user == "root") {
        Problem(Join(p, "user"), "must not be root: candidates run unprivileged");
      } else {
        ld.user = user;
      }
    }
    ReadInt(*l, "max_rootfs_mb", p, 1, int64_t{1} << 20, &ld.max_rootfs_mb);
    ReadInt(*l, "max_file_mb", p, 1, int64_t{1} << 20, &ld.max_file_mb);
    if (const json* s = Section(*l, "limits", p, false))
      ReadSandboxLimits(*s, Join(p, "limits"), &ld.limits);
    out->local = ld;
  } else if (out->type == "local" && !out->local) {
    out->local = LocalDeploy{};
  }
}

void ConfigReader::CheckUniqueTokens(const Config& config) {
  std::map<std::string, std::string> first_use;  // hash -> path of its first use
  auto check = [&](const std::vector<std::string>& tokens, const std::string& path) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string p = Index(path, i);
      auto [it, inserted] = first_use.emplace(tokens[i], p);
      if (!inserted)
        Problem(p, "same token hash as " + it->second +
                       "; a token must select exactly one domain or the operator");
    }
  };
  check(config.operator_token_sha256, "operator_token_sha256");
  check(config.scheduler.worker_token_sha256, "scheduler.worker_token_sha256");  // issue 20
  for (const auto& [name, d] : config.domains)
    check(d.token_sha256, Join(Join("domains", name), "token_sha256"));
}

std::string StripJsonExceptionId(const std::string& what) {
  // nlohmann messages start with "[json.exception.parse_error.101] ".
  size_t close = what.find("] ");
  return (what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
             ? what.substr(close + 2)
             : what;
}

}  // namespace

std::string FormatConfigProblem(const ConfigProblem& problem) {
  return problem.path.empty() ? problem.reason : problem.path + ": " + problem.reason;
}

std::vector<ConfigProblem> ParseConfigRelativeTo(const std::string& json_text,
                                                 const std::string& base_dir, Config* out) {
  std::vector<ConfigProblem> problems;
  DuplicateKeyTracker dups(&problems);
  json root;
  try {
    root = json::parse(json_text, [&dups](int, json::parse_event_t event, json& parsed) {
      return dups.OnEvent(event, parsed);
    });
  } catch (const json::parse_error& e) {
    problems.clear();  // duplicate-key reports from a half-parsed document are noise
    problems.push_back({"", "malformed JSON at byte " + std::to_string(e.byte) + ": " +
                                StripJsonExceptionId(e.what())});
    return problems;
  } catch (const json::exception& e) {
    problems.clear();
    problems.push_back({"", "malformed JSON: " + StripJsonExceptionId(e.what())});
    return problems;
  }
  std::string base;
  if (!base_dir.empty()) {
    std::error_code ec;
    std::filesystem::path abs = std::filesystem::absolute(base_dir, ec);
    base = ec ? base_dir : abs.lexically_normal().string();
  }
  ConfigReader(base, &problems).Read(root, out);
  return problems;
}

std::vector<ConfigProblem> ParseConfig(const std::string& json_text, Config* out) {
  return ParseConfigRelativeTo(json_text, "", out);
}

std::vector<ConfigProblem> LoadConfigFile(const std::string& path, Config* out) {
  std::string why = CheckReadableFile(path);
  if (!why.empty()) return {{"", why}};
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {{"", "cannot read config file '" + path + "': " + std::strerror(errno)}};
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      return {{"", "cannot read config file '" + path + "': " + std::strerror(saved)}};
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  std::string dir = std::filesystem::path(path).parent_path().string();
  return ParseConfigRelativeTo(text, dir.empty() ? "." : dir, out);
}

std::vector<ConfigProblem> CollectConfigWarnings(const Config& config) {
  std::vector<ConfigProblem> warnings;
  for (const auto& [name, d] : config.domains) {
    const std::string build = Join(Join("domains", name), "build");
    if (d.build.network == "host")
      warnings.push_back(
          {Join(build, "network"),
           "!!! build.network is \"host\": this domain's build steps (agent-written code) share "
           "the host network and can reach kiln's HTTP port, the registry, the Kubernetes API "
           "and anything else listening on 127.0.0.1 or the network !!!"});
    if (d.build.mode == "containerfile" && d.build.layered)
      warnings.push_back({Join(build, "layered"), "ignored because build.mode is containerfile"});
    // Issue 16
    for (const std::string& section : d.deploy.ignored_sections)
      warnings.push_back({Join(Join(Join("domains", name), "deploy"), section),
                          "ignored (not validated) because deploy.type is \"" + d.deploy.type +
                              "\"; remove it, or set deploy.type to \"" + section +
                              "\" to use it"});
  }
  // Sessions: when every domain may hold its full share, the global pool must fit them all, or
  // busy domains fill it and a quiet one is refused with 503 before reaching its own cap.
  const long long domains = static_cast<long long>(config.domains.size());
  const long long per_domain = config.server.max_sessions_per_domain;
  if (per_domain > 0 && domains > 1 && config.server.max_sessions < domains * per_domain)
    warnings.push_back(
        {"server.max_sessions",
         std::to_string(config.server.max_sessions) + " is less than " + std::to_string(domains) +
             " domains x server.max_sessions_per_domain " + std::to_string(per_domain) + " = " +
             std::to_string(domains * per_domain) +
             ": busy domains can fill the global pool and lock a quiet one out; raise "
             "server.max_sessions or lower server.max_sessions_per_domain"});
  return warnings;
}

int CheckConfigCommand(const std::string& path, std::ostream& out, std::ostream& err) {
  return CheckConfigCommandWithFacts(path, ProbeHost(), out, err);
}

int CheckConfigCommandWithFacts(const std::string& path, const HostFacts& facts, std::ostream& out,
                                std::ostream& err) {
  Config config;
  std::vector<ConfigProblem> problems = LoadConfigFile(path, &config);
  std::vector<ConfigProblem> warnings = CollectConfigWarnings(config);
  // Host checks only for a valid config: with a broken one they would mostly repeat its errors.
  if (problems.empty()) CheckBuildHost(config, facts, &problems, &warnings);
  // issue 15: overlapping domain repositories, base_images granting another domain's images.
  if (problems.empty()) CheckDomainIsolation(config, &problems, &warnings);
  for (const ConfigProblem& p : problems)
    err << (p.path.empty() ? path : p.path) << ": " << p.reason << "\n";
  for (const ConfigProblem& w : warnings) out << "WARNING: " << FormatConfigProblem(w) << "\n";
  if (!problems.empty()) return 1;
  out << "config OK: " << config.domains.size() << " domains, " << config.registries.size()
      << " registries\n";
  return 0;
}

// Issue 20.
std::string ParseWorkerAddress(const std::string& entry, std::string* host, int* port) {
  size_t colon = entry.rfind(':');
  if (colon == std::string::npos || colon + 1 == entry.size()) return "is not host:port";
  std::string h = entry.substr(0, colon), p = entry.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return "is not host:port (write an IPv6 address as [address]:port)";
  }
  if (h.empty()) return "has an empty host";
  if (p.empty() || p.size() > 5 || !std::all_of(p.begin(), p.end(), ::isdigit) ||
      std::stoi(p) < 1 || std::stoi(p) > 65535) {
    return "has a port outside 1..65535";
  }
  *host = h;
  *port = std::stoi(p);
  return "";
}

}  // namespace kiln
