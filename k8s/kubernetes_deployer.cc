#include "k8s/kubernetes_deployer.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace kiln {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The image of container `name` in the Deployment's pod template; false when there is no such
// container. *names gets the container names (for messages).
bool ContainerImage(const json& dep, const std::string& name, std::string* image,
                    std::string* names) {
  names->clear();
  auto spec = dep.find("spec");
  if (spec == dep.end() || !spec->is_object()) return false;
  auto tmpl = spec->find("template");
  if (tmpl == spec->end() || !tmpl->is_object()) return false;
  auto pspec = tmpl->find("spec");
  if (pspec == tmpl->end() || !pspec->is_object()) return false;
  auto containers = pspec->find("containers");
  if (containers == pspec->end() || !containers->is_array()) return false;
  for (const auto& c : *containers) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) continue;
    std::string n = c["name"].get<std::string>();
    *names += (names->empty() ? "" : ", ") + ("\"" + n + "\"");
    if (n == name) {
      *image = c.contains("image") && c["image"].is_string() ? c["image"].get<std::string>() : "";
      return true;
    }
  }
  return false;
}

// "k1=v1,k2=v2" from spec.selector.matchLabels (sorted by key; json objects are ordered).
std::string SelectorOf(const json& dep) {
  std::string sel;
  if (!dep.contains("spec") || !dep["spec"].is_object()) return sel;
  const json& spec = dep["spec"];
  if (!spec.contains("selector") || !spec["selector"].is_object()) return sel;
  const json& s = spec["selector"];
  if (!s.contains("matchLabels") || !s["matchLabels"].is_object()) return sel;
  for (auto it = s["matchLabels"].begin(); it != s["matchLabels"].end(); ++it) {
    if (!it.value().is_string()) continue;
    sel += (sel.empty() ? "" : ",") + it.key() + "=" + it.value().get<std::string>();
  }
  return sel;
}

int64_t Generation(const json& dep) {
  if (!dep.contains("metadata") || !dep["metadata"].is_object()) return 0;
  const json& m = dep["metadata"];
  return m.contains("generation") && m["generation"].is_number_integer()
             ? m["generation"].get<int64_t>()
             : 0;
}

std::string ReasonFor(const KubeCallError& err, const Status& st) {
  if (!err.reason.empty()) return err.reason;
  switch (st.code()) {
    case Status::Code::kPermissionDenied:
      return "Forbidden";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kInvalidArgument:
      return "Invalid";
    default:
      return "Unavailable";
  }
}

}  // namespace

KubernetesDeployer::KubernetesDeployer(KubernetesDeploy cfg, KubernetesDeployerOptions opts)
    : cfg_(std::move(cfg)), opts_(std::move(opts)) {
  KubeConfig kc;
  if (cfg_.kubeconfig) {
    init_ = LoadKubeconfig(*cfg_.kubeconfig, "", &kc);
  } else {
    init_ = LoadInClusterConfig(
        opts_.in_cluster ? *opts_.in_cluster : InClusterSource::FromEnvironment(), &kc);
  }
  if (!init_.ok()) return;
  ns_ = cfg_.namespace_.empty() ? kc.namespace_ : cfg_.namespace_;
  if (ns_.empty()) {
    init_ = Status::FailedPrecondition("no Kubernetes namespace: set deploy.kubernetes.namespace");
    return;
  }
  if (cfg_.deployment.empty() || cfg_.container.empty()) {
    init_ = Status::FailedPrecondition(
        "deploy.kubernetes needs both a deployment and a container name");
    return;
  }
  init_ = KubeClient::Create(kc, opts_.client, &client_);
}

KubernetesDeployer::~KubernetesDeployer() = default;

