// The scheduler↔worker build messages (issue 20): what a worker needs to run one build of a
// candidate — domain, candidate, commit, build id, build key, the domain's build config and
// image — as JSON text carried by remote_builder_actor (pool/remote_builder.h). Never a token:
// the worker fetches the source with its own credential and pushes with its own.
//
// The build config travels in the shape of the config file's `domains.<d>.build` block
// (docs/configuration.md), so the worker validates it with kiln's own config parser.
//
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "builder/builder.h"
#include "common/status.h"
#include "config/config.h"

namespace kiln {

/// `build` as the config file writes it (ParseConfig reads it back to an equal BuildConfig).
nlohmann::json BuildConfigToJson(const BuildConfig& build);

struct RemoteBuildRequest {
  // "build" | "push" | "upload_blobs" (issue 20: the blobs only, before the push-lane grant;
  // answered in `push`) | "attach" (issue 20: a restarted scheduler asks after a build it
  // dispatched; answered as `build`, failure_kind "unknown_build" when the worker has none)
  // | "cancel" | "info"
  std::string op = "build";
  std::string build_id;
  std::string domain;
  std::string candidate;
  std::string commit;            // full hex; "" for op info/cancel
  std::string key;               // build key (image label)
  std::string git_url;           // the scheduler's smart-HTTP remote of the domain (no credential)
  std::string image_registry;    // ImageConfig::registry (a name in the worker's registries)
  std::string image_repository;  // ImageConfig::repository
  nlohmann::json build = nlohmann::json::object();  // BuildConfigToJson of the domain
  std::string image_id;      // op push/upload_blobs: what the worker's build answered
  int64_t sent_unix_ms = 0;  // when the scheduler decided (dispatch overhead, same clock)
};

std::string RemoteBuildRequestToText(const RemoteBuildRequest& r);
/// InvalidArgument naming the field when the text is not a request.
Status RemoteBuildRequestFromText(const std::string& text, RemoteBuildRequest* out);

/// A worker's answer: the builder's result and the build's log (output of fetch, checkout
/// and the builder), or a push's result. `worker` names the worker for the scheduler's log.
struct RemoteBuildAnswer {
  std::string op;  // the request's op
  std::string build_id;
  std::string worker;
  BuildResult build;  // op build
  PushResult push;    // op push, upload_blobs
  std::string log;    // op build/push: everything the worker printed for this build
  // op info: {"slots", "running", "warm"}; a build's answer: the same after that build
  nlohmann::json info = nlohmann::json::object();
  /// op build/push: the worker was full and did not start it (its status says so); the
  /// scheduler places the build elsewhere or asks again, without counting a retry.
  bool busy = false;
};

std::string RemoteBuildAnswerToText(const RemoteBuildAnswer& a);
Status RemoteBuildAnswerFromText(const std::string& text, RemoteBuildAnswer* out);

/// Wall-clock milliseconds since the epoch (sent_unix_ms and the dispatch timings).
int64_t WireNowMs();

/// Status from its wire form (Status::Code as an integer and the message); an unknown code is
/// Internal.
Status StatusFromWire(int code, const std::string& message);

}  // namespace kiln
