#include "state/key_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "common/json_text.h"
#include "common/sha256.h"

namespace kiln {
namespace fs = std::filesystem;

Status KeyStore::Save(const std::string& key, const BuildOutcome& o) const {
  if (!IsSha256Hex(key)) return Status::InvalidArgument("bad key");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  nlohmann::json j = {{"key", key},          {"image_ref", o.image_ref},
                      {"digest", o.digest},  {"built_by", o.built_by},
                      {"commit", o.commit},  {"build_ms", o.build_ms},
                      {"push_ms", o.push_ms}};
  return WriteFileAtomic(dir_ + "/" + key + ".json", DumpJson(j) + "\n", 0600);
}

std::vector<std::pair<std::string, OutcomePtr>> KeyStore::LoadAll() const {
  std::vector<std::tuple<fs::file_time_type, std::string, OutcomePtr>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() != 69 || name.substr(64) != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    std::string key = j.value("key", "");
    if (key != name.substr(0, 64)) continue;
    auto o = std::make_shared<BuildOutcome>();
    o->status = BuildStatus::kSucceeded;
    o->image_ref = j.value("image_ref", "");
    o->digest = j.value("digest", "");
    o->built_by = j.value("built_by", "");
    o->commit = j.value("commit", "");
    o->build_ms = j.value("build_ms", 0);
    o->push_ms = j.value("push_ms", 0);
    if (!IsSha256Digest(o->digest)) continue;
    found.emplace_back(e.last_write_time(ec), key, o);
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::vector<std::pair<std::string, OutcomePtr>> out;
  for (auto& [t, k, o] : found) out.emplace_back(k, o);
  return out;
}

}  // namespace kiln