DeployResult KubernetesDeployer::Fail(const std::string& reason, const std::string& message) const {
  DeployResult r;
  r.state = DeployState::kFailed;
  r.reason = reason;
  r.message = Redact(message);
  // Issue 16: the kinds of kiln's own failures.
  if (reason == "Cancelled") {
    r.error_kind = "cancelled";
    r.next_step = "Nothing to fix: the deploy was cancelled (a newer deploy or a shutdown).";
  } else if (reason == "Superseded") {
    r.error_kind = "superseded";
    r.next_step = "Nothing to fix in your code: someone else changed the Deployment; deploy again.";
  } else if (reason == "Timeout") {
    r.error_kind = "deploy_timeout";
    r.next_step =
        "The rollout did not finish in time without a visible error: check that the program "
        "starts and answers quickly, then deploy again.";
  } else {
    r.error_kind = "infrastructure";
    r.next_step =
        "This is not your code: kiln's deploy target is misconfigured; tell kiln's operator.";
  }
  return r;
}

DeployResult KubernetesDeployer::Classified(RolloutFailure f) const {
  DeployResult r;
  r.state = DeployState::kFailed;
  r.reason = std::move(f.reason);
  r.message = Redact(std::move(f.message));
  r.error_kind = std::move(f.error_kind);
  r.next_step = Redact(std::move(f.next_step));
  r.details = std::move(f.details);
  for (auto& l : r.details.log_tail) l = Redact(std::move(l));
  r.details.probe_message = Redact(std::move(r.details.probe_message));
  return r;
}

DeployResult KubernetesDeployer::ApiFailure(const KubeCallError& err, const Status& st,
                                            const char* during) const {
  spdlog::warn("kubernetes deploy of deployment {} in namespace {}: {}: {}", cfg_.deployment, ns_,
               during, st.message());
  KubeCallError e = err;
  if (e.reason.empty()) e.reason = ReasonFor(err, st);
  return Classified(RolloutEvaluator::DescribeApiError(e.reason, e.http_status, e.verb, e.what,
                                                       e.resource, e.group, e.api_message));
}

std::string KubernetesDeployer::Redact(std::string s) const {
  std::vector<std::pair<std::string, std::string>> needles;
  if (client_) {
    needles.emplace_back(client_->server(), "the Kubernetes API");
    HttpOrigin o;
    std::string rest;
    if (ParseHttpUrl(client_->server(), &o, &rest) && !o.host.empty()) {
      // host:port only: the bare host may also be the registry's (an image reference).
      needles.emplace_back(o.host + ":" + o.port, "the Kubernetes API");
    }
  }
  if (cfg_.kubeconfig && !cfg_.kubeconfig->empty())
    needles.emplace_back(*cfg_.kubeconfig, "kiln's kubeconfig");
  needles.emplace_back("/var/run/secrets/kubernetes.io/serviceaccount", "kiln's service account");
  for (const auto& [needle, with] : needles) {
    for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + with.size()))
      s.replace(p, needle.size(), with);
  }
  return s;
}

DeployResult KubernetesDeployer::DescribeSigns(const PodSigns& s, int64_t pending_ms) {
  const std::string what = "deployment \"" + cfg_.deployment + "\"";
  switch (s.kind) {
    case PodSignKind::kCrash: {
      std::string log;
      KubeCallError err;
      const int lines = std::max(1, opts_.log_tail_lines);
      Status st = client_->GetPodLog(ns_, s.pod, s.container, s.previous, lines,
                                     opts_.log_limit_bytes, &log, &err);
      if (!st.ok() && s.previous && err.http_status == 400) {
        // No previous instance after all (the API answers 400): the current one's log.
        err = KubeCallError();
        st = client_->GetPodLog(ns_, s.pod, s.container, false, lines, opts_.log_limit_bytes, &log,
                                &err);
      }
      if (!st.ok()) {
        spdlog::warn("kubernetes deploy: cannot read the log of pod {} container {}: {}", s.pod,
                     s.container, st.message());
        log.clear();
      }
      return Classified(RolloutEvaluator::DescribeCrash(s, what, log));
    }
    case PodSignKind::kImage:
      return Classified(RolloutEvaluator::DescribeImage(s, what));
    case PodSignKind::kConfig:
      return Classified(RolloutEvaluator::DescribeConfig(s, what));
    case PodSignKind::kUnready: {
      json events;
      KubeCallError err;
      Status st = client_->ListEvents(ns_, s.pod, &events, &err);
      if (!st.ok()) {
        spdlog::warn("kubernetes deploy: cannot list the events of pod {}: {}", s.pod,
                     st.message());
        events = json::object();
      }
      return Classified(RolloutEvaluator::DescribeUnready(s, what, events, pending_ms));
    }
    case PodSignKind::kUnschedulable:
      return Classified(RolloutEvaluator::DescribeUnschedulable(s, what, pending_ms));
    default:
      return Fail("Unknown", what + " failed");
  }
}

