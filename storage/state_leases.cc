#include "storage/state_leases.h"

#include "storage/lease_table.h"

namespace kiln {

std::string DigestOfImage(const std::string& image) {
  auto at = image.rfind('@');
  if (at == std::string::npos) return "";
  std::string d = image.substr(at + 1);
  return d.rfind("sha256:", 0) == 0 ? d : "";
}

GcLeases LeasesFromState(const StateStore& store, const std::vector<std::string>& domains,
                         const std::vector<BuildId>& extra_active) {
  GcLeases leases;
  for (const auto& d : domains) {
    if (auto dep = store.Deployed(d)) {
      std::string digest = DigestOfImage(dep->image);
      if (!digest.empty()) leases.protected_images.insert(digest);
    }
    if (auto latest = store.LatestDeploy(d)) {
      if (latest->status == "in_progress") {
        leases.deploying_domains.insert(d);
        std::string digest = DigestOfImage(latest->image);
        if (!digest.empty()) leases.protected_images.insert(digest);
      }
    }
    if (auto b = store.LatestSuccessfulInDomain(d))
      if (!b->digest.empty()) leases.protected_images.insert(b->digest);
    for (const auto& c : store.Candidates(d)) {
      if (auto b = store.LatestSuccessful(d, c))
        if (!b->digest.empty()) leases.protected_images.insert(b->digest);
      auto newest = store.Builds(d, c, 1);
      if (!newest.empty())
        leases.candidate_last_active_ms[StorageLeaseTable::Key(d, c)] =
            std::max(newest.front().started_at_ms, newest.front().finished_at_ms);
    }
  }
  for (const auto& b : store.ActiveBuilds())
    leases.busy_candidates.insert(StorageLeaseTable::Key(b.domain, b.candidate));
  for (const auto& id : extra_active)
    if (auto b = store.Build(id))
      leases.busy_candidates.insert(StorageLeaseTable::Key(b->domain, b->candidate));
  return leases;
}

}  // namespace kiln
