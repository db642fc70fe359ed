// StepCachePolicy: whether buildah's step cache (`buildah build --layers`) can ever give a
// containerfile build a step back, so kiln can build without it when it cannot (issue 18).
//
// With `--layers`, buildah commits every step as an image and looks each step up before running
// it. That pays for steps that do not depend on what the agent changes: a `RUN go mod download`
// after `COPY go.mod go.sum ./`, a `RUN apt-get install` before the sources are copied. It costs
// a commit per step otherwise: in the benchmark's two-stage Go build (`COPY . .`, a cached
// `RUN go build`, `COPY --from=build`), ~300 ms of a ~1.3 s `buildah build`, for cache entries
// that can never hit. A new candidate commit is a new tree (an identical tree never reaches
// buildah: the build key answers it), so a step that depends on the whole build context runs
// again on every build, and so does every step after it in its stage and in the stages that
// copy from it.
//
// The decision: a step is reusable when it is a RUN (or an ADD of a URL) that depends on no
// whole-context input: no earlier `COPY`/`ADD` of the whole context (`.`, `./`, `*`) in its stage
// or the stages it derives from (`FROM <stage>`) or copies from (`COPY --from=<stage>`, `RUN
// --mount=...,from=<stage>`), and no bind mount of the context (`RUN --mount=type=bind` without
// `from=`). When no step is reusable, `--layers=false`; otherwise (and for anything this reader
// does not know, e.g. ONBUILD, an unknown instruction, an unresolved variable in a stage name)
// `--layers`. `build.containerfile.step_cache` overrides it: "always" or "never".
// The trade: a commit that changes only files the context ignores (`.containerignore`,
// `.dockerignore`), or the same tree built again after a failure, runs every step again where
// the step cache would have answered; with a cache mount that is an incremental compile.
//
// Pure function; no I/O; thread-safe.
#pragma once

#include <map>
#include <string>

namespace kiln {

struct StepCacheDecision {
  bool use_layers = true;
  /// Why, in the agent's terms (for the build log): the first reusable step and its line, or
  /// that none is, or the override.
  std::string reason;
};

/// `mode` is build.containerfile.step_cache: "auto", "always" or "never". `args` are the build
/// args (they override ARG defaults).
StepCacheDecision DecideStepCache(const std::string& containerfile,
                                  const std::map<std::string, std::string>& args,
                                  const std::string& mode);

}  // namespace kiln
