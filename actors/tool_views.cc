#include "actors/tool_views.h"

#include "actors/build_failure.h"
#include "common/json_text.h"
#include "common/names.h"

namespace kiln {
namespace {

Status RequireObject(const nlohmann::json& args) {
  if (!args.is_object()) return Status::InvalidArgument("arguments must be a JSON object");
  return Status::Ok();
}

Status CheckKnownKeys(const nlohmann::json& args, std::initializer_list<const char*> known) {
  for (auto it = args.begin(); it != args.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string key = it.key().substr(0, 64);
      return Status::InvalidArgument("unknown argument '" + key + "'");
    }
  }
  return Status::Ok();
}

Status GetString(const nlohmann::json& args, const char* name, bool required,
                 std::optional<std::string>* out) {
  auto it = args.find(name);
  if (it == args.end() || it->is_null()) {
    if (required)
      return Status::InvalidArgument(std::string("missing required argument '") + name + "'");
    return Status::Ok();
  }
  if (!it->is_string())
    return Status::InvalidArgument(std::string("argument '") + name + "' must be a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

// An optional boolean argument; `*out` keeps its default when absent or null.
Status GetBool(const nlohmann::json& args, const char* name, bool* out) {
  auto it = args.find(name);
  if (it == args.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean())
    return Status::InvalidArgument(std::string("argument '") + name + "' must be a boolean");
  *out = it->get<bool>();
  return Status::Ok();
}

}  // namespace

bool IsValidBuildId(const std::string& id) {
  if (id.size() != 18 || id.rfind("b-", 0) != 0) return false;
  for (size_t i = 2; i < id.size(); ++i) {
    char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status ParseBuildArgs(const nlohmann::json& args, BuildRequest* out) {
  Status s = RequireObject(args);
  if (!s.ok()) return s;
  if (!(s = CheckKnownKeys(args, {"candidate", "ref", "commit", "wait"})).ok()) return s;
  std::optional<std::string> cand, ref, commit;
  if (!(s = GetString(args, "candidate", true, &cand)).ok()) return s;
  if (!(s = ValidateName(*cand, "candidate")).ok()) return s;
  if (!(s = GetString(args, "ref", false, &ref)).ok()) return s;
  if (ref && !(s = ValidateRef(*ref)).ok()) return s;
  if (!(s = GetString(args, "commit", false, &commit)).ok()) return s;
  if (commit && !(s = ValidateCommit(*commit)).ok()) return s;
  bool wait = true;
  if (!(s = GetBool(args, "wait", &wait)).ok()) return s;
  out->candidate = *cand;
  out->ref = ref;
  out->commit = commit;
  out->wait = wait;
  out->source_dir.reset();
  return Status::Ok();
}

Status ParseDeployArgs(const nlohmann::json& args, DeployArgs* out) {
  Status s = RequireObject(args);
  if (!s.ok()) return s;
  if (!(s = CheckKnownKeys(args, {"candidate", "build_id", "wait"})).ok()) return s;
  std::optional<std::string> cand, id;
  if (!(s = GetString(args, "candidate", true, &cand)).ok()) return s;
  if (!(s = ValidateName(*cand, "candidate")).ok()) return s;
  if (!(s = GetString(args, "build_id", false, &id)).ok()) return s;
  if (id && !IsValidBuildId(*id))
    return Status::InvalidArgument("argument 'build_id' is not a build id (b- and 16 hex digits)");
  bool wait = true;
  if (!(s = GetBool(args, "wait", &wait)).ok()) return s;
  out->candidate = *cand;
  out->build_id = id;
  out->wait = wait;
  return Status::Ok();
}

Status ParseApplyArgs(const nlohmann::json& args, std::optional<std::string>* candidate) {
  Status s = RequireObject(args);
  if (!s.ok()) return s;
  if (!(s = CheckKnownKeys(args, {"candidate"})).ok()) return s;
  std::optional<std::string> c;
  if (!(s = GetString(args, "candidate", false, &c)).ok()) return s;
  if (c && !(s = ValidateName(*c, "candidate")).ok()) return s;
  *candidate = c;
  return Status::Ok();
}

Status ParseCandidateArg(const nlohmann::json& args, std::string* candidate) {
  Status s = RequireObject(args);
  if (!s.ok()) return s;
  if (!(s = CheckKnownKeys(args, {"candidate"})).ok()) return s;
  std::optional<std::string> c;
  if (!(s = GetString(args, "candidate", true, &c)).ok()) return s;
  if (!(s = ValidateName(*c, "candidate")).ok()) return s;
  *candidate = *c;
  return Status::Ok();
}

Status ParseBuildIdArg(const nlohmann::json& args, std::string* build_id) {
  Status s = RequireObject(args);
  if (!s.ok()) return s;
  if (!(s = CheckKnownKeys(args, {"build_id"})).ok()) return s;
  std::optional<std::string> id;
  if (!(s = GetString(args, "build_id", true, &id)).ok()) return s;
  if (!IsValidBuildId(*id))
    return Status::InvalidArgument("build_id is malformed (expected b-<16 hex>)");
  *build_id = *id;
  return Status::Ok();
}

Status ParseBuildResultArgs(const nlohmann::json& args, std::string* candidate,
                            std::string* build_id) {
  nlohmann::json rest = args;
  candidate->clear();
  if (rest.is_object() && rest.contains("candidate")) {
    if (rest["candidate"].is_string()) *candidate = rest["candidate"].get<std::string>();
    rest.erase("candidate");
  }
  return ParseBuildIdArg(rest, build_id);
}

Status ParseDeployIdArg(const std::string& tool, const nlohmann::json& args,
                        std::string* deploy_id) {
  if (!args.is_object() || !args.contains("deploy_id") || !args["deploy_id"].is_string())
    return Status::InvalidArgument(tool + " needs deploy_id (string)");
  *deploy_id = args["deploy_id"].get<std::string>();
  return Status::Ok();
}

Status ParseNoArgs(const std::string& tool, const nlohmann::json& args) {
  if (!args.is_object() || !args.empty())
    return Status::InvalidArgument(tool + " takes no arguments");
  return Status::Ok();
}

Status ParseLogArgs(const nlohmann::json& args, std::string* build_id, size_t* offset,
                    size_t* limit) {
  if (args.is_object() && args.contains("tail"))
    return Status::InvalidArgument("unknown argument 'tail'");
  size_t tail = 0;
  return ParseLogArgs(args, build_id, offset, limit, &tail);
}

Status ParseLogArgs(const nlohmann::json& args, std::string* build_id, size_t* offset,
                    size_t* limit, size_t* tail) {
  Status s = RequireObject(args);
  if (!s.ok()) return s;
  if (!(s = CheckKnownKeys(args, {"build_id", "offset", "limit", "tail"})).ok()) return s;
  *tail = 0;
  auto t = args.find("tail");
  if (t != args.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1 || t->get<int64_t>() > (1 << 20))
      return Status::InvalidArgument(
          "argument 'tail' must be an integer from 1 to 1048576 (bytes from the end)");
    for (const char* k : {"offset", "limit"})
      if (args.contains(k) && !args[k].is_null())
        return Status::InvalidArgument(
            std::string("argument 'tail' cannot be combined with '") + k +
            "': read the end with tail, or a page with offset and limit");
    *tail = static_cast<size_t>(t->get<int64_t>());
  }
  std::optional<std::string> id;
  if (!(s = GetString(args, "build_id", true, &id)).ok()) return s;
  if (!IsValidBuildId(*id))
    return Status::InvalidArgument("build_id is malformed (expected b-<16 hex>)");
  *build_id = *id;
  *offset = 0;
  *limit = 64 * 1024;
  auto o = args.find("offset");
  if (o != args.end() && !o->is_null()) {
    if (!o->is_number_integer() || o->get<int64_t>() < 0)
      return Status::InvalidArgument("argument 'offset' must be an integer >= 0");
    *offset = static_cast<size_t>(o->get<int64_t>());
  }
  auto l = args.find("limit");
  if (l != args.end() && !l->is_null()) {
    if (!l->is_number_integer() || l->get<int64_t>() < 1 || l->get<int64_t>() > (1 << 20))
      return Status::InvalidArgument("argument 'limit' must be an integer from 1 to 1048576");
    *limit = static_cast<size_t>(l->get<int64_t>());
  }
  return Status::Ok();
}

nlohmann::json BuildJson(const BuildSnapshot& b) {
  nlohmann::json j;
  j["build_id"] = b.id;
  j["candidate"] = b.candidate;
  j["commit"] = b.commit.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.commit);
  j["status"] = StatusWireName(b.status);
  j["phase"] = PhaseName(b.status);
  j["cache_hit"] = b.cache_hit;
  j["deduplicated"] = b.deduplicated;
  nlohmann::json diags = nlohmann::json::array();
  nlohmann::json image = nullptr;
  std::string error = b.error;
  std::string kind = b.error.empty() ? std::string() : b.error_kind;
  if (b.outcome) {
    for (const auto& d : b.outcome->diagnostics) diags.push_back(ToJson(d));
    if (b.status == BuildStatus::kSucceeded && !b.outcome->digest.empty())
      image = {{"ref", b.outcome->image_ref}, {"digest", b.outcome->digest}};
    if (error.empty()) {
      error = b.outcome->error;
      kind = b.outcome->error_kind;
    }
  }
  j["image"] = image;
  j["diagnostics"] = diags;
  j["log_tail"] = b.log_tail;
  if (!error.empty()) j["error"] = error;
  if (b.status == BuildStatus::kFailed || b.status == BuildStatus::kCancelled ||
      b.status == BuildStatus::kInterrupted) {
    if (kind.empty()) kind = b.status == BuildStatus::kCancelled ? "cancelled" : "infrastructure";
    if (error.empty())
      error = b.status == BuildStatus::kCancelled ? "the build was cancelled" : "the build failed";
    j["error"] = error;
    j["error_kind"] = kind;
    j["next_step"] = NextStepFor(kind, b.candidate, b.remote);
  }
  if (b.queue_position) j["queue_position"] = *b.queue_position;
  j["timings"] = {
      {"queued_ms", b.timings.queued_ms},
      {"build_ms", b.timings.build_ms},
      {"push_ms", b.timings.push_ms},
      {"total_ms", b.timings.total_ms},
      {"waited_ms", b.waited_ms ? nlohmann::json(*b.waited_ms) : nlohmann::json(nullptr)}};
  j["started_on_push"] = b.started_on_push;  // issue 18
  j["joined"] = b.joined;
  if (!b.timings.parts.empty()) j["timings"]["parts"] = b.timings.parts;  // issue 18
  MakeValidUtf8(&j);  // log tail, diagnostics and errors carry the build's own bytes
  return j;
}

nlohmann::json CandidateSummaryJson(const std::string& candidate, const BuildSnapshot* latest,
                                    const BuildSnapshot* latest_success, int64_t success_order) {
  nlohmann::json j;
  j["candidate"] = candidate;
  j["state"] = latest ? PhaseName(latest->status) : "idle";
  j["latest_build"] = latest ? nlohmann::json{{"build_id", latest->id},
                                              {"status", StatusWireName(latest->status)},
                                              {"commit", latest->commit}}
                             : nlohmann::json(nullptr);
  if (latest_success) {
    const BuildSnapshot& r = *latest_success;
    j["latest_successful_build"] = {{"build_id", r.id},
                                    {"commit", r.commit},
                                    {"image", r.outcome ? r.outcome->image_ref : ""},
                                    {"digest", r.outcome ? r.outcome->digest : ""},
                                    {"order", success_order}};
  } else {
    j["latest_successful_build"] = nullptr;
  }
  return j;
}

nlohmann::json CandidateStatusJson(const std::string& candidate, const BuildSnapshot* latest,
                                   nlohmann::json latest_view, nlohmann::json success_view,
                                   int64_t position) {
  nlohmann::json j;
  j["candidate"] = candidate;
  j["state"] = latest ? PhaseName(latest->status) : "idle";
  j["latest_build"] = std::move(latest_view);
  j["latest_successful_build"] = std::move(success_view);
  j["deployed_build"] = nullptr;
  j["queue_position"] = position >= 0 ? nlohmann::json(position) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json DeployableJson(const BuildSnapshot& b, int64_t order) {
  return {{"build_id", b.id},
          {"candidate", b.candidate},
          {"commit", b.commit},
          {"image", b.outcome ? b.outcome->image_ref : ""},
          {"digest", b.outcome ? b.outcome->digest : ""},
          {"order", order}};
}

nlohmann::json LogChunkJson(const BuildId& id, const LogBuffer::Chunk& c) {
  return {{"build_id", id},         {"text", c.text},
          {"offset", c.offset},     {"next_offset", c.next_offset},
          {"complete", c.complete}, {"dropped_bytes", c.dropped}};
}

ToolResult ToolError(const std::string& message, const std::string& kind,
                     const std::string& candidate, const std::string& remote) {
  nlohmann::json j = ErrorJson(message);
  const std::string k = !kind.empty()                             ? kind
                        : message.rfind("internal error", 0) == 0 ? "infrastructure"
                                                                  : "invalid_argument";
  j["error_kind"] = k;
  j["next_step"] = NextStepFor(k, candidate, remote);
  return {j, true};
}

nlohmann::json ErrorJson(const std::string& message) { return {{"error", ToValidUtf8(message)}}; }

}  // namespace kiln
