// kiln's composition root: decides which builders, deployers and readiness probes exist (the
// buildah and layered builders over a POSIX process runner, the local and Kubernetes deploy
// targets, the registry ping) and hands them to the Runtime as interfaces. The actors library
// knows only Builder and Deployer; this is the one place that names their implementations.
//
// Thread-safety: plain function; call before Runtime::Create.
#pragma once

#include <memory>

#include "actors/runtime.h"
#include "common/status.h"
#include "config/config.h"

namespace kiln {

/// Fills what `opts` leaves unset: the containerfile builder (BuildahBuilder with the
/// `buildah` on PATH), the layered builder, the deployer factory (for domains whose deploy.type
/// is "local" or "kubernetes"; only when opts->deploy) and the registry probe for /readyz
/// (only when opts->readiness_checks). Injected builders (tests) are kept.
void ComposeRuntime(const std::shared_ptr<const Config>& config, RuntimeOptions* opts);

}  // namespace kiln
