#include "k8s/rollout.h"

#include <initializer_list>
#include <regex>

#include "common/json_text.h"

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

// --- Issue 16: pod signs ---

bool IsImageReason(const std::string& r) {
  return r == "ImagePullBackOff" || r == "ErrImagePull" || r == "InvalidImageName" ||
         r == "ErrImageNeverPull";
}

bool IsCrashWaitingReason(const std::string& r) {
  return r == "CrashLoopBackOff" || r == "CreateContainerError" || r == "RunContainerError";
}

int Rank(PodSignKind k) {
  switch (k) {
    case PodSignKind::kCrash:
      return 5;
    case PodSignKind::kConfig:
      return 4;
    case PodSignKind::kImage:
      return 3;
    case PodSignKind::kUnschedulable:
      return 2;
    case PodSignKind::kUnready:
      return 1;
    default:
      return 0;
  }
}

bool Fatal(PodSignKind k) {
  return k == PodSignKind::kCrash || k == PodSignKind::kImage || k == PodSignKind::kConfig;
}

std::optional<int> OptInt(const json& j, const char* key) {
  const json& v = At(j, {key});
  if (v.is_number_integer()) return static_cast<int>(v.get<int64_t>());
  return std::nullopt;
}

void FromTerminated(const json& t, PodSigns* s) {
  s->reason = Str(t, {"reason"});
  s->exit_code = OptInt(t, "exitCode");
  s->signal = OptInt(t, "signal");
  if (s->signal && *s->signal == 0) s->signal.reset();
  s->terminated_message = Str(t, {"message"});
}

std::string MemoryLimit(const json& pod, const std::string& container) {
  for (const char* list : {"containers", "initContainers"}) {
    const json& cs = At(pod, {"spec", list});
    if (!cs.is_array()) continue;
    for (const auto& c : cs)
      if (Str(c, {"name"}) == container) return Str(c, {"resources", "limits", "memory"});
  }
  return "";
}

// The signs of one pod for `container` ("" = every container); init containers always count.
PodSigns PodSignsOf(const json& pod, const std::string& container, bool* failing) {
  PodSigns best;
  auto consider = [&](PodSigns s) {
    if (Rank(s.kind) > Rank(best.kind)) best = std::move(s);
  };
  const std::string pod_name = Str(pod, {"metadata", "name"});
  const std::string pod_ip = Str(pod, {"status", "podIP"});
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    const bool init = std::string(list) == "initContainerStatuses";
    const json& statuses = At(pod, {"status", list});
    if (!statuses.is_array()) continue;
    for (const auto& cs : statuses) {
      const std::string name = Str(cs, {"name"});
      if (!init && !container.empty() && name != container) continue;
      PodSigns s;
      s.pod = pod_name;
      s.container = name;
      s.pod_ip = pod_ip;
      s.restarts = static_cast<int>(Int(cs, {"restartCount"}));
      s.memory_limit = MemoryLimit(pod, name);
      const json& last = At(cs, {"lastState", "terminated"});
      const json& term = At(cs, {"state", "terminated"});
      s.waiting_reason = Str(cs, {"state", "waiting", "reason"});
      s.previous = s.restarts > 0 || last.is_object();
      if (s.previous) *failing = true;
      const std::string& w = s.waiting_reason;
      if (!w.empty() && w != "ContainerCreating" && w != "PodInitializing") *failing = true;
      if (IsImageReason(w)) {
        s.kind = PodSignKind::kImage;
        s.reason = w;
        s.message = Str(cs, {"state", "waiting", "message"});
      } else if (w == "CreateContainerConfigError") {
        s.kind = PodSignKind::kConfig;
        s.reason = w;
        s.message = Str(cs, {"state", "waiting", "message"});
      } else if (IsCrashWaitingReason(w)) {
        s.kind = PodSignKind::kCrash;
        s.message = Str(cs, {"state", "waiting", "message"});
        if (last.is_object()) FromTerminated(last, &s);
        if (s.reason.empty()) s.reason = w;
      } else if (term.is_object() && (!init || Int(term, {"exitCode"}, 1) != 0)) {
        s.kind = PodSignKind::kCrash;
        FromTerminated(term, &s);
        if (s.reason.empty()) s.reason = "Terminated";
        *failing = true;
      } else if (last.is_object() && (Str(last, {"reason"}) == "OOMKilled" || s.restarts >= 2)) {
        s.kind = PodSignKind::kCrash;
        FromTerminated(last, &s);
      } else if (!init && At(cs, {"state", "running"}).is_object() &&
                 !(At(cs, {"ready"}).is_boolean() && At(cs, {"ready"}).get<bool>())) {
        s.kind = PodSignKind::kUnready;
        s.reason = "NotReady";
      }
      consider(std::move(s));
    }
  }
  const json& conds = At(pod, {"status", "conditions"});
  if (conds.is_array()) {
    for (const auto& c : conds) {
      if (Str(c, {"type"}) == "PodScheduled" && Str(c, {"status"}) == "False" &&
          Str(c, {"reason"}) == "Unschedulable") {
        PodSigns s;
        s.kind = PodSignKind::kUnschedulable;
        s.pod = pod_name;
        s.container = container;
        s.reason = "Unschedulable";
        s.message = Str(c, {"message"});
        *failing = true;
        consider(std::move(s));
      }
    }
  }
  return best;
}

