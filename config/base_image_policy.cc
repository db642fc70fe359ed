#include "config/base_image_policy.h"

#include <utility>

#include "common/sha256.h"

namespace kiln {
namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One repository path segment: [a-z0-9]+ separated by '.', '_', '__' or '-'s (lowercased).
bool ValidSegment(const std::string& s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s)
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

bool ValidTag(const std::string& t) {
  if (t.empty() || t.size() > 128) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    bool ok =
        isalnum(static_cast<unsigned char>(c)) || c == '_' || (i > 0 && (c == '.' || c == '-'));
    if (!ok) return false;
  }
  return true;
}

bool ValidHost(const std::string& h) {
  if (h.empty()) return false;
  for (char c : h)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '[' &&
        c != ']')
      return false;
  return true;
}

// Glob over a repository or tag: `*` any run without '/', `**` any run, `?` one non-'/'.
bool Glob(const char* p, const char* s) {
  for (; *p; ++p) {
    if (*p == '*') {
      bool deep = p[1] == '*';
      const char* rest = p + (deep ? 2 : 1);
      for (const char* t = s;; ++t) {
        if (Glob(rest, t)) return true;
        if (!*t || (!deep && *t == '/')) return false;
      }
    }
    if (!*s) return false;
    if (*p == '?') {
      if (*s == '/') return false;
    } else if (*p != *s) {
      return false;
    }
    ++s;
  }
  return *s == '\0';
}

bool HasGlob(const std::string& s) { return s.find_first_of("*?") != std::string::npos; }

// Splits a pattern into repository glob, tag glob ("" = any) and digest ("" = any).
void SplitPattern(const std::string& pattern, std::string* repo, std::string* tag,
                  std::string* digest) {
  std::string rest = pattern;
  digest->clear();
  tag->clear();
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    *digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
  }
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find('/', colon) == std::string::npos) {
    *tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  *repo = rest;
}

// `repo` is `base` or lies under it.
bool UnderRepo(const std::string& repo, const std::string& base) {
  return repo == base || (repo.size() > base.size() && repo.compare(0, base.size(), base) == 0 &&
                          repo[base.size()] == '/');
}

// Could the (valid) repository glob match `base` or something under it?
bool GlobCovers(const std::string& glob, const std::string& base) {
  if (Glob(glob.c_str(), base.c_str())) return true;
  if (Glob(glob.c_str(), (base + "/x").c_str())) return true;
  // The literal prefix before the first wildcard already lies under `base`.
  size_t star = glob.find_first_of("*?");
  std::string lit = glob.substr(0, star);
  return lit.size() > base.size() && lit.compare(0, base.size() + 1, base + "/") == 0;
}

}  // namespace

std::string RegistryHostOf(const std::string& url) {
  std::string s = url;
  auto p = s.find("://");
  if (p != std::string::npos) s = s.substr(p + 3);
  while (!s.empty() && s.back() == '/') s.pop_back();
  return Lower(s);
}

bool ParseImageRef(const std::string& image, ImageRef* out, std::string* why) {
  *out = ImageRef{};
  if (image.empty()) {
    *why = "the name is empty";
    return false;
  }
  if (image.find('$') != std::string::npos) {
    *why = "it names a variable kiln cannot resolve (no default and no build arg)";
    return false;
  }
  if (image.size() > 512) {
    *why = "the name is longer than 512 characters";
    return false;
  }
  for (char c : image) {
    if (c <= ' ' || c == '"' || c == '\'' || c == '\\' || static_cast<unsigned char>(c) >= 0x7f) {
      *why = "the name contains a space, quote or control character";
      return false;
    }
  }
  std::string rest = image;
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    out->digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (!IsSha256Digest(out->digest)) {
      *why = "the digest is not sha256:<64 lowercase hex digits>";
      return false;
    }
  }
  size_t slash = rest.find('/');
  std::string first = rest.substr(0, slash);
  bool has_host = slash != std::string::npos && (first.find_first_of(".:") != std::string::npos ||
                                                 first == "localhost" || Lower(first) != first);
  std::string path = rest;
  if (has_host) {
    out->host = Lower(first);
    path = rest.substr(slash + 1);
    if (!ValidHost(out->host)) {
      *why = "the registry host is not a host[:port]";
      return false;
    }
  } else {
    out->host = "docker.io";
  }
  if (out->host == "index.docker.io" || out->host == "registry-1.docker.io")
    out->host = "docker.io";
  size_t colon = path.rfind(':');
  if (colon != std::string::npos && path.find('/', colon) == std::string::npos) {
    out->tag = path.substr(colon + 1);
    path = path.substr(0, colon);
    if (!ValidTag(out->tag)) {
      *why = "the tag is not a valid tag";
      return false;
    }
  }
  path = Lower(path);
  if (path.empty()) {
    *why = "it names no repository";
    return false;
  }
  size_t start = 0;
  while (true) {
    size_t end = path.find('/', start);
    std::string seg =
        path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!ValidSegment(seg)) {
      *why = "repository path segment '" + seg + "' is not valid ([a-z0-9] separated by . _ -)";
      return false;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (out->host == "docker.io" && path.find('/') == std::string::npos) path = "library/" + path;
  out->repository = path;
  return true;
}

