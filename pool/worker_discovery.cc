#include "pool/worker_discovery.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "config/config_parser.h"

namespace kiln {

using json = nlohmann::json;

namespace {

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string ResourceVersion(const json& obj) {
  auto md = obj.find("metadata");
  return md != obj.end() && md->is_object() ? Str(*md, "resourceVersion") : std::string();
}

// 410 Gone / Expired in a watch ERROR event's Status object.
bool IsExpired(const json& status) {
  auto code = status.find("code");
  if (code != status.end() && code->is_number_integer() && code->get<int>() == 410) return true;
  std::string reason = Str(status, "reason");
  return reason == "Expired" || reason == "Gone";
}

}  // namespace

Status EndpointSliceTracker::ApplyList(const json& list) {
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array() ||
      ResourceVersion(list).empty()) {
    return Status::InvalidArgument("EndpointSlice list without items or resourceVersion");
  }
  std::map<std::string, json> slices;
  for (const auto& s : list["items"]) {
    if (!s.is_object() || !s.contains("metadata")) continue;
    std::string name = Str(s["metadata"], "name");
    if (!name.empty()) slices[name] = s;
  }
  slices_ = std::move(slices);
  rv_ = ResourceVersion(list);
  return Status::Ok();
}

EndpointSliceTracker::EventResult EndpointSliceTracker::ApplyEvent(const json& event) {
  if (!event.is_object() || !event.contains("object") || !event["object"].is_object()) {
    return EventResult::kIgnored;
  }
  const std::string type = Str(event, "type");
  const json& obj = event["object"];
  if (type == "ERROR") return IsExpired(obj) ? EventResult::kRelist : EventResult::kIgnored;
  std::string rv = ResourceVersion(obj);
  if (rv.empty()) return EventResult::kIgnored;
  if (type == "BOOKMARK") {
    rv_ = rv;
    return EventResult::kApplied;
  }
  std::string name = obj.contains("metadata") ? Str(obj["metadata"], "name") : "";
  if (name.empty()) return EventResult::kIgnored;
  if (type == "ADDED" || type == "MODIFIED") {
    slices_[name] = obj;
  } else if (type == "DELETED") {
    slices_.erase(name);
  } else {
    return EventResult::kIgnored;
  }
  rv_ = rv;
  return EventResult::kApplied;
}

std::vector<PoolMember> EndpointSliceTracker::Members() const {
  std::map<std::string, PoolMember> by_id;
  for (const auto& [name, slice] : slices_) {
    int port = 0;
    if (slice.contains("ports") && slice["ports"].is_array()) {
      for (const auto& p : slice["ports"]) {
        if (!p.is_object() || !p.contains("port") || !p["port"].is_number_integer()) continue;
        if (port == 0 || Str(p, "name") == port_name_) port = p["port"].get<int>();
        if (Str(p, "name") == port_name_) break;
      }
    }
    if (!slice.contains("endpoints") || !slice["endpoints"].is_array()) continue;
    for (const auto& ep : slice["endpoints"]) {
      if (!ep.is_object() || !ep.contains("addresses") || !ep["addresses"].is_array() ||
          ep["addresses"].empty() || !ep["addresses"][0].is_string()) {
        continue;
      }
      PoolMember m;
      m.host = ep["addresses"][0].get<std::string>();
      m.id = Str(ep, "hostname");
      if (m.id.empty() && ep.contains("targetRef") && ep["targetRef"].is_object()) {
        m.id = Str(ep["targetRef"], "name");
      }
      if (m.id.empty()) m.id = m.host;
      m.port = port;
      m.ready = true;  // conditions.ready absent: "unknown", to be treated as ready
      if (ep.contains("conditions") && ep["conditions"].is_object()) {
        const json& c = ep["conditions"];
        if (c.contains("ready") && c["ready"].is_boolean()) m.ready = c["ready"].get<bool>();
        if (c.contains("terminating") && c["terminating"].is_boolean() &&
            c["terminating"].get<bool>()) {
          m.ready = false;
        }
      }
      auto it = by_id.find(m.id);
      if (it == by_id.end() || (!it->second.ready && m.ready)) by_id[m.id] = m;
    }
  }
  std::vector<PoolMember> out;
  for (auto& [id, m] : by_id) out.push_back(std::move(m));
  return out;
}