// --- Issue 16: text hygiene ---

// Appends the UTF-8 sequence at s[i] to *out (or U+FFFD for a maximal ill-formed subpart,
// common/json_text.h); returns the bytes consumed.
size_t CopyUtf8(const std::string& s, size_t i, std::string* out) {
  Utf8Unit u = Utf8UnitAt(std::string_view(s).substr(i));
  if (u.valid)
    out->append(s, i, u.length);
  else
    out->append("\xEF\xBF\xBD");
  return u.length;
}

// Valid UTF-8 with ANSI escape sequences and control characters (but tab and, when
// keep_newlines, newline) removed; other controls become nothing, a lone CR nothing.
std::string CleanText(const std::string& s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0x1B) {  // ESC [ params final  |  ESC x
      size_t j = i + 1;
      if (j < s.size() && s[j] == '[') {
        ++j;
        while (j < s.size() && !(s[j] >= 0x40 && s[j] <= 0x7E)) ++j;
        i = j < s.size() ? j + 1 : j;
      } else {
        i = std::min(s.size(), i + 2);
      }
      continue;
    }
    if (c == '\n') {
      out.push_back(keep_newlines ? '\n' : ' ');
      ++i;
      continue;
    }
    if (c == '\t') {
      out.push_back(keep_newlines ? '\t' : ' ');
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      ++i;
      continue;
    }
    i += CopyUtf8(s, i, &out);
  }
  return out;
}

// Cuts valid UTF-8 to at most `max` bytes at a character boundary, appending "..." when cut.
std::string Bound(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max >= 3 ? max - 3 : 0;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

std::string Plural(int64_t n, const char* one, const char* many) {
  return N(n) + " " + (n == 1 ? one : many);
}

std::string Seconds(int64_t ms) { return N((ms + 500) / 1000) + " s"; }

std::string Sentence(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '.')) s.pop_back();
  return s + ".";
}

// 'container "app" of deployment "web" (pod "web-x")'
std::string Subject(const PodSigns& s, const std::string& what) {
  std::string r = s.container.empty() ? what : "container \"" + s.container + "\" of " + what;
  if (!s.pod.empty()) r += " (pod \"" + s.pod + "\")";
  return r;
}

DeployFailureDetails DetailsOf(const PodSigns& s) {
  DeployFailureDetails d;
  d.pod = s.pod;
  d.container = s.container;
  d.reason = s.reason;
  d.exit_code = s.exit_code;
  d.signal = s.signal;
  if (s.kind == PodSignKind::kCrash || s.restarts > 0) d.restarts = s.restarts;
  d.memory_limit = s.memory_limit;
  return d;
}

const char kNotYourCode[] =
    "This is not your code: deploy again later, and if it keeps failing tell kiln's operator "
    "(kiln's log has the details).";

}  // namespace

bool RolloutEvaluator::IsFatalWaitingReason(const std::string& r) {
  return r == "ImagePullBackOff" || r == "ErrImagePull" || r == "CrashLoopBackOff" ||
         r == "InvalidImageName" || r == "CreateContainerConfigError";
}