std::string ValidateBaseImagePattern(const std::string& pattern) {
  if (pattern.empty()) return "must not be empty";
  if (pattern.size() > 256) return "must be at most 256 characters";
  std::string repo, tag, digest;
  SplitPattern(pattern, &repo, &tag, &digest);
  if (!digest.empty() && !IsSha256Digest(digest)) return "digest must be sha256:<64 lowercase hex>";
  if (pattern.find('@') != std::string::npos && digest.empty()) return "digest is empty";
  if (pattern.find(':') != std::string::npos && pattern.find('@') == std::string::npos &&
      tag.empty())
    return "tag is empty, or the pattern names a registry host (patterns are repositories on the "
           "domain's registry, e.g. \"kiln/*\")";
  if (!tag.empty()) {
    for (char c : tag)
      if (!isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' && c != '*' &&
          c != '?')
        return "tag pattern may hold only [A-Za-z0-9_.-] and * ?";
  }
  if (repo.empty()) return "names no repository";
  size_t slash = repo.find('/');
  std::string first = repo.substr(0, slash);
  if (slash != std::string::npos && (first.find(':') != std::string::npos || first == "localhost"))
    return "must not name a registry host: patterns are repositories on the domain's registry "
           "(e.g. \"kiln/*\")";
  size_t start = 0;
  while (true) {
    size_t end = repo.find('/', start);
    std::string seg =
        repo.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (seg.empty()) return "has an empty path segment";
    for (char c : seg)
      if (!IsAlnum(c) && c != '.' && c != '_' && c != '-' && c != '*' && c != '?')
        return "repository pattern may hold only [a-z0-9._-/] and * ? (lowercase)";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

bool BaseImagePatternMatches(const std::string& pattern, const ImageRef& ref) {
  std::string repo, tag, digest;
  SplitPattern(pattern, &repo, &tag, &digest);
  if (!Glob(repo.c_str(), ref.repository.c_str())) return false;
  if (!tag.empty() && (ref.tag.empty() || !Glob(tag.c_str(), ref.tag.c_str()))) return false;
  if (!digest.empty() && ref.digest != digest) return false;
  return true;
}

BaseImagePolicy::BaseImagePolicy(std::string domain, std::string registry_host,
                                 std::string own_repository,
                                 std::optional<std::vector<std::string>> patterns,
                                 std::map<std::string, std::string> others)
    : domain_(std::move(domain)),
      host_(Lower(std::move(registry_host))),
      own_(Lower(std::move(own_repository))),
      patterns_(std::move(patterns)),
      others_(std::move(others)) {
  for (auto& [d, r] : others_) r = Lower(r);
}

BaseImagePolicy BaseImagePolicy::ForDomain(const Config& config, const std::string& domain) {
  auto hostof = [&](const DomainConfig& d) {
    auto it = config.registries.find(d.image.registry);
    return it == config.registries.end() ? std::string() : RegistryHostOf(it->second.url);
  };
  const DomainConfig& me = config.domains.at(domain);
  std::string host = hostof(me);
  std::map<std::string, std::string> others;
  for (const auto& [name, d] : config.domains)
    if (name != domain && hostof(d) == host) others[name] = d.image.repository;
  return BaseImagePolicy(domain, host, me.image.repository, me.build.base_images, others);
}

std::string BaseImagePolicy::AllowedText() const {
  if (!patterns_) return "any repository on " + host_ + " except other domains' image repositories";
  if (patterns_->empty()) return "only " + own_;
  std::string s;
  for (const auto& p : *patterns_) s += (s.empty() ? "" : ", ") + p;
  return s;
}

Status BaseImagePolicy::Check(const std::string& image) const {
  const std::string head = "base image '" + image + "' is not allowed for domain " + domain_ + ": ";
  ImageRef ref;
  std::string why;
  if (!ParseImageRef(image, &ref, &why))
    return Status::FailedPrecondition(head + why + " (write the full name, e.g. " + host_ + "/" +
                                      own_ + ":<tag>, or pass it in build_args)");
  if (ref.host != host_)
    return Status::FailedPrecondition(
        "base image '" + image + "' is not in the domain's registry " + host_ +
        ": builds have no network, kiln provides base images from " + host_ + " only");
  for (const auto& [other, repo] : others_) {
    if (!UnderRepo(ref.repository, repo)) continue;
    bool listed = false;
    if (patterns_)
      for (const auto& p : *patterns_) {
        std::string prepo, ptag, pdigest;
        SplitPattern(p, &prepo, &ptag, &pdigest);
        if (!HasGlob(prepo) && prepo == ref.repository && BaseImagePatternMatches(p, ref))
          listed = true;
      }
    if (listed) continue;
    return Status::FailedPrecondition(head + "it is domain " + other +
                                      "'s image repository (allowed: " + AllowedText() +
                                      "; only the operator can list another domain's repository "
                                      "in domains." +
                                      domain_ + ".build.base_images)");
  }
  if (UnderRepo(ref.repository, own_)) return Status::Ok();
  if (!patterns_) return Status::Ok();
  for (const auto& p : *patterns_)
    if (BaseImagePatternMatches(p, ref)) return Status::Ok();
  return Status::FailedPrecondition(
      head + "repository '" + ref.repository +
      "' (or its tag) matches no entry of build.base_images (allowed: " + AllowedText() +
      "); use an allowed base image or ask the "
      "operator to add it");
}

void CheckDomainIsolation(const Config& config, std::vector<ConfigProblem>* problems,
                          std::vector<ConfigProblem>* warnings) {
  struct Dom {
    std::string name, host, repo;
  };
  std::vector<Dom> doms;
  for (const auto& [name, d] : config.domains) {
    auto it = config.registries.find(d.image.registry);
    if (it == config.registries.end()) continue;
    doms.push_back({name, RegistryHostOf(it->second.url), Lower(d.image.repository)});
  }
  for (size_t i = 0; i < doms.size(); ++i) {
    for (size_t j = 0; j < doms.size(); ++j) {
      const Dom& a = doms[i];
      const Dom& b = doms[j];
      if (i == j || a.host != b.host) continue;
      const std::string path = "domains." + b.name + ".image.repository";
      if (a.repo == b.repo && i < j) {
        problems->push_back({path, "'" + b.repo + "' is also domain " + a.name +
                                       "'s image repository on " + a.host +
                                       ": each domain needs a repository of its own (the domains "
                                       "could read and overwrite each other's images)"});
      } else if (a.repo != b.repo && UnderRepo(b.repo, a.repo)) {
        problems->push_back({path, "'" + b.repo + "' lies under domain " + a.name +
                                       "'s image repository '" + a.repo + "' on " + a.host +
                                       ": give each domain a repository that is not a path prefix "
                                       "of another's"});
      }
    }
  }
  for (const auto& [name, d] : config.domains) {
    if (!d.build.base_images) continue;
    auto it = config.registries.find(d.image.registry);
    if (it == config.registries.end()) continue;
    const std::string host = RegistryHostOf(it->second.url);
    const auto& pats = *d.build.base_images;
    for (size_t k = 0; k < pats.size(); ++k) {
      std::string repo, tag, digest;
      SplitPattern(pats[k], &repo, &tag, &digest);
      const std::string path = "domains." + name + ".build.base_images[" + std::to_string(k) + "]";
      for (const Dom& o : doms) {
        if (o.name == name || o.host != host) continue;
        if (!HasGlob(repo)) {
          if (UnderRepo(repo, o.repo))
            warnings->push_back({path, "'" + pats[k] + "' names domain " + o.name +
                                           "'s image repository: domain " + name +
                                           "'s builds can read those images (allowed because it "
                                           "is listed literally)"});
        } else if (GlobCovers(repo, o.repo)) {
          problems->push_back({path, "'" + pats[k] + "' matches domain " + o.name +
                                         "'s image repository '" + o.repo +
                                         "': a wildcard never grants another domain's images; "
                                         "list that repository literally if it is meant"});
        }
      }
    }
  }
}

}  // namespace kiln
