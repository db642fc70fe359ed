// ToolCatalog: kiln's MCP tool definitions (name, title, description, inputSchema,
// outputSchema, annotations) and per-domain alias resolution.
//
// Output schemas are deliberately permissive: no required fields, additionalProperties
// allowed, and `null` accepted wherever the backend may leave a value empty. The TypeScript
// SDK client validates structuredContent against outputSchema (also for isError results), so
// a schema stricter than what the backend returns would break real clients.
//
// Adding a tool (e.g. deploy_candidate): write its definition in tool_catalog.cc and list it
// in the catalog (see `ToolCatalog::Options::include_deploy`); the backend must implement it.
//
// Thread-safety: immutable after construction; all methods are const and thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class ToolCatalog {
 public:
  struct Options {
    bool include_deploy = false;  // hook: list deploy_candidate once the backend implements it
  };

  ToolCatalog() : ToolCatalog(Options{}) {}
  explicit ToolCatalog(Options options);

  /// Definitions of the canonical tools, in listing order.
  const std::vector<nlohmann::json>& Canonical() const { return tools_; }

  /// The tools/list array for a domain: canonical tools plus one entry per alias whose target
  /// is a canonical tool (the target's definition under the alias name). Aliases that shadow a
  /// canonical name or point at an unknown tool are skipped.
  nlohmann::json ListFor(const std::map<std::string, std::string>& aliases) const;

  /// Canonical name for `name` (itself or an alias target); nullopt when unknown.
  std::optional<std::string> Resolve(const std::string& name,
                                     const std::map<std::string, std::string>& aliases) const;

  /// The definition of a canonical tool; nullptr when unknown.
  const nlohmann::json* Find(const std::string& name) const;

 private:
  std::vector<nlohmann::json> tools_;
};

}  // namespace kiln