RolloutDecision RolloutEvaluator::Evaluate(const json& dep, const json& rss, const json& pods,
                                           const std::string& container) {
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

  // Issue 16: the worst sign among the new pods; crash / image / config fail at once.
  if (new_rs) {
    for (const auto& pod : Items(pods)) {
      if (!PodOfReplicaSet(pod, *new_rs)) continue;
      PodSigns s = PodSignsOf(pod, container, &d.failing);
      if (Rank(s.kind) > Rank(d.signs.kind)) d.signs = std::move(s);
    }
    if (Fatal(d.signs.kind)) {
      const PodSigns& s = d.signs;
      d.phase = RolloutPhase::kFailed;
      d.reason = s.kind == PodSignKind::kCrash && s.reason == "OOMKilled" ? "OOMKilled"
                 : !s.waiting_reason.empty()                              ? s.waiting_reason
                                                                          : "ContainerTerminated";
      std::string m = s.message;
      d.message = "pod \"" + s.pod + "\" container \"" + s.container + "\": " + d.reason +
                  (m.empty() ? "" : ": " + m);
      return d;
    }
  }

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

// --- Issue 16: classified failures ---

std::vector<std::string> RolloutEvaluator::LogTail(const std::string& text, size_t max_lines,
                                                   size_t max_line_bytes) {
  std::vector<std::string> lines;
  const std::string clean = CleanText(text, /*keep_newlines=*/true);
  size_t start = 0;
  while (start < clean.size()) {
    size_t nl = clean.find('\n', start);
    if (nl == std::string::npos) nl = clean.size();
    lines.push_back(Bound(clean.substr(start, nl - start), max_line_bytes));
    start = nl + 1;
  }
  if (lines.size() > max_lines) lines.erase(lines.begin(), lines.end() - max_lines);
  return lines;
}

std::string RolloutEvaluator::ScrubClusterText(const std::string& text, const std::string& pod_ip) {
  std::string s = CleanText(text.size() > 8192 ? text.substr(0, 8192) : text, false);
  static const std::regex kUserInfo(R"(([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"']*@)");
  static const std::regex kQuery(R"((https?://[^\s"'?]*)\?[^\s"']*)");
  static const std::regex kAuth(R"((Bearer|Basic|bearer|basic)\s+[A-Za-z0-9._~+/=-]+)");
  static const std::regex kKeyValue(
      R"(((?:access_)?token|password|passwd|secret|signature|X-Amz-Signature|sig)=[^&\s"']+)",
      std::regex::icase);
  s = std::regex_replace(s, kUserInfo, "$1");
  s = std::regex_replace(s, kQuery, "$1?<redacted>");
  s = std::regex_replace(s, kAuth, "$1 <redacted>");
  s = std::regex_replace(s, kKeyValue, "$1=<redacted>");
  if (!pod_ip.empty()) {
    for (size_t p = s.find(pod_ip); p != std::string::npos; p = s.find(pod_ip, p + 8))
      s.replace(p, pod_ip.size(), "<pod IP>");
  }
  return Bound(s, 1000);
}

std::string RolloutEvaluator::ProbeFailure(const json& events, const std::string& pod) {
  std::string best, best_time;
  for (const auto& e : Items(events)) {
    std::string obj = Str(e, {"involvedObject", "name"});
    if (obj.empty()) obj = Str(e, {"regarding", "name"});  // events.k8s.io/v1
    if (!pod.empty() && obj != pod) continue;
    if (Str(e, {"reason"}) != "Unhealthy") continue;
    std::string msg = Str(e, {"message"});
    if (msg.empty()) msg = Str(e, {"note"});
    if (msg.rfind("Readiness probe", 0) != 0) continue;
    std::string t;
    for (auto path : {std::initializer_list<const char*>{"series", "lastObservedTime"},
                      std::initializer_list<const char*>{"lastTimestamp"},
                      std::initializer_list<const char*>{"eventTime"},
                      std::initializer_list<const char*>{"metadata", "creationTimestamp"}}) {
      t = Str(e, path);
      if (!t.empty()) break;
    }
    t = t.substr(0, 19);  // RFC 3339 to the second: comparable as text
    if (best.empty() || t >= best_time) {
      best = msg;
      best_time = t;
    }
  }
  return best;
}

RolloutFailure RolloutEvaluator::DescribeCrash(const PodSigns& s, const std::string& what,
                                               const std::string& log_text) {
  RolloutFailure f;
  f.error_kind = "deploy_crash";
  f.details = DetailsOf(s);
  f.details.log_tail = LogTail(log_text);
  const bool oom = s.reason == "OOMKilled";
  f.reason = oom                         ? "OOMKilled"
             : !s.waiting_reason.empty() ? s.waiting_reason
                                         : "ContainerTerminated";
  std::string m = Subject(s, what);
  if (oom) {
    m += " was killed for running out of memory (OOMKilled" +
         (s.memory_limit.empty() ? std::string(", no memory limit in the pod spec")
                                 : ", memory limit " + s.memory_limit) +
         (s.exit_code ? ", exit code " + N(*s.exit_code) : "") + ")";
  } else if (s.exit_code && *s.exit_code != 0) {
    m += " exited with code " + N(*s.exit_code) +
         (s.reason.empty() || s.reason == "Error" || s.reason == s.waiting_reason
              ? ""
              : " (" + s.reason + ")");
  } else if (s.signal) {
    m += " was killed by signal " + N(*s.signal);
  } else if (s.exit_code) {
    m += " exited with code 0 although a server must keep running";
  } else {
    m += " failed to start (" + s.reason + ")";
  }
  if (!s.terminated_message.empty()) m += ": " + ScrubClusterText(s.terminated_message, s.pod_ip);
  if (s.restarts > 0) m += ", restarted " + Plural(s.restarts, "time", "times");
  if (!s.waiting_reason.empty()) {
    m += ", now " + s.waiting_reason;
    std::string wm = ScrubClusterText(s.message, s.pod_ip);
    if (!wm.empty()) m += " (" + wm + ")";
  }
  f.message = Sentence(m);
  if (oom) {
    f.next_step =
        "Make the program use less memory" +
        (s.memory_limit.empty() ? std::string() : " than its limit of " + s.memory_limit) +
        " (details.log_tail has its last output) or ask kiln's operator to raise the "
        "limit, then build and deploy again.";
  } else if (!f.details.log_tail.empty()) {
    f.next_step =
        "Fix the crash shown in details.log_tail (the container's last output before it "
        "exited), then build and deploy again.";
  } else {
    f.next_step =
        "The container left no log: run the image locally with the same command to see why it "
        "exits at start-up, fix it, then build and deploy again.";
  }
  return f;
}

RolloutFailure RolloutEvaluator::DescribeImage(const PodSigns& s, const std::string& what) {
  RolloutFailure f;
  f.error_kind = "deploy_image";
  f.reason = s.reason;
  f.details = DetailsOf(s);
  std::string wm = ScrubClusterText(s.message, s.pod_ip);
  f.message = Sentence("the cluster cannot pull the image of " + Subject(s, what) + " (" +
                       s.reason + ")" + (wm.empty() ? "" : ": " + wm));
  f.next_step = s.reason == "InvalidImageName"
                    ? std::string(
                          "This is not your code: kiln produced an image reference the cluster "
                          "refuses; tell kiln's operator.")
                    : std::string(
                          "This is not your code: the cluster could not fetch the image kiln "
                          "built; deploy again, and if it keeps failing tell kiln's operator "
                          "(registry access from the cluster).");
  return f;
}

RolloutFailure RolloutEvaluator::DescribeConfig(const PodSigns& s, const std::string& what) {
  RolloutFailure f;
  f.error_kind = "infrastructure";
  f.reason = s.reason;
  f.details = DetailsOf(s);
  std::string wm = ScrubClusterText(s.message, s.pod_ip);
  f.message = Sentence(Subject(s, what) + " cannot be created from the Deployment's pod " +
                       "configuration (" + s.reason + ")" + (wm.empty() ? "" : ": " + wm));
  f.next_step =
      "This is not your code: the Deployment refers to something missing (a Secret or "
      "ConfigMap); tell kiln's operator.";
  return f;
}

RolloutFailure RolloutEvaluator::DescribeUnready(const PodSigns& s, const std::string& what,
                                                 const json& events, int64_t unready_ms) {
  RolloutFailure f;
  f.error_kind = "deploy_unready";
  f.reason = "Unready";
  f.details = DetailsOf(s);
  f.details.reason = "Unready";
  f.details.unready_ms = unready_ms;
  f.details.probe_message = ScrubClusterText(ProbeFailure(events, s.pod), s.pod_ip);
  std::string m = Subject(s, what) + " is running but not ready after " + Seconds(unready_ms);
  if (!f.details.probe_message.empty()) {
    m += ": " + f.details.probe_message;
  } else {
    m += " (no readiness-probe failure was reported)";
  }
  f.message = Sentence(m);
  f.next_step =
      "Make the readiness probe succeed (details.probe_message says how it fails: check the "
      "port and path the program serves and how long it takes to start), then build and deploy "
      "again.";
  return f;
}

RolloutFailure RolloutEvaluator::DescribeUnschedulable(const PodSigns& s, const std::string& what,
                                                       int64_t pending_ms) {
  RolloutFailure f;
  f.error_kind = "deploy_unschedulable";
  f.reason = "Unschedulable";
  f.details = DetailsOf(s);
  f.details.unready_ms = pending_ms;
  std::string wm = ScrubClusterText(s.message);
  std::string pod = s.pod.empty() ? "the new pod" : "pod \"" + s.pod + "\"";
  f.message =
      Sentence("no node of the cluster can run " + pod + " of " + what + " (" +
               "unschedulable for " + Seconds(pending_ms) + ")" + (wm.empty() ? "" : ": " + wm));
  f.next_step =
      "This is not your code: the cluster has no room for the pod; deploy again later, or ask "
      "kiln's operator for capacity.";
  return f;
}

RolloutFailure RolloutEvaluator::DescribeApiError(const std::string& reason, int http_status,
                                                  const std::string& verb, const std::string& what,
                                                  const std::string& resource,
                                                  const std::string& group,
                                                  const std::string& api_message) {
  RolloutFailure f;
  f.error_kind = "infrastructure";
  f.reason = reason.empty() ? "Unavailable" : reason;
  f.next_step = kNotYourCode;
  const std::string action = verb.empty() ? what : verb + " " + what;
  const std::string api = ScrubClusterText(api_message);
  std::string m;
  if (f.reason == "Unauthorized") {
    m = "the Kubernetes API rejected kiln's credential (401 Unauthorized) for " + action;
  } else if (f.reason == "Forbidden") {
    m = "kiln may not " + action + " (403 Forbidden): kiln's operator must grant verb \"" + verb +
        "\" on \"" + resource + "\" (" + (group.empty() ? "core" : group) + ")";
  } else if (f.reason == "NotFound") {
    size_t p = what.find(" in namespace ");
    m = p == std::string::npos ? what + " not found"
                               : what.substr(0, p) + " not found" + what.substr(p);
    f.next_step =
        "This is not your code: kiln's deploy target is missing from the cluster; tell kiln's "
        "operator.";
  } else if (f.reason == "Conflict") {
    m = "conflict on " + action + (api.empty() ? "" : ": " + api);
  } else if (f.reason == "Invalid") {
    m = "Kubernetes rejected " + action + " as invalid" + (api.empty() ? "" : ": " + api);
  } else if (f.reason == "TLSError") {
    m = "kiln cannot verify the Kubernetes API's TLS certificate (TLS handshake failed)";
  } else if (f.reason == "Config") {
    m = "kiln's Kubernetes settings for this domain are unusable (kubeconfig, in-cluster "
        "credentials, namespace or deployment)";
  } else if (f.reason == "Unavailable" && http_status == 0) {
    m = "the Kubernetes API is unreachable (connection failed or timed out)" +
        (action.empty() ? std::string() : " for " + action);
  } else if (f.reason == "Unavailable") {
    m = "the Kubernetes API is failing (HTTP " + N(http_status) + ")" +
        (action.empty() ? std::string() : " for " + action);
  } else {
    m = "the Kubernetes API gave an unexpected answer" +
        (http_status ? " (HTTP " + N(http_status) + ")" : std::string()) +
        (action.empty() ? std::string() : " to " + action);
  }
  f.message = Sentence(m);
  return f;
}

}  // namespace kiln
