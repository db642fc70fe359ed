#include "k8s/kube_config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/base64.h"
#include "common/file_util.h"

namespace kiln {

namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return base_dir + "/" + p;
}

}  // namespace

// ------------------------------------------------------------------------------ TokenSource

std::shared_ptr<TokenSource> TokenSource::Fixed(std::string token) {
  std::shared_ptr<TokenSource> t(new TokenSource());
  t->fixed_ = Trim(token);
  return t;
}

std::shared_ptr<TokenSource> TokenSource::File(std::string path) {
  std::shared_ptr<TokenSource> t(new TokenSource());
  t->path_ = std::move(path);
  return t;
}

Status TokenSource::Get(std::string* token) {
  if (path_.empty()) {
    if (fixed_.empty()) return Status::FailedPrecondition("the configured token is empty");
    *token = fixed_;
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  struct stat st {};
  // stat (not lstat): kubelet swaps projected tokens through a symlink.
  if (::stat(path_.c_str(), &st) != 0)
    return Status::FailedPrecondition("cannot read token file " + path_);
  int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  bool same = have_ && dev_ == st.st_dev && ino_ == st.st_ino &&
              size_ == static_cast<uint64_t>(st.st_size) && mtime_ns_ == mtime_ns;
  if (!same) {
    std::string text;
    if (!ReadFile(path_, &text))
      return Status::FailedPrecondition("cannot read token file " + path_);
    text = Trim(text);
    if (text.empty()) return Status::FailedPrecondition("token file " + path_ + " is empty");
    cached_ = std::move(text);
    have_ = true;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    size_ = static_cast<uint64_t>(st.st_size);
    mtime_ns_ = mtime_ns;
  }
  *token = cached_;
  return Status::Ok();
}

bool TokenSource::Refresh() {
  if (path_.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  have_ = false;
  return true;
}

std::string TokenSource::Describe() const {
  return path_.empty() ? "the configured token" : "token file " + path_;
}

// ------------------------------------------------------------------------------ in-cluster

InClusterSource InClusterSource::FromEnvironment(const std::string& sa_dir) {
  InClusterSource s;
  const char* h = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* p = std::getenv("KUBERNETES_SERVICE_PORT");
  s.service_host = h ? h : "";
  s.service_port = p ? p : "";
  s.sa_dir = sa_dir;
  return s;
}

Status LoadInClusterConfig(const InClusterSource& src, KubeConfig* out) {
  if (src.service_host.empty() || src.service_port.empty())
    return Status::FailedPrecondition(
        "not running in a Kubernetes cluster: KUBERNETES_SERVICE_HOST and "
        "KUBERNETES_SERVICE_PORT are not set (set deploy.kubernetes.kubeconfig instead)");
  for (char c : src.service_port)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return Status::FailedPrecondition("KUBERNETES_SERVICE_PORT '" + src.service_port +
                                        "' is not a port number");
  const std::string token_path = src.sa_dir + "/token";
  const std::string ca_path = src.sa_dir + "/ca.crt";
  struct stat st {};
  if (::stat(token_path.c_str(), &st) != 0)
    return Status::FailedPrecondition("in-cluster config: cannot read service-account token " +
                                      token_path);
  if (::stat(ca_path.c_str(), &st) != 0)
    return Status::FailedPrecondition("in-cluster config: cannot read service-account CA " +
                                      ca_path);
  KubeConfig c;
  bool v6 = src.service_host.find(':') != std::string::npos;
  c.server =
      "https://" + (v6 ? "[" + src.service_host + "]" : src.service_host) + ":" + src.service_port;
  c.tls.ca_file = ca_path;
  c.token = TokenSource::File(token_path);
  std::string ns;
  if (ReadFile(src.sa_dir + "/namespace", &ns)) c.namespace_ = Trim(ns);
  c.source = "in-cluster service account (" + src.sa_dir + ")";
  *out = std::move(c);
  return Status::Ok();
}

// ------------------------------------------------------------------------------ kubeconfig

namespace {

// Finds the entry of a named list ("clusters", "contexts", "users") whose name is `name`.
YAML::Node FindNamed(const YAML::Node& root, const char* list, const std::string& name) {
  YAML::Node l = root[list];
  if (!l || !l.IsSequence()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& e : l) {
    if (e.IsMap() && e["name"] && e["name"].IsScalar() && e["name"].as<std::string>() == name)
      return e;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string Str(const YAML::Node& m, const char* key) {
  YAML::Node v = m[key];
  if (!v || !v.IsScalar()) return "";
  return v.as<std::string>();
}

bool Has(const YAML::Node& m, const char* key) {
  YAML::Node v = m[key];
  return v && !v.IsNull();
}

// One PEM value from "<key>" (a path) or "<key>-data" (base64). Empty *file and *pem when unset.
Status PemSetting(const YAML::Node& m, const std::string& key, const std::string& where,
                  const std::string& base_dir, std::optional<std::string>* file,
                  std::optional<std::string>* pem) {
  std::string path = Str(m, key.c_str());
  std::string data_key = key + "-data";
  if (Has(m, data_key.c_str())) {
    std::string decoded;
    if (!DecodeBase64(Str(m, data_key.c_str()), &decoded) || decoded.empty())
      return Status::InvalidArgument(where + ": " + data_key + " is not valid base64");
    *pem = decoded;  // data takes precedence over the path, as in kubectl
  } else if (!path.empty()) {
    *file = Resolve(base_dir, path);
  }
  return Status::Ok();
}

}  // namespace

Status ParseKubeconfig(const std::string& text, const std::string& path,
                       const std::string& base_dir, const std::string& want_context,
                       KubeConfig* out) {
  const std::string where = "kubeconfig " + path;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(where + ": not valid YAML (line " +
                                   std::to_string(e.mark.line + 1) + ")");
  }
  if (!root.IsMap()) return Status::InvalidArgument(where + ": not a kubeconfig mapping");
  try {
    std::string ctx_name = want_context.empty() ? Str(root, "current-context") : want_context;
    if (ctx_name.empty()) return Status::InvalidArgument(where + ": no current-context is set");
    YAML::Node ctx_entry = FindNamed(root, "contexts", ctx_name);
    if (!ctx_entry || !ctx_entry["context"] || !ctx_entry["context"].IsMap())
      return Status::InvalidArgument(where + ": context \"" + ctx_name + "\" not found");
    YAML::Node ctx = ctx_entry["context"];
    std::string cluster_name = Str(ctx, "cluster");
    std::string user_name = Str(ctx, "user");
    if (cluster_name.empty())
      return Status::InvalidArgument(where + ": context \"" + ctx_name + "\" names no cluster");
    YAML::Node cluster_entry = FindNamed(root, "clusters", cluster_name);
    if (!cluster_entry || !cluster_entry["cluster"] || !cluster_entry["cluster"].IsMap())
      return Status::InvalidArgument(where + ": cluster \"" + cluster_name + "\" not found");
    YAML::Node cluster = cluster_entry["cluster"];
    const std::string cwhere = where + ": cluster \"" + cluster_name + "\"";

    KubeConfig c;
    c.server = Str(cluster, "server");
    while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
    if (c.server.empty()) return Status::InvalidArgument(cwhere + " has no server");
    HttpOrigin origin;
    std::string rest;
    if (!ParseHttpUrl(c.server, &origin, &rest))
      return Status::InvalidArgument(cwhere + ": server '" + c.server +
                                     "' is not https://host[:port]");
    if (!origin.tls)
      return Status::InvalidArgument(cwhere + ": server '" + c.server +
                                     "' is plain http; kiln talks to Kubernetes over https only");
    if (!rest.empty())
      return Status::InvalidArgument(cwhere + ": server '" + c.server +
                                     "' has a path; kiln supports https://host[:port] only");
    if (Has(cluster, "insecure-skip-tls-verify") &&
        cluster["insecure-skip-tls-verify"].IsScalar() &&
        cluster["insecure-skip-tls-verify"].as<std::string>() != "false")
      return Status::InvalidArgument(
          cwhere +
          " sets insecure-skip-tls-verify; kiln always verifies the API server's "
          "certificate: set certificate-authority or certificate-authority-data instead");
    if (Has(cluster, "proxy-url"))
      return Status::InvalidArgument(cwhere + " sets proxy-url, which kiln does not support");
    if (Has(cluster, "tls-server-name"))
      return Status::InvalidArgument(cwhere + " sets tls-server-name, which kiln does not support");
    Status st = PemSetting(cluster, "certificate-authority", cwhere, base_dir, &c.tls.ca_file,
                           &c.tls.ca_pem);
    if (!st.ok()) return st;

    if (!user_name.empty()) {
      YAML::Node user_entry = FindNamed(root, "users", user_name);
      if (!user_entry)
        return Status::InvalidArgument(where + ": user \"" + user_name + "\" not found");
      YAML::Node user = user_entry["user"];
      const std::string uwhere = where + ": user \"" + user_name + "\"";
      if (user && user.IsMap()) {
        if (Has(user, "exec"))
          return Status::InvalidArgument(
              uwhere +
              " uses an exec credential plugin, which kiln does not run; use a "
              "service-account token (token or tokenFile) or a client certificate");
        if (Has(user, "auth-provider"))
          return Status::InvalidArgument(
              uwhere +
              " uses an auth-provider plugin, which kiln does not support; use a "
              "service-account token (token or tokenFile) or a client certificate");
        if (Has(user, "username") || Has(user, "password"))
          return Status::InvalidArgument(uwhere +
                                         " uses basic auth (username/password), which kiln does "
                                         "not support; use a token or a client certificate");
        std::string token = Str(user, "token");
        std::string token_file = Str(user, "tokenFile");
        if (!token.empty()) {
          c.token = TokenSource::Fixed(token);
        } else if (!token_file.empty()) {
          c.token = TokenSource::File(Resolve(base_dir, token_file));
        }
        st = PemSetting(user, "client-certificate", uwhere, base_dir, &c.tls.client_cert_file,
                        &c.tls.client_cert_pem);
        if (!st.ok()) return st;
        st = PemSetting(user, "client-key", uwhere, base_dir, &c.tls.client_key_file,
                        &c.tls.client_key_pem);
        if (!st.ok()) return st;
        bool cert = c.tls.client_cert_file || c.tls.client_cert_pem;
        bool key = c.tls.client_key_file || c.tls.client_key_pem;
        if (cert != key)
          return Status::InvalidArgument(uwhere +
                                         " gives a client certificate without its key "
                                         "(or a key without its certificate)");
      }
    }
    if (!c.token && !c.tls.client_cert_file && !c.tls.client_cert_pem)
      return Status::InvalidArgument(where + ": context \"" + ctx_name +
                                     "\" has no credential (token, tokenFile or client "
                                     "certificate)");
    c.namespace_ = Str(ctx, "namespace");
    c.source = where + " (context \"" + ctx_name + "\")";
    *out = std::move(c);
    return Status::Ok();
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(where + ": unexpected structure (line " +
                                   std::to_string(e.mark.line + 1) + ")");
  }
}

Status LoadKubeconfig(const std::string& path, const std::string& context, KubeConfig* out) {
  std::string text;
  if (!ReadFile(path, &text)) return Status::FailedPrecondition("cannot read kubeconfig " + path);
  return ParseKubeconfig(text, path, DirName(path), context, out);
}

}  // namespace kiln