bool KubernetesDeployer::SleepOrCancel(std::chrono::milliseconds d, const CancelToken* cancel) {
  if (d.count() < 0) d = std::chrono::milliseconds(0);
  if (!cancel) {
    std::this_thread::sleep_for(d);
    return false;
  }
  if (cancel->cancelled()) return true;
  if (cancel->fd() >= 0) {
    pollfd p{cancel->fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(d.count()));
  } else {
    auto end = Clock::now() + d;
    while (!cancel->cancelled() && Clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cancel->cancelled();
}

bool KubernetesDeployer::Observe(json* dep, RolloutDecision* decision, DeployResult* fail) {
  KubeCallError err;
  Status st = client_->GetDeployment(ns_, cfg_.deployment, dep, &err);
  json rss, pods;
  const std::string selector = st.ok() ? SelectorOf(*dep) : "";
  if (st.ok()) st = client_->ListReplicaSets(ns_, selector, &rss, &err);
  if (st.ok()) st = client_->ListPods(ns_, selector, &pods, &err);
  if (!st.ok()) {
    *fail = ApiFailure(err, st, "observing the rollout");
    return false;
  }
  *decision = RolloutEvaluator::Evaluate(*dep, rss, pods, cfg_.container);
  return true;
}

DeployResult KubernetesDeployer::Deploy(const DeployRequest& req, const DeployProgressFn& progress,
                                        const CancelToken* cancel) {
  const auto start = Clock::now();
  const auto timeout = opts_.rollout_timeout
                           ? *opts_.rollout_timeout
                           : std::chrono::milliseconds(int64_t{cfg_.rollout_timeout_s} * 1000);
  const auto deadline = start + timeout;
  // Issue 19: every API call of this deploy ends by the deadline (a stalled API server included);
  // a little beyond it so the last poll can still report what it saw.
  KubeCallDeadline call_deadline(deadline + std::chrono::seconds(1));
  auto done = [&](DeployResult r, bool changed) {
    r.changed = changed;
    r.elapsed_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return r;
  };
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  if (!init_.ok()) {
    spdlog::warn("kubernetes deploy for deployment {}: configuration unusable: {}", cfg_.deployment,
                 init_.message());
    return done(Classified(RolloutEvaluator::DescribeApiError("Config", 0, "", "", "", "", "")),
                false);
  }
  const std::string what = "deployment \"" + cfg_.deployment + "\" in namespace \"" + ns_ + "\"";
  if (req.image.empty()) return done(Fail("Invalid", "no image to deploy"), false);
  if (cancel && cancel->cancelled())
    return done(Fail("Cancelled", "deploy cancelled before it started"), false);

  // 1. The Deployment as it is.
  json dep;
  KubeCallError err;
  Status st = client_->GetDeployment(ns_, cfg_.deployment, &dep, &err);
  if (!st.ok()) return done(ApiFailure(err, st, "reading the Deployment"), false);
  std::string current, names;
  if (!ContainerImage(dep, cfg_.container, &current, &names))
    return done(
        Fail("ContainerNotFound", "container \"" + cfg_.container + "\" not found in " + what +
                                      " (containers: " + (names.empty() ? "none" : names) + ")"),
        false);

  // 2. Already there?
  if (current == req.image) {
    RolloutDecision d;
    DeployResult fail;
    json now;
    if (!Observe(&now, &d, &fail)) return done(fail, false);
    if (d.phase == RolloutPhase::kComplete) {
      DeployResult r;
      r.state = DeployState::kRolledOut;
      r.message = what + " already runs " + req.image + " (" + d.progress + ")";
      say("already rolled out: " + d.progress);
      return done(r, false);
    }
  }

  // 3. Patch.
  json annotations = {{"kiln.dev/candidate", req.candidate},
                      {"kiln.dev/commit", req.commit},
                      {"kiln.dev/build-id", req.build_id},
                      {"kiln.dev/deploy-id", req.deploy_id}};
  json patch = {
      {"spec",
       {{"template",
         {{"metadata", {{"annotations", annotations}}},
          {"spec",
           {{"containers", json::array({{{"name", cfg_.container}, {"image", req.image}}})}}}}}}}};
  json patched;
  const int tries = std::max(1, opts_.conflict_attempts);
  for (int attempt = 0;; ++attempt) {
    err = KubeCallError();
    st = client_->PatchDeployment(ns_, cfg_.deployment, patch, &patched, &err);
    if (st.ok()) break;
    if (err.reason != "Conflict" || attempt + 1 >= tries)
      return done(ApiFailure(err, st, "patching the Deployment"), false);
    spdlog::info("kubernetes deploy {}: 409 Conflict patching {}, retrying", req.deploy_id, what);
    if (SleepOrCancel(opts_.conflict_backoff * (attempt + 1), cancel))
      return done(Fail("Cancelled", "deploy cancelled while retrying a conflicting patch"), false);
  }
  const int64_t generation = Generation(patched);
  say("patched " + what + " container \"" + cfg_.container + "\" to " + req.image +
      " (generation " + std::to_string(generation) + ")");

  // 4. Follow the rollout.
  std::string last_line;
  Status last_transient;   // the error of the last poll; OK once a poll succeeds again
  DeployResult last_fail;  // that poll's classified failure
  const auto unready_timeout =
      opts_.unready_timeout ? *opts_.unready_timeout
                            : std::chrono::milliseconds(int64_t{cfg_.unready_timeout_s} * 1000);
  // A pending sign (unready / unschedulable) and since when kiln has seen it on that pod.
  PodSigns pending;
  Clock::time_point pending_since{};
  auto pending_ms = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - pending_since).count();
  };
  for (;;) {
    if (cancel && cancel->cancelled())
      return done(Fail("Cancelled", "deploy cancelled while " + what + " was rolling out" +
                                        (last_line.empty() ? "" : " (" + last_line + ")")),
                  true);
    RolloutDecision d;
    DeployResult fail;
    json now;
    const bool observed = Observe(&now, &d, &fail);
    last_transient = observed ? Status::Ok() : Status::Unavailable(fail.message);
    if (!observed) last_fail = fail;
    const auto now_t = Clock::now();
    if (observed) {
      const PodSignKind k = d.signs.kind;
      if (k == PodSignKind::kUnready || k == PodSignKind::kUnschedulable) {
        if (pending.kind != k || pending.pod != d.signs.pod) pending_since = now_t;
        pending = d.signs;
      } else {
        pending = PodSigns();
      }
    }
    if (!observed) {
      if (fail.reason != "Unavailable") return done(fail, true);  // else poll until the deadline
    } else if (Generation(now) > generation && generation > 0) {
      return done(Fail("Superseded", what +
                                         " was changed by someone else during the rollout "
                                         "(generation " +
                                         std::to_string(Generation(now)) + " > " +
                                         std::to_string(generation) + ")"),
                  true);
    } else if (d.phase == RolloutPhase::kComplete) {
      DeployResult r;
      r.state = DeployState::kRolledOut;
      r.message = what + " " + d.message + ", image " + req.image;
      say("rolled out: " + d.progress);
      return done(r, true);
    } else if (d.phase == RolloutPhase::kFailed) {
      if (d.signs.kind == PodSignKind::kCrash || d.signs.kind == PodSignKind::kImage ||
          d.signs.kind == PodSignKind::kConfig)
        return done(DescribeSigns(d.signs, 0), true);
      if (pending.kind != PodSignKind::kNone) {  // ProgressDeadlineExceeded: say why
        DeployResult r = DescribeSigns(pending, pending_ms(now_t));
        r.reason = d.reason;
        r.message = Redact(what + ": " + d.message + ": " + r.message);
        return done(r, true);
      }
      DeployResult r = Fail(d.reason, what + ": " + d.message);
      r.error_kind = "deploy_timeout";
      r.next_step =
          "The new pods never became available: check the program starts and serves quickly, "
          "then build and deploy again.";
      return done(r, true);
    } else if (pending.kind != PodSignKind::kNone && now_t - pending_since >= unready_timeout) {
      return done(DescribeSigns(pending, pending_ms(now_t)), true);
    } else if (d.progress != last_line) {
      last_line = d.progress;
      say(d.progress);
    }
    if (now_t >= deadline) {
      std::string limit = timeout.count() % 1000 == 0
                              ? std::to_string(timeout.count() / 1000) + " s"
                              : std::to_string(timeout.count()) + " ms";
      // The API still failing at the deadline is the news, not the last progress seen.
      if (!last_transient.ok()) {
        spdlog::warn("kubernetes deploy {}: {} did not finish rolling out within {}: {}",
                     req.deploy_id, what, limit, last_transient.message());
        DeployResult r = last_fail;
        const std::string seen = last_line.empty() ? "" : " (last seen: " + last_line + ")";
        if (!r.message.empty() && r.message.back() == '.') r.message.pop_back();
        r.message =
            what + " did not finish rolling out within " + limit + ": " + r.message + seen + ".";
        return done(r, true);
      }
      if (pending.kind != PodSignKind::kNone) {  // the deadline first: the same classified failure
        DeployResult r = DescribeSigns(pending, pending_ms(now_t));
        r.reason = "Timeout";
        r.message = what + " did not finish rolling out within " + limit + ": " + r.message;
        return done(r, true);
      }
      return done(Fail("Timeout", what + " did not finish rolling out within " + limit +
                                      (last_line.empty() ? "" : ": " + last_line)),
                  true);
    }
    auto interval = d.failing ? std::min(opts_.poll_interval, opts_.failing_poll_interval)
                              : opts_.poll_interval;
    auto wait = std::min<std::chrono::milliseconds>(
        interval, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now_t) +
                      std::chrono::milliseconds(1));
    if (SleepOrCancel(wait, cancel)) continue;  // the loop head reports the cancellation
  }
}

