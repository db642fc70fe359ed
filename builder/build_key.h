// Build keys: the content address of a build. Pure; thread-safe.
//
// key = SHA-256 over a versioned, canonical encoding of
//   the domain name, the source identity (git tree hash or directory content hash),
//   the domain's build config (mode, Containerfile settings, layered settings, build args),
//   the target image (registry URL and repository), and the base image digests.
// Equal inputs give equal keys across runs and machines; any change gives a new key.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace kiln {

/// `source_id` is "git-tree:<hex>" or "dir:<hex>". `base_digests` are the resolved digests of
/// the base images (order-insensitive; empty when unknown).
std::string ComputeBuildKey(const std::string& domain, const std::string& source_id,
                            const DomainConfig& dc, const RegistryConfig& registry,
                            std::vector<std::string> base_digests);

}  // namespace kiln
