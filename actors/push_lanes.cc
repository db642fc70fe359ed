#include "actors/push_lanes.h"

#include <algorithm>

namespace kiln {

std::string PushLaneKey(const std::string& registry, const std::string& repository) {
  // Length-prefixed: a registry's config name may hold any character.
  return std::to_string(registry.size()) + ":" + registry + "/" + repository;
}

bool PushLanes::Acquire(const std::string& registry, const std::string& id) {
  Lane& lane = lanes_[registry];
  if (lane.holder && *lane.holder == id) return true;
  if (std::find(lane.waiting.begin(), lane.waiting.end(), id) == lane.waiting.end())
    lane.waiting.push_back(id);
  lane.asked.insert(id);
  if (!lane.holder) GrantNext(lane);
  return lane.holder && *lane.holder == id;
}

void PushLanes::Reserve(const std::string& registry, const std::string& id) {
  Lane& lane = lanes_[registry];
  if (lane.holder && *lane.holder == id) return;
  if (std::find(lane.waiting.begin(), lane.waiting.end(), id) == lane.waiting.end())
    lane.waiting.push_back(id);
}

bool PushLanes::ReserveOrTake(const std::string& registry, const std::string& id) {
  Lane& lane = lanes_[registry];
  if (!lane.holder && lane.waiting.empty()) {
    lane.holder = id;
    return true;
  }
  Reserve(registry, id);
  return lane.holder && *lane.holder == id;
}

std::optional<std::string> PushLanes::GrantNext(Lane& lane) {
  if (lane.holder || lane.waiting.empty() || !lane.asked.count(lane.waiting.front()))
    return std::nullopt;
  lane.holder = lane.waiting.front();
  lane.waiting.pop_front();
  lane.asked.erase(*lane.holder);
  return lane.holder;
}

std::optional<std::string> PushLanes::Release(const std::string& registry, const std::string& id) {
  auto it = lanes_.find(registry);
  if (it == lanes_.end()) return std::nullopt;
  Lane& lane = it->second;
  if (lane.holder && *lane.holder == id) {
    lane.holder.reset();
  } else {
    auto w = std::find(lane.waiting.begin(), lane.waiting.end(), id);
    if (w == lane.waiting.end()) return std::nullopt;
    lane.waiting.erase(w);
    lane.asked.erase(id);
  }
  return GrantNext(lane);
}
std::optional<std::string> PushLanes::Holder(const std::string& registry) const {
  auto it = lanes_.find(registry);
  return it == lanes_.end() ? std::nullopt : it->second.holder;
}

size_t PushLanes::Waiting(const std::string& registry) const {
  auto it = lanes_.find(registry);
  return it == lanes_.end() ? 0 : it->second.waiting.size();
}

}  // namespace kiln