Status KubernetesDeployer::Current(std::string* image) {
  if (!init_.ok()) {
    spdlog::warn("kubernetes deployment {}: configuration unusable: {}", cfg_.deployment,
                 init_.message());
    return Status::FailedPrecondition(
        RolloutEvaluator::DescribeApiError("Config", 0, "", "", "", "", "").message);
  }
  json dep;
  KubeCallError err;
  Status st = client_->GetDeployment(ns_, cfg_.deployment, &dep, &err);
  if (!st.ok()) {
    // Same code, the agent's wording (no API URL or kubeconfig path); full text to the log.
    DeployResult f = ApiFailure(err, st, "reading the current image");
    switch (st.code()) {
      case Status::Code::kNotFound:
        return Status::NotFound(f.message);
      case Status::Code::kPermissionDenied:
        return Status::PermissionDenied(f.message);
      case Status::Code::kUnavailable:
        return Status::Unavailable(f.message);
      default:
        return Status::FailedPrecondition(f.message);
    }
  }
  std::string names;
  if (!ContainerImage(dep, cfg_.container, image, &names))
    return Status::NotFound("container \"" + cfg_.container + "\" not found in deployment \"" +
                            cfg_.deployment + "\" in namespace \"" + ns_ + "\"");
  return Status::Ok();
}

}  // namespace kiln
