#include "builder/build_key.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace kiln {

std::string ComputeBuildKey(const std::string& domain, const std::string& source_id,
                            const DomainConfig& dc, const RegistryConfig& registry,
                            std::vector<std::string> base_digests) {
  std::sort(base_digests.begin(), base_digests.end());
  nlohmann::json j;  // nlohmann::json objects are std::map-ordered: canonical key order
  j["v"] = 1;
  j["domain"] = domain;
  j["source"] = source_id;
  j["mode"] = dc.build.mode;
  const auto& cf = dc.build.containerfile;
  j["containerfile"] = {{"file", cf.file},
                        {"context", cf.context},
                        {"target", cf.target ? *cf.target : ""},
                        {"build_args", cf.build_args},
                        {"network", cf.network}};
  if (dc.build.layered) {
    const auto& l = *dc.build.layered;
    nlohmann::json outs = nlohmann::json::array();
    for (const auto& o : l.outputs) outs.push_back({o.from, o.to});
    j["layered"] = {
        {"base_image", l.base_image}, {"command", l.command}, {"env", l.env},
        {"caches", l.caches},         {"outputs", outs},      {"entrypoint", l.entrypoint}};
  }
  // Issue 18: another layer encoding is another image ("auto" is fixed by registry_url below;
  // left out so that keys of existing configs do not change).
  if (dc.build.compression != "auto") j["compression"] = dc.build.compression;
  j["image"] = {{"registry_url", registry.url}, {"repository", dc.image.repository}};
  j["bases"] = base_digests;
  return Sha256Hex(j.dump());
}

}  // namespace kiln
