#include "actors/push_lanes.h"

#include <algorithm>

namespace kiln {

bool PushLanes::Acquire(const std::string& registry, const std::string& id) {
  Lane& lane = lanes_[registry];
  if (!lane.holder) {
    lane.holder = id;
    return true;
  }
  if (*lane.holder == id) return true;
  if (std::find(lane.waiting.begin(), lane.waiting.end(), id) == lane.waiting.end())
    lane.waiting.push_back(id);
  return false;
}

std::optional<std::string> PushLanes::Release(const std::string& registry, const std::string& id) {
  auto it = lanes_.find(registry);
  if (it == lanes_.end()) return std::nullopt;
  Lane& lane = it->second;
  if (lane.holder && *lane.holder == id) {
    lane.holder.reset();
    if (!lane.waiting.empty()) {
      lane.holder = lane.waiting.front();
      lane.waiting.pop_front();
      return lane.holder;
    }
    return std::nullopt;
  }
  auto w = std::find(lane.waiting.begin(), lane.waiting.end(), id);
  if (w != lane.waiting.end()) lane.waiting.erase(w);
  return std::nullopt;
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
