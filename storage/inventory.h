// Storage inventory (issue 19): what kiln keeps under server.state_dir, one StorageItem per
// collectable unit (storage/gc_policy.h), sized by disk usage (st_blocks; hard links counted
// once per item; symlinks never followed; other file systems skipped).
//
// Layout scanned (docs/operations.md "State directory"):
//   domains/<d>/candidates/<c>/storage   candidate_storage
//   domains/<d>/candidates/<c>/src       workspace (with its index and checked-out marker)
//   domains/<d>/cache/outputs/<entry>    layered_output
//   domains/<d>/cache/rootless, cache/layered/<name>   build_cache
//   domains/<d>/deploy/blobs/sha256/<h>  deploy_blob
//   domains/<d>/deploy/rootfs/<entry>    deploy_rootfs (always leased: the local deployer owns
//                                        and removes its roots)
//   domains/<d>/repo.git                 git_repo (never deleted)
//   keys/<key>.json                      build_key (domain from its image repository)
//   state/                               journal (never deleted)
//
// Plain functions; blocking file I/O (call off the actors). Thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "storage/gc_policy.h"

namespace kiln {

/// Disk usage of `path` (recursively, no symlink followed, one file system), in bytes.
int64_t DiskUsage(const std::string& path);

/// Every item under `state_dir` for the domains of `config` (unknown domain directories are
/// not kiln's to judge and are left out). `always_leased` gets the ids of items that must
/// never be deleted by the collector although they count (deploy roots).
std::vector<StorageItem> ScanInventory(const std::string& state_dir, const Config& config,
                                       std::set<std::string>* always_leased);

}  // namespace kiln
