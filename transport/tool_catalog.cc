#include "transport/tool_catalog.h"

namespace kiln {
namespace {

using nlohmann::json;

json Nullable(json schema) {
  // {"type": "x"} -> {"type": ["x", "null"]}
  if (schema.contains("type") && schema["type"].is_string()) {
    schema["type"] = json::array({schema["type"], "null"});
  }
  return schema;
}

json OpenObject(json properties) {
  if (properties.is_null()) properties = json::object();
  return {
      {"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", true}};
}

json StringProp(const std::string& description) {
  return {{"type", "string"}, {"description", description}};
}

// Candidate names (common/names.h ValidateName): they are git branches, OCI tags and directory
// names at once.
constexpr const char* kNamePattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$";
constexpr const char* kNameRule =
    " 1-63 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit, no '..', not "
    "ending in '.' or '.lock'.";

json NameProp(const std::string& description) {
  return {{"type", "string"},
          {"pattern", kNamePattern},
          {"minLength", 1},
          {"maxLength", 63},
          {"description", description + kNameRule}};
}

json ErrorKindEnum() {
  return {{"type", json::array({"string", "null"})},
          {"description",
           "On failure: what kind, to branch on (compile, test, containerfile, base_image, "
           "output_missing, tree_too_large, timeout, cancelled, superseded, not_pushed, "
           "invalid_argument, infrastructure; deploys: deploy_crash, deploy_unready, "
           "deploy_image, ...). infrastructure means: not your code, retry later."}};
}

json BuildStatusEnum() {
  return {{"type", "string"},
          {"enum", {"queued", "running", "succeeded", "failed", "cancelled", "interrupted"}}};
}

json BuildResultSchema() {
  json diagnostic = OpenObject({{"file", Nullable({{"type", "string"}})},
                                {"line", Nullable({{"type", "integer"}})},
                                {"column", Nullable({{"type", "integer"}})},
                                {"severity", Nullable({{"type", "string"}})},
                                {"message", Nullable({{"type", "string"}})}});
  json timings = OpenObject({{"queued_ms", Nullable({{"type", "number"}})},
                             {"build_ms", Nullable({{"type", "number"}})},
                             {"push_ms", Nullable({{"type", "number"}})},
                             {"total_ms", Nullable({{"type", "number"}})}});
  json image = OpenObject(
      {{"ref", Nullable({{"type", "string"}})}, {"digest", Nullable({{"type", "string"}})}});
  image["type"] = json::array({"object", "null"});
  timings["type"] = json::array({"object", "null"});
  return OpenObject({
      {"build_id", Nullable(StringProp("Build identifier (use with build_log, cancel_build)."))},
      {"candidate", Nullable({{"type", "string"}})},
      {"commit", Nullable(StringProp("Git commit that was built."))},
      {"status", BuildStatusEnum()},
      {"image", image},
      {"diagnostics", Nullable({{"type", "array"}, {"items", diagnostic}})},
      {"log_tail", Nullable({{"type", "string"}})},
      {"cache_hit", Nullable({{"type", "boolean"}})},
      {"timings", timings},
      {"error", Nullable(StringProp("Why the call failed, when it failed: one sentence."))},
      {"error_kind", ErrorKindEnum()},
      {"next_step", Nullable(StringProp("What to do next, when the call failed."))},
  });
}

// Issue 16: build ids as tool_views.h IsValidBuildId accepts them.
json BuildIdProp(const std::string& description) {
  return {{"type", "string"}, {"pattern", "^b-[0-9a-f]{16}$"}, {"description", description}};
}

json Annotations(bool read_only, bool destructive, bool idempotent) {
  return {{"readOnlyHint", read_only},
          {"destructiveHint", destructive},
          {"idempotentHint", idempotent},
          {"openWorldHint", false}};
}

json Tool(const std::string& name, const std::string& title, const std::string& description,
          json input, json output, json annotations) {
  annotations["title"] = title;
  return {{"name", name},         {"title", title},         {"description", description},
          {"inputSchema", input}, {"outputSchema", output}, {"annotations", annotations}};
}

json InputObject(json properties, std::vector<std::string> required) {
  if (properties.is_null()) properties = json::object();
  json s = {
      {"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) s["required"] = required;
  return s;
}

json BuildCandidate() {
  return Tool(
      "build_candidate", "Build candidate image",
      "Build the container image of a candidate and push it to the registry. First commit and "
      "push your code to kiln, which is your git remote: `git push <kiln>/git/<domain>.git "
      "HEAD:refs/heads/<candidate>` (with your token as `Authorization: Bearer` header). The "
      "build uses the candidate's branch (or `ref`/`commit`). With wait=true (default) the call "
      "returns when the build finished (and streams progress when the request carries a "
      "progressToken); with wait=false it returns at once with the build_id: poll "
      "candidate_status. A failed build is a result with isError=true, `error`, `error_kind`, "
      "`next_step` and compiler diagnostics (repository-relative file:line:column). Then call "
      "deploy_candidate to roll the built image out.",
      InputObject({{"candidate", NameProp("Candidate name (also the default branch).")},
                   {"ref",
                    {{"type", "string"},
                     {"maxLength", 200},
                     {"description",
                      "Git branch to build, `name` or `refs/heads/name` (default: the "
                      "branch named after the candidate). Each '/'-separated part follows "
                      "the candidate name rules."}}},
                   {"commit",
                    {{"type", "string"},
                     {"pattern", "^([0-9a-f]{4,40}|[0-9a-f]{64})$"},
                     {"description",
                      "Exact commit to build: 4-40 lowercase hex characters (full or "
                      "abbreviated SHA-1) or 64 (SHA-256). It must be in the pushed "
                      "history."}}},
                   {"wait",
                    {{"type", "boolean"},
                     {"default", true},
                     {"description", "Wait for the build to finish."}}}},
                  {"candidate"}),
      BuildResultSchema(), Annotations(false, false, true));
}

json CandidateStatus() {
  json build = OpenObject({});
  build["type"] = json::array({"object", "null"});
  return Tool("candidate_status", "Candidate status",
              "State of one candidate: its latest build, its deployed build and its position "
              "in the build queue.",
              InputObject({{"candidate", NameProp("Candidate name.")}}, {"candidate"}),
              OpenObject({{"candidate", Nullable({{"type", "string"}})},
                          {"state", Nullable({{"type", "string"}})},
                          {"latest_build", build},
                          {"deployed_build", build},
                          {"queue_position", Nullable({{"type", "integer"}})},
                          {"error", Nullable({{"type", "string"}})}}),
              Annotations(true, false, true));
}

json BuildLog() {
  return Tool(
      "build_log", "Build log",
      "A page of a build's log. Start at offset 0 and pass next_offset to read on; complete is "
      "true when the build finished and the whole log was read. A failed build's log starts "
      "with kiln's one-line reason (`kiln: ...`). tail=N returns the last N bytes instead (where "
      "compilers and failing tests print last); not with offset or limit.",
      InputObject(
          {{"build_id",
            {{"type", "string"},
             {"pattern", "^b-[0-9a-f]{16}$"},
             {"description",
              "Build identifier (b- and 16 lowercase hex), as build_candidate returned it."}}},
           {"offset",
            {{"type", "integer"}, {"minimum", 0}, {"description", "Byte offset (default 0)."}}},
           {"limit",
            {{"type", "integer"},
             {"minimum", 1},
             {"maximum", 1048576},
             {"description", "Maximum bytes to return (default 65536)."}}},
           {"tail",
            {{"type", "integer"},
             {"minimum", 1},
             {"maximum", 1048576},
             {"description", "Return the last `tail` bytes of the log (not with offset/limit)."}}}},
          {"build_id"}),
      OpenObject({{"build_id", Nullable({{"type", "string"}})},
                  {"text", Nullable({{"type", "string"}})},
                  {"next_offset", Nullable({{"type", "integer"}})},
                  {"complete", Nullable({{"type", "boolean"}})},
                  {"error", Nullable({{"type", "string"}})}}),
      Annotations(true, false, true));
}

json CancelBuild() {
  return Tool(
      "cancel_build", "Cancel build",
      "Cancel a queued or running build. Cancelling a finished build changes nothing.",
      InputObject({{"build_id", BuildIdProp("Build identifier (b- and 16 lowercase hex).")}},
                  {"build_id"}),
      OpenObject({{"build_id", Nullable({{"type", "string"}})},
                  {"status", Nullable({{"type", "string"}})},
                  {"error", Nullable({{"type", "string"}})}}),
      Annotations(false, false, true));
}

json ListCandidates() {
  json item = OpenObject({});
  return Tool("list_candidates", "List candidates",
              "The candidates of the caller's domain with their state.", InputObject({}, {}),
              OpenObject({{"candidates", Nullable({{"type", "array"}, {"items", item}})},
                          {"error", Nullable({{"type", "string"}})}}),
              Annotations(true, false, true));
}

json DeployCandidate() {
  json image = OpenObject(
      {{"ref", Nullable({{"type", "string"}})}, {"digest", Nullable({{"type", "string"}})}});
  image["type"] = json::array({"object", "null"});
  return Tool(
      "deploy_candidate", "Deploy candidate",
      "Deploy a candidate's build (default: its latest successful build) to the domain's "
      "deploy target, by digest, and wait for the rollout when wait=true (progress is "
      "reported). Build it first with build_candidate. Deploys of a domain are ordered: an "
      "older build never overwrites a newer build's deploy that is in progress. A failed "
      "deploy has isError=true, `reason` (ProgressDeadlineExceeded, ImagePullBackOff, "
      "ErrImagePull, CrashLoopBackOff, Unauthorized, Forbidden, NotFound, Unavailable, Timeout, "
      "StartFailed, HealthCheckFailed, Superseded) and `message`.",
      InputObject(
          {{"candidate", NameProp("Candidate name.")},
           {"build_id", BuildIdProp("Build to deploy (default: the candidate's latest successful "
                                    "build); it must be a build of this candidate.")},
           {"wait", {{"type", "boolean"}, {"default", true}}}},
          {"candidate"}),
      OpenObject({{"deploy_id", Nullable({{"type", "string"}})},
                  {"build_id", Nullable({{"type", "string"}})},
                  {"image", image},
                  {"status", Nullable({{"type", "string"}})},
                  {"candidate", Nullable({{"type", "string"}})},
                  {"reason", Nullable({{"type", "string"}})},
                  {"message", Nullable({{"type", "string"}})},
                  {"changed", Nullable({{"type", "boolean"}})},
                  {"elapsed_ms", Nullable({{"type", "number"}})},
                  {"error", Nullable({{"type", "string"}})}}),
      Annotations(false, false, true));
}

}  // namespace

ToolCatalog::ToolCatalog(Options options) {
  tools_.push_back(BuildCandidate());
  if (options.include_deploy) tools_.push_back(DeployCandidate());
  tools_.push_back(CandidateStatus());
  tools_.push_back(BuildLog());
  tools_.push_back(CancelBuild());
  tools_.push_back(ListCandidates());
}

const nlohmann::json* ToolCatalog::Find(const std::string& name) const {
  for (const auto& t : tools_) {
    if (t["name"] == name) return &t;
  }
  return nullptr;
}

std::optional<std::string> ToolCatalog::Resolve(
    const std::string& name, const std::map<std::string, std::string>& aliases) const {
  if (Find(name)) return name;
  auto it = aliases.find(name);
  if (it != aliases.end() && Find(it->second)) return it->second;
  return std::nullopt;
}

nlohmann::json ToolCatalog::ListFor(const std::map<std::string, std::string>& aliases) const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : tools_) list.push_back(t);
  for (const auto& [alias, target] : aliases) {
    if (Find(alias)) continue;
    const nlohmann::json* def = Find(target);
    if (!def) continue;
    nlohmann::json copy = *def;
    copy["name"] = alias;
    copy["description"] = (*def)["description"].get<std::string>() + " (alias of " + target + ")";
    list.push_back(std::move(copy));
  }
  return list;
}

}  // namespace kiln
