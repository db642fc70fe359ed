// LeasesFromState (issue 19): what the journal says is in use, as GcLeases for the collection
// policy — each domain's deployed image and the image of a deploy in progress (and that domain
// as deploying), each candidate's latest successful image, the candidates with a build not yet
// final (`extra_active`: ids a load turned interrupted, e.g. in a copy of a running kiln's
// state), and each candidate's last activity (its newest build's start).
//
// Plain function over a loaded StateStore (thread-safe queries); no CAF.
#pragma once

#include <string>
#include <vector>

#include "state/state_store.h"
#include "storage/gc_policy.h"

namespace kiln {

GcLeases LeasesFromState(const StateStore& store, const std::vector<std::string>& domains,
                         const std::vector<BuildId>& extra_active = {});

/// "sha256:<hex>" of an image reference "<host>/<repo>@sha256:<hex>" ("" when none).
std::string DigestOfImage(const std::string& image);

}  // namespace kiln
