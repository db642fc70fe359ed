#include "k8s/rollout.h"

#include <initializer_list>

namespace kiln {

namespace {

using json = nlohmann::json;

// j[k1][k2]... or null when any step is missing or not an object.
const json& At(const json& j, std::initializer_list<const char*> path) {
  static const json kNull;
  const json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(k);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

int64_t Int(const json& j, std::initializer_list<const char*> path, int64_t dflt = 0) {
  const json& v = At(j, path);
  return v.is_number_integer() ? v.get<int64_t>() : dflt;
}

std::string Str(const json& j, std::initializer_list<const char*> path) {
  const json& v = At(j, path);
  return v.is_string() ? v.get<std::string>() : std::string();
}

const json& Items(const json& list) {
  static const json kEmpty = json::array();
  if (list.is_array()) return list;
  const json& items = At(list, {"items"});
  return items.is_array() ? items : kEmpty;
}

constexpr char kRevision[] = "deployment.kubernetes.io/revision";
constexpr char kHashLabel[] = "pod-template-hash";

// True when `obj` is owned by (kind, name[, uid]); also true when it has no owner references.
bool OwnedBy(const json& obj, const char* kind, const std::string& name, const std::string& uid,
             bool lenient) {
  const json& owners = At(obj, {"metadata", "ownerReferences"});
  if (!owners.is_array() || owners.empty()) return lenient;
  for (const auto& o : owners) {
    if (Str(o, {"kind"}) != kind) continue;
    std::string ouid = Str(o, {"uid"});
    if (!uid.empty() && !ouid.empty()) {
      if (ouid == uid) return true;
    } else if (Str(o, {"name"}) == name) {
      return true;
    }
  }
  return false;
}

json TemplateWithoutHash(json t) {
  if (t.is_object() && t.contains("metadata") && t["metadata"].is_object() &&
      t["metadata"].contains("labels") && t["metadata"]["labels"].is_object()) {
    t["metadata"]["labels"].erase(kHashLabel);
    if (t["metadata"]["labels"].empty()) t["metadata"].erase("labels");
  }
  return t;
}

const json* FindNewReplicaSet(const json& dep, const json& rss) {
  const std::string name = Str(dep, {"metadata", "name"});
  const std::string uid = Str(dep, {"metadata", "uid"});
  const std::string revision = Str(dep, {"metadata", "annotations", kRevision});
  const json tmpl = TemplateWithoutHash(At(dep, {"spec", "template"}));
  const json* by_template = nullptr;
  for (const auto& rs : Items(rss)) {
    if (!OwnedBy(rs, "Deployment", name, uid, /*lenient=*/true)) continue;
    if (!revision.empty() && Str(rs, {"metadata", "annotations", kRevision}) == revision)
      return &rs;
    if (!by_template && TemplateWithoutHash(At(rs, {"spec", "template"})) == tmpl)
      by_template = &rs;
  }
  return by_template;
}

bool PodOfReplicaSet(const json& pod, const json& rs) {
  if (!At(pod, {"metadata", "deletionTimestamp"}).is_null()) return false;
  const std::string hash = Str(rs, {"metadata", "labels", kHashLabel});
  if (!hash.empty() && Str(pod, {"metadata", "labels", kHashLabel}) == hash) return true;
  return OwnedBy(pod, "ReplicaSet", Str(rs, {"metadata", "name"}), Str(rs, {"metadata", "uid"}),
                 /*lenient=*/false);
}

struct Waiting {
  std::string pod, container, reason, message;
};

// The first waiting container of the pod (init containers first); fatal ones preferred.
bool FirstWaiting(const json& pod, bool fatal_only, Waiting* w) {
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    const json& statuses = At(pod, {"status", list});
    if (!statuses.is_array()) continue;
    for (const auto& cs : statuses) {
      std::string reason = Str(cs, {"state", "waiting", "reason"});
      if (reason.empty()) continue;
      if (fatal_only && !RolloutEvaluator::IsFatalWaitingReason(reason)) continue;
      w->pod = Str(pod, {"metadata", "name"});
      w->container = Str(cs, {"name"});
      w->reason = reason;
      w->message = Str(cs, {"state", "waiting", "message"});
      return true;
    }
  }
  return false;
}

const json* Condition(const json& dep, const std::string& type) {
  const json& conds = At(dep, {"status", "conditions"});
  if (!conds.is_array()) return nullptr;
  for (const auto& c : conds)
    if (Str(c, {"type"}) == type) return &c;
  return nullptr;
}

std::string N(int64_t v) { return std::to_string(v); }

}  // namespace

bool RolloutEvaluator::IsFatalWaitingReason(const std::string& r) {
  return r == "ImagePullBackOff" || r == "ErrImagePull" || r == "CrashLoopBackOff" ||
         r == "InvalidImageName" || r == "CreateContainerConfigError";
}

RolloutDecision RolloutEvaluator::Evaluate(const json& dep, const json& rss, const json& pods) {
  RolloutDecision d;
  const int64_t generation = Int(dep, {"metadata", "generation"});
  const int64_t observed = Int(dep, {"status", "observedGeneration"});
  if (observed < generation) {
    d.progress = "waiting for the deployment controller to observe generation " + N(generation) +
                 " (observed " + N(observed) + ")";
    return d;
  }
  const int64_t want = Int(dep, {"spec", "replicas"}, 1);
  const int64_t replicas = Int(dep, {"status", "replicas"});
  const int64_t updated = Int(dep, {"status", "updatedReplicas"});
  const int64_t ready = Int(dep, {"status", "readyReplicas"});
  const int64_t available = Int(dep, {"status", "availableReplicas"});

  const json* new_rs = FindNewReplicaSet(dep, rss);
  if (new_rs) d.new_replicaset = Str(*new_rs, {"metadata", "name"});

  if (const json* prog = Condition(dep, "Progressing")) {
    if (Str(*prog, {"reason"}) == "ProgressDeadlineExceeded") {
      d.phase = RolloutPhase::kFailed;
      d.reason = "ProgressDeadlineExceeded";
      std::string m = Str(*prog, {"message"});
      d.message = (m.empty() ? "the rollout exceeded its progress deadline" : m) + " (" +
                  N(available) + " of " + N(want) + " replicas available, " + N(updated) +
                  " updated)";
      return d;
    }
  }
  Waiting w;
  bool have_waiting = false;
  if (new_rs) {
    for (const auto& pod : Items(pods)) {
      if (!PodOfReplicaSet(pod, *new_rs)) continue;
      Waiting fw;
      if (FirstWaiting(pod, /*fatal_only=*/true, &fw)) {
        d.phase = RolloutPhase::kFailed;
        d.reason = fw.reason;
        d.message = "pod \"" + fw.pod + "\" container \"" + fw.container + "\": " + fw.reason +
                    (fw.message.empty() ? "" : ": " + fw.message);
        return d;
      }
      if (!have_waiting) have_waiting = FirstWaiting(pod, /*fatal_only=*/false, &w);
    }
  }

  if (updated == want && ready == want && available == want && replicas == updated) {
    d.phase = RolloutPhase::kComplete;
    d.progress = N(available) + " of " + N(want) + " replicas available";
    d.message = "rolled out" +
                (d.new_replicaset.empty() ? "" : " ReplicaSet \"" + d.new_replicaset + "\"") +
                ": " + d.progress;
    return d;
  }
  if (updated < want) {
    d.progress = N(updated) + " of " + N(want) + " new replicas updated";
  } else if (replicas > updated) {
    d.progress = N(replicas - updated) + " old replica" + (replicas - updated == 1 ? "" : "s") +
                 " pending termination";
  } else if (available < updated) {
    d.progress = N(available) + " of " + N(updated) + " updated replicas are available";
  } else {
    d.progress = N(ready) + " of " + N(want) + " replicas ready";
  }
  if (have_waiting) d.progress += " (pod \"" + w.pod + "\": " + w.reason + ")";
  return d;
}

}  // namespace kiln
