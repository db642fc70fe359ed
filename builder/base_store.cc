#include "builder/base_store.h"

#include <nlohmann/json.hpp>

namespace kiln {
using json = nlohmann::json;

BaseStorePaths BaseStoreFor(const std::string& cache_dir, uid_t uid) {
  BaseStorePaths p;
  p.dir = cache_dir + "/bases";
  const std::string u = p.dir + "/u" + std::to_string(uid);
  p.store = u;
  p.marker = u + ".json";
  p.lock = u + ".lock";
  return p;
}

std::string BaseStoreName(const std::string& image) {
  const size_t at = image.find('@');
  if (at == std::string::npos) return image;
  std::string repo = image.substr(0, at);
  const std::string digest = image.substr(at + 1);
  // A "name:tag@digest" reference: the tag is dropped (the digest decides).
  const size_t slash = repo.rfind('/');
  const size_t colon = repo.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash))
    repo = repo.substr(0, colon);
  const size_t hex = digest.find(':');
  const std::string h = hex == std::string::npos ? digest : digest.substr(hex + 1);
  return repo + ":kiln-pinned-" + h.substr(0, 12);
}

std::vector<BaseWant> MissingBases(const std::vector<BaseWant>& wanted,
                                   const std::map<std::string, std::string>& marker,
                                   const std::set<std::string>& stored) {
  std::vector<BaseWant> missing;
  for (const BaseWant& w : wanted) {
    auto it = marker.find(w.image);
    const bool have =
        it != marker.end() && it->second == w.digest && stored.count(BaseStoreName(w.image)) > 0;
    bool dup = false;
    for (const BaseWant& m : missing) dup = dup || m.image == w.image;
    if (!have && !dup) missing.push_back(w);
  }
  return missing;
}

std::string BaseMarkerText(const std::map<std::string, std::string>& marker) {
  json j = json::object();
  for (const auto& [k, v] : marker) j[k] = v;
  return j.dump();
}

std::map<std::string, std::string> ParseBaseMarker(const std::string& text) {
  std::map<std::string, std::string> m;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return m;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.value().is_string()) m[it.key()] = it.value().get<std::string>();
  return m;
}

std::set<std::string> StoredImageNamesFromJson(const std::string& images_json) {
  std::set<std::string> names;
  json j = json::parse(images_json, nullptr, false);
  if (!j.is_array()) return names;
  for (const auto& img : j) {
    if (!img.is_object() || !img.contains("names") || !img["names"].is_array()) continue;
    for (const auto& n : img["names"])
      if (n.is_string()) names.insert(n.get<std::string>());
  }
  return names;
}

}  // namespace kiln
