// BaseImagePolicy: which base images a domain's containerfile build may use (issue 15, "safe to
// share"). kiln fetches base images with its own registry credential, so without a policy one
// domain could `FROM` another domain's image and print it into its own build log.
//
// The rule (docs/configuration.md, domains.<d>.build.base_images):
//  - a base image must be on the domain's own registry host (builds have no network);
//  - the domain's own image.repository (and anything under it) is always allowed;
//  - another domain's image.repository on the same registry host (and anything under it) is
//    refused, unless build.base_images lists that repository literally (no wildcard): a
//    wildcard never grants another domain's images;
//  - without build.base_images every other repository on the registry is allowed (the old
//    behaviour minus other domains' images); with it, only repositories matching a pattern.
// Patterns: `<repository-glob>[:<tag-glob>][@<digest>]`, repository relative to the registry
// host; `*` matches within one path segment, `**` across segments, `?` one character. No tag
// and no digest in a pattern: any tag or digest.
//
// Pure code (no I/O, no CAF); lives in config/ because `kiln check-config` uses it too.
// Value types; a BaseImagePolicy is immutable after construction and safe to share read-only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "config/config_parser.h"

namespace kiln {

/// A parsed image reference, normalised the way containers/image names it: host lowercased
/// (`docker.io` when the name has no host; `index.docker.io` -> `docker.io`), repository
/// lowercased (`library/` prefixed for single-segment Docker Hub names), tag "" when absent.
struct ImageRef {
  std::string host;
  std::string repository;
  std::string tag;     // "" when none given
  std::string digest;  // "sha256:<hex>", "" when none given
};

/// Parses `image` (after ARG substitution). False with `why` for names buildah could not use
/// either (spaces, quotes, `$`, empty segments, bad tag or digest).
bool ParseImageRef(const std::string& image, ImageRef* out, std::string* why);

/// The registry host a registry URL names: scheme and trailing slashes dropped, lowercased
/// ("http://127.0.0.1:5000/" -> "127.0.0.1:5000").
std::string RegistryHostOf(const std::string& url);

/// "" when `pattern` is a valid build.base_images pattern, else the reason.
std::string ValidateBaseImagePattern(const std::string& pattern);

/// Does `pattern` (valid) match `ref`'s repository, tag and digest?
bool BaseImagePatternMatches(const std::string& pattern, const ImageRef& ref);

class BaseImagePolicy {
 public:
  /// `others` maps each other domain's name to its image repository on `registry_host`
  /// (domains on other registry hosts are left out). `patterns` is build.base_images.
  BaseImagePolicy(std::string domain, std::string registry_host, std::string own_repository,
                  std::optional<std::vector<std::string>> patterns,
                  std::map<std::string, std::string> others);

  /// The policy of `domain` (must be in `config`).
  static BaseImagePolicy ForDomain(const Config& config, const std::string& domain);

  /// Ok, or FailedPrecondition (the agent's fault) naming the image and the rule it broke.
  /// `image` is the name after ARG substitution (a `$` left in it is refused).
  Status Check(const std::string& image) const;

 private:
  std::string AllowedText() const;

  std::string domain_;
  std::string host_;
  std::string own_;
  std::optional<std::vector<std::string>> patterns_;
  std::map<std::string, std::string> others_;
};

/// `kiln check-config`: two domains with the same image repository, or one under another, on
/// the same registry host (problems); a base_images wildcard that matches another domain's
/// repository (problem); a base_images entry that names another domain's repository literally
/// (warning: allowed, as documented).
void CheckDomainIsolation(const Config& config, std::vector<ConfigProblem>* problems,
                          std::vector<ConfigProblem>* warnings);

}  // namespace kiln