KubeSliceApi::KubeSliceApi(KubeClient* client, std::string ns, std::string service,
                           int watch_timeout_s)
    : client_(client),
      ns_(std::move(ns)),
      selector_("kubernetes.io/service-name=" + service),
      watch_timeout_s_(watch_timeout_s) {}

Status KubeSliceApi::List(json* out, KubeCallError* err) {
  return client_->ListEndpointSlices(ns_, selector_, out, err);
}

Status KubeSliceApi::Watch(const std::string& resource_version, std::string* stream,
                           KubeCallError* err) {
  return client_->WatchEndpointSlices(ns_, selector_, resource_version, watch_timeout_s_, stream,
                                      err);
}

EndpointSliceWatcher::EndpointSliceWatcher(SliceApi* api, std::string port_name, OnChange on_change)
    : api_(api), tracker_(std::move(port_name)), on_change_(std::move(on_change)) {}

Status EndpointSliceWatcher::List() {
  json list;
  KubeCallError err;
  Status st = api_->List(&list, &err);
  if (!st.ok()) return st;
  st = tracker_.ApplyList(list);
  if (!st.ok()) return st;
  ++lists_;
  Report();
  return Status::Ok();
}

Status EndpointSliceWatcher::Poll() {
  if (!tracker_.listed()) return List();
  std::string stream;
  KubeCallError err;
  Status st = api_->Watch(tracker_.resource_version(), &stream, &err);
  if (!st.ok()) {
    if (err.http_status == 410) return List();
    return st;
  }
  std::istringstream lines(stream);
  std::string line;
  bool relist = false;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    json event = json::parse(line, nullptr, false);
    if (event.is_discarded())
      continue;  // a line cut by the server closing: the next watch
                 // starts from the last applied resourceVersion
    if (tracker_.ApplyEvent(event) == EndpointSliceTracker::EventResult::kRelist) {
      relist = true;
      break;
    }
  }
  if (relist) return List();
  Report();
  return Status::Ok();
}

void EndpointSliceWatcher::Report() {
  std::vector<PoolMember> now = tracker_.Members();
  if (reported_once_ && now == reported_) return;
  reported_once_ = true;
  reported_ = now;
  if (on_change_) on_change_(reported_);
}

Status StaticWorkers(const std::vector<std::string>& entries, std::vector<PoolMember>* out) {
  std::vector<PoolMember> members;
  std::set<std::string> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    PoolMember m{e, "", 0, true};
    std::string why = ParseWorkerAddress(e, &m.host, &m.port);
    if (why.empty() && !seen.insert(e).second) why = "is listed twice";
    if (!why.empty()) {
      return Status::InvalidArgument("scheduler.workers[" + std::to_string(i) + "]: \"" + e +
                                     "\" " + why);
    }
    members.push_back(std::move(m));
  }
  *out = std::move(members);
  return Status::Ok();
}

std::vector<std::string> ApplyMembers(const std::vector<PoolMember>& members, size_t slots,
                                      double now, Placement* placement) {
  std::set<std::string> listed;
  for (const auto& m : members) {
    listed.insert(m.id);
    if (m.ready) {
      placement->AddWorker(m.id, slots, now);
    } else {
      placement->SetReady(m.id, false, now);  // an unknown not-ready member stays unknown
    }
  }
  std::vector<std::string> removed;
  for (const auto& id : placement->WorkerIds()) {
    if (!listed.count(id)) {
      placement->RemoveWorker(id);
      removed.push_back(id);
    }
  }
  return removed;
}

}  // namespace kiln
