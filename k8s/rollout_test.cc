// Unit tests of RolloutEvaluator: every decision from hand-built API objects.
#include "k8s/rollout.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

using json = nlohmann::json;

json Template(const std::string& image) {
  return {{"metadata", {{"labels", {{"app", "web"}}}}},
          {"spec", {{"containers", json::array({{{"name", "app"}, {"image", image}}})}}}};
}

// A Deployment at generation `gen` (observed `observed`) with the given status counts.
json Dep(int64_t gen, int64_t observed, int64_t want, int64_t replicas, int64_t updated,
         int64_t ready, int64_t available, const std::string& revision = "2") {
  return {{"metadata",
           {{"name", "web"},
            {"namespace", "loop"},
            {"uid", "dep-uid"},
            {"generation", gen},
            {"annotations", {{"deployment.kubernetes.io/revision", revision}}}}},
          {"spec",
           {{"replicas", want},
            {"selector", {{"matchLabels", {{"app", "web"}}}}},
            {"template", Template("reg/app@sha256:new")}}},
          {"status",
           {{"observedGeneration", observed},
            {"replicas", replicas},
            {"updatedReplicas", updated},
            {"readyReplicas", ready},
            {"availableReplicas", available}}}};
}

json Rs(const std::string& name, const std::string& hash, const std::string& revision,
        const std::string& image) {
  json t = Template(image);
  t["metadata"]["labels"]["pod-template-hash"] = hash;
  return {{"metadata",
           {{"name", name},
            {"uid", name + "-uid"},
            {"labels", {{"app", "web"}, {"pod-template-hash", hash}}},
            {"annotations", {{"deployment.kubernetes.io/revision", revision}}},
            {"ownerReferences",
             json::array({{{"kind", "Deployment"}, {"name", "web"}, {"uid", "dep-uid"}}})}}},
          {"spec", {{"template", t}}}};
}

json RsList() {
  return {{"kind", "ReplicaSetList"},
          {"items", json::array({Rs("web-old", "oldhash", "1", "reg/app@sha256:old"),
                                 Rs("web-new", "newhash", "2", "reg/app@sha256:new")})}};
}

json Pod(const std::string& name, const std::string& hash, const std::string& waiting_reason = "",
         const std::string& waiting_message = "", bool init = false) {
  json cs = {{"name", "app"}, {"ready", waiting_reason.empty()}};
  if (waiting_reason.empty()) {
    cs["state"] = {{"running", {{"startedAt", "2024-01-01T00:00:00Z"}}}};
  } else {
    cs["state"] = {{"waiting", {{"reason", waiting_reason}, {"message", waiting_message}}}};
  }
  json pod = {
      {"metadata", {{"name", name}, {"labels", {{"app", "web"}, {"pod-template-hash", hash}}}}},
      {"status", json::object()}};
  pod["status"][init ? "initContainerStatuses" : "containerStatuses"] = json::array({cs});
  return pod;
}

json Pods(std::initializer_list<json> items) {
  json arr = json::array();
  for (const auto& i : items) arr.push_back(i);
  return {{"kind", "PodList"}, {"items", arr}};
}

void AddCondition(json* dep, const std::string& type, const std::string& status,
                  const std::string& reason, const std::string& message) {
  (*dep)["status"]["conditions"].push_back(
      {{"type", type}, {"status", status}, {"reason", reason}, {"message", message}});
}

TEST(Rollout, WaitsForTheControllerToObserveTheGeneration) {
  json dep = Dep(3, 2, 3, 3, 3, 3, 3);
  // Even a deadline condition from the previous generation does not count yet.
  AddCondition(&dep, "Progressing", "False", "ProgressDeadlineExceeded", "old");
  RolloutDecision d = RolloutEvaluator::Evaluate(dep, RsList(), Pods({}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(d.progress,
            "waiting for the deployment controller to observe generation 3 (observed 2)");
}

TEST(Rollout, CompleteWhenAllCountsMatch) {
  json dep = Dep(2, 2, 3, 3, 3, 3, 3);
  AddCondition(&dep, "Progressing", "True", "NewReplicaSetAvailable", "ok");
  RolloutDecision d = RolloutEvaluator::Evaluate(
      dep, RsList(), Pods({Pod("a", "newhash"), Pod("b", "newhash"), Pod("c", "newhash")}));
  EXPECT_EQ(d.phase, RolloutPhase::kComplete);
  EXPECT_EQ(d.progress, "3 of 3 replicas available");
  EXPECT_EQ(d.new_replicaset, "web-new");
  EXPECT_NE(d.message.find("web-new"), std::string::npos);
}

TEST(Rollout, ObservedGenerationAheadStillCompletes) {
  RolloutDecision d = RolloutEvaluator::Evaluate(Dep(2, 3, 1, 1, 1, 1, 1), RsList(), Pods({}));
  EXPECT_EQ(d.phase, RolloutPhase::kComplete);
}

TEST(Rollout, DefaultReplicasIsOne) {
  json dep = Dep(1, 1, 1, 1, 1, 1, 1);
  dep["spec"].erase("replicas");
  EXPECT_EQ(RolloutEvaluator::Evaluate(dep, RsList(), Pods({})).phase, RolloutPhase::kComplete);
  dep["status"]["updatedReplicas"] = 0;
  EXPECT_EQ(RolloutEvaluator::Evaluate(dep, RsList(), Pods({})).phase, RolloutPhase::kInProgress);
}

TEST(Rollout, NotAllUpdated) {
  RolloutDecision d = RolloutEvaluator::Evaluate(Dep(2, 2, 3, 4, 1, 3, 3), RsList(), Pods({}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(d.progress, "1 of 3 new replicas updated");
}

TEST(Rollout, OldReplicasPendingTermination) {
  RolloutDecision d = RolloutEvaluator::Evaluate(Dep(2, 2, 3, 4, 3, 3, 3), RsList(), Pods({}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(d.progress, "1 old replica pending termination");
}

TEST(Rollout, UpdatedButNotAllAvailable) {
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Dep(2, 2, 3, 3, 3, 2, 2), RsList(),
      Pods({Pod("a", "newhash"), Pod("b", "newhash"), Pod("c", "newhash", "ContainerCreating")}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(d.progress, "2 of 3 updated replicas are available (pod \"c\": ContainerCreating)");
}

TEST(Rollout, ReadyButNotAvailableIsInProgress) {
  RolloutDecision d = RolloutEvaluator::Evaluate(Dep(2, 2, 2, 2, 2, 2, 1), RsList(), Pods({}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(d.progress, "1 of 2 updated replicas are available");
}

TEST(Rollout, ProgressDeadlineExceededFails) {
  json dep = Dep(2, 2, 3, 4, 1, 3, 3);
  AddCondition(&dep, "Available", "True", "MinimumReplicasAvailable", "");
  AddCondition(&dep, "Progressing", "False", "ProgressDeadlineExceeded",
               "ReplicaSet \"web-new\" has timed out progressing.");
  RolloutDecision d = RolloutEvaluator::Evaluate(dep, RsList(), Pods({}));
  EXPECT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "ProgressDeadlineExceeded");
  EXPECT_NE(d.message.find("has timed out progressing"), std::string::npos);
}

TEST(Rollout, EveryFatalWaitingReasonOfANewPodFails) {
  for (const char* reason : {"ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff",
                             "InvalidImageName", "CreateContainerConfigError"}) {
    RolloutDecision d = RolloutEvaluator::Evaluate(
        Dep(2, 2, 1, 2, 1, 1, 1), RsList(),
        Pods({Pod("web-old-1", "oldhash"), Pod("web-new-1", "newhash", reason, "the details")}));
    EXPECT_EQ(d.phase, RolloutPhase::kFailed) << reason;
    EXPECT_EQ(d.reason, reason);
    EXPECT_EQ(d.message,
              std::string("pod \"web-new-1\" container \"app\": ") + reason + ": the details");
  }
}

TEST(Rollout, FatalInitContainerFails) {
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Dep(2, 2, 1, 2, 1, 1, 1), RsList(),
      Pods({Pod("web-new-1", "newhash", "CrashLoopBackOff", "back-off 10s", /*init=*/true)}));
  EXPECT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "CrashLoopBackOff");
}

TEST(Rollout, OldPodsFailuresDoNotCount) {
  RolloutDecision d =
      RolloutEvaluator::Evaluate(Dep(2, 2, 1, 2, 1, 0, 0), RsList(),
                                 Pods({Pod("web-old-1", "oldhash", "CrashLoopBackOff", "old crash"),
                                       Pod("web-new-1", "newhash", "ContainerCreating")}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
}

TEST(Rollout, TerminatingPodsDoNotCount) {
  json pod = Pod("web-new-1", "newhash", "ImagePullBackOff", "x");
  pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z";
  RolloutDecision d = RolloutEvaluator::Evaluate(Dep(2, 2, 1, 2, 1, 0, 0), RsList(), Pods({pod}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
}

TEST(Rollout, NonFatalWaitingReasonIsProgress) {
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Dep(2, 2, 1, 2, 1, 0, 0), RsList(), Pods({Pod("web-new-1", "newhash", "ContainerCreating")}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_FALSE(RolloutEvaluator::IsFatalWaitingReason("ContainerCreating"));
  EXPECT_FALSE(RolloutEvaluator::IsFatalWaitingReason("PodInitializing"));
}

TEST(Rollout, PodMatchedByOwnerWhenNoHashLabel) {
  json pod = Pod("p", "", "ErrImagePull", "not found");
  pod["metadata"]["labels"].erase("pod-template-hash");
  pod["metadata"]["ownerReferences"] =
      json::array({{{"kind", "ReplicaSet"}, {"name", "web-new"}, {"uid", "web-new-uid"}}});
  RolloutDecision d = RolloutEvaluator::Evaluate(Dep(2, 2, 1, 1, 1, 0, 0), RsList(), Pods({pod}));
  EXPECT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "ErrImagePull");
}

TEST(Rollout, NewReplicaSetByTemplateWhenNoRevision) {
  json dep = Dep(2, 2, 1, 1, 1, 0, 0);
  dep["metadata"].erase("annotations");
  json rss = RsList();
  for (auto& rs : rss["items"]) rs["metadata"].erase("annotations");
  RolloutDecision d = RolloutEvaluator::Evaluate(
      dep, rss, Pods({Pod("web-new-1", "newhash", "ImagePullBackOff", "Back-off pulling")}));
  EXPECT_EQ(d.new_replicaset, "web-new");
  EXPECT_EQ(d.phase, RolloutPhase::kFailed);
}

TEST(Rollout, ReplicaSetOfAnotherDeploymentIsIgnored) {
  json rss = RsList();
  rss["items"][1]["metadata"]["ownerReferences"][0]["uid"] = "other-uid";
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Dep(2, 2, 1, 2, 1, 0, 0), rss, Pods({Pod("x", "newhash", "ImagePullBackOff", "")}));
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(d.new_replicaset, "");
}

TEST(Rollout, MalformedInputsAreInProgressNotCrashes) {
  for (const json& dep : {json(), json::array(), json("x"), json{{"status", 3}},
                          json{{"metadata", {{"generation", "2"}}}}}) {
    RolloutDecision d = RolloutEvaluator::Evaluate(dep, json("junk"), json{{"items", 5}});
    EXPECT_NE(d.phase, RolloutPhase::kFailed);
  }
}

// --- Issue 16: failures say why. Pods and Events shaped as the API returns them
// (core/v1 Pod, PodStatus, ContainerStatus; core/v1 Event and events.k8s.io/v1 Event). ---

// A new pod of web-new (ReplicaSet hash "newhash") with one container status `cs` for "app"
// (limits.memory `mem` when given) and the given pod conditions / phase.
json RealPod(const std::string& name, json cs, json conditions, const std::string& phase,
             const std::string& mem = "") {
  json container = {{"name", "app"},
                    {"image", "reg/app@sha256:new"},
                    {"ports", json::array({{{"containerPort", 8080}, {"protocol", "TCP"}}})},
                    {"readinessProbe",
                     {{"httpGet", {{"path", "/healthz"}, {"port", 8080}, {"scheme", "HTTP"}}},
                      {"periodSeconds", 5},
                      {"failureThreshold", 3}}},
                    {"resources", json::object()}};
  if (!mem.empty()) container["resources"] = {{"limits", {{"memory", mem}, {"cpu", "500m"}}}};
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", "loop"},
                {"uid", "0f6c7a52-3d1e-4b7e-9a52-" + std::string(12, '1')},
                {"labels", {{"app", "web"}, {"pod-template-hash", "newhash"}}},
                {"ownerReferences", json::array({{{"apiVersion", "apps/v1"},
                                                  {"kind", "ReplicaSet"},
                                                  {"name", "web-new"},
                                                  {"uid", "web-new-uid"},
                                                  {"controller", true},
                                                  {"blockOwnerDeletion", true}}})}}},
              {"spec",
               {{"containers", json::array({container})},
                {"restartPolicy", "Always"},
                {"nodeName", "node-1"}}},
              {"status",
               {{"phase", phase},
                {"conditions", conditions},
                {"hostIP", "10.0.0.10"},
                {"podIP", "10.244.1.17"},
                {"podIPs", json::array({{{"ip", "10.244.1.17"}}})},
                {"startTime", "2024-05-01T10:00:00Z"},
                {"qosClass", mem.empty() ? "BestEffort" : "Burstable"}}}};
  if (!cs.is_null()) pod["status"]["containerStatuses"] = json::array({cs});
  return pod;
}

json Conds(bool ready) {
  const char* r = ready ? "True" : "False";
  json c = json::array();
  c.push_back({{"type", "PodReadyToStartContainers"}, {"status", "True"}});
  c.push_back({{"type", "Initialized"}, {"status", "True"}});
  json ready_c = {{"type", "Ready"}, {"status", r}, {"lastTransitionTime", "2024-05-01T10:00:01Z"}};
  json cr = {{"type", "ContainersReady"}, {"status", r}};
  if (!ready) {
    ready_c["reason"] = "ContainersNotReady";
    ready_c["message"] = "containers with unready status: [app]";
    cr["reason"] = "ContainersNotReady";
    cr["message"] = "containers with unready status: [app]";
  }
  c.push_back(ready_c);
  c.push_back(cr);
  c.push_back({{"type", "PodScheduled"}, {"status", "True"}});
  return c;
}

json Terminated(int exit_code, const std::string& reason) {
  return {{"exitCode", exit_code},
          {"reason", reason},
          {"startedAt", "2024-05-01T10:00:02Z"},
          {"finishedAt", "2024-05-01T10:00:03Z"},
          {"containerID", "containerd://4a5b"}};
}

json ContainerStatus(json state, json last, int restarts, bool ready) {
  json cs = {{"name", "app"},
             {"state", state},
             {"lastState", last.is_null() ? json::object() : json{{"terminated", last}}},
             {"ready", ready},
             {"restartCount", restarts},
             {"image", "reg/app@sha256:new"},
             {"imageID", "reg/app@sha256:new"},
             {"containerID", "containerd://9f1e"},
             {"started", state.contains("running")}};
  return cs;
}

// A Deployment whose only updated replica is not available yet.
json Rolling() { return Dep(2, 2, 1, 1, 1, 0, 0); }

TEST(RolloutFailures, CrashLoopWithExitCodeOne) {
  json cs = ContainerStatus({{"waiting",
                              {{"reason", "CrashLoopBackOff"},
                               {"message",
                                "back-off 40s restarting failed container=app "
                                "pod=web-new-7d9c_loop(0f6c7a52)"}}}},
                            Terminated(1, "Error"), 3, false);
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-7d9c", cs, Conds(false), "Running")}), "app");
  ASSERT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "CrashLoopBackOff");
  EXPECT_TRUE(d.failing);
  ASSERT_EQ(d.signs.kind, PodSignKind::kCrash);
  EXPECT_EQ(d.signs.exit_code, 1);
  EXPECT_EQ(d.signs.restarts, 3);
  EXPECT_TRUE(d.signs.previous);
  EXPECT_EQ(d.signs.pod, "web-new-7d9c");

  std::string log;
  for (int i = 1; i <= 45; ++i) log += "line " + std::to_string(i) + "\n";
  log += "panic: open /config.yaml: no such file or directory\n";
  RolloutFailure f = RolloutEvaluator::DescribeCrash(d.signs, "deployment \"web\"", log);
  EXPECT_EQ(f.error_kind, "deploy_crash");
  EXPECT_EQ(f.reason, "CrashLoopBackOff");
  EXPECT_EQ(f.details.exit_code, 1);
  EXPECT_EQ(f.details.reason, "Error");
  EXPECT_EQ(f.details.restarts, 3);
  ASSERT_EQ(f.details.log_tail.size(), 40u);  // the last ~40 lines (issue 16)
  EXPECT_EQ(f.details.log_tail.front(), "line 7");
  EXPECT_EQ(f.details.log_tail.back(), "panic: open /config.yaml: no such file or directory");
  EXPECT_NE(f.message.find("container \"app\" of deployment \"web\""), std::string::npos);
  EXPECT_NE(f.message.find("exited with code 1"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("restarted 3 times"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("CrashLoopBackOff"), std::string::npos) << f.message;
  EXPECT_NE(f.next_step.find("log_tail"), std::string::npos);
  // No log: the next step says how to see the crash instead.
  EXPECT_EQ(RolloutEvaluator::DescribeCrash(d.signs, "x", "").next_step.find("log_tail"),
            std::string::npos);
}

TEST(RolloutFailures, OomKilledNamesTheMemoryLimit) {
  // Restarted once after the OOM kill; running again, not ready.
  json cs = ContainerStatus({{"running", {{"startedAt", "2024-05-01T10:00:04Z"}}}},
                            Terminated(137, "OOMKilled"), 1, false);
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-1", cs, Conds(false), "Running", "128Mi")}),
      "app");
  ASSERT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "OOMKilled");
  ASSERT_EQ(d.signs.kind, PodSignKind::kCrash);
  EXPECT_EQ(d.signs.memory_limit, "128Mi");
  RolloutFailure f =
      RolloutEvaluator::DescribeCrash(d.signs, "deployment \"web\"", "allocating 512 MiB\n");
  EXPECT_EQ(f.error_kind, "deploy_crash");
  EXPECT_EQ(f.reason, "OOMKilled");
  EXPECT_EQ(f.details.reason, "OOMKilled");
  EXPECT_EQ(f.details.exit_code, 137);
  EXPECT_EQ(f.details.restarts, 1);
  EXPECT_EQ(f.details.memory_limit, "128Mi");
  EXPECT_NE(f.message.find("out of memory (OOMKilled, memory limit 128Mi"), std::string::npos)
      << f.message;
  EXPECT_NE(f.next_step.find("128Mi"), std::string::npos) << f.next_step;
  EXPECT_EQ(f.details.log_tail, std::vector<std::string>{"allocating 512 MiB"});
}

TEST(RolloutFailures, FirstTerminationIsACrashWithoutPreviousInstance) {
  json cs = ContainerStatus({{"terminated", Terminated(2, "Error")}}, nullptr, 0, false);
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-1", cs, Conds(false), "Running")}), "app");
  ASSERT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "ContainerTerminated");
  EXPECT_EQ(d.signs.exit_code, 2);
  EXPECT_FALSE(d.signs.previous);  // its own log, not previous=true
  EXPECT_EQ(RolloutEvaluator::DescribeCrash(d.signs, "x", "").details.restarts, 0);

  // A container that cannot even start: the runtime's message is the news.
  json start = Terminated(128, "StartError");
  start["message"] =
      "failed to create containerd task: exec: \"/app\": stat /app: no such file or directory";
  json cs2 = ContainerStatus(
      {{"waiting", {{"reason", "CrashLoopBackOff"}, {"message", "back-off"}}}}, start, 2, false);
  RolloutDecision d2 = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-1", cs2, Conds(false), "Running")}), "app");
  RolloutFailure f2 = RolloutEvaluator::DescribeCrash(d2.signs, "deployment \"web\"", "");
  EXPECT_EQ(f2.details.exit_code, 128);
  EXPECT_EQ(f2.details.reason, "StartError");
  EXPECT_NE(f2.message.find("exited with code 128 (StartError): failed to create containerd "
                            "task: exec: \"/app\": stat /app: no such file or directory"),
            std::string::npos)
      << f2.message;
}

TEST(RolloutFailures, OneRestartWithoutOomIsOnlyASign) {
  json cs = ContainerStatus({{"running", {{"startedAt", "2024-05-01T10:00:04Z"}}}},
                            Terminated(1, "Error"), 1, false);
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-1", cs, Conds(false), "Running")}), "app");
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_TRUE(d.failing);
  EXPECT_EQ(d.signs.kind, PodSignKind::kUnready);
}

TEST(RolloutFailures, ReadinessFailingIsPendingThenDescribedFromEvents) {
  json cs =
      ContainerStatus({{"running", {{"startedAt", "2024-05-01T10:00:02Z"}}}}, nullptr, 0, false);
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-1", cs, Conds(false), "Running")}), "app");
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_FALSE(d.failing);  // unready alone may be a slow start: no fast polling
  ASSERT_EQ(d.signs.kind, PodSignKind::kUnready);
  EXPECT_EQ(d.signs.pod_ip, "10.244.1.17");

  auto event = [](const std::string& pod, const std::string& msg, const std::string& last) {
    return json{{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata",
                 {{"name", pod + ".17c2a1b9d6e0f" + last.substr(17, 2)},
                  {"namespace", "loop"},
                  {"creationTimestamp", "2024-05-01T10:00:05Z"}}},
                {"involvedObject",
                 {{"kind", "Pod"},
                  {"namespace", "loop"},
                  {"name", pod},
                  {"apiVersion", "v1"},
                  {"fieldPath", "spec.containers{app}"}}},
                {"reason", "Unhealthy"},
                {"message", msg},
                {"source", {{"component", "kubelet"}, {"host", "node-1"}}},
                {"firstTimestamp", "2024-05-01T10:00:05Z"},
                {"lastTimestamp", last},
                {"count", 4},
                {"type", "Warning"},
                {"reportingComponent", "kubelet"}};
  };
  json events = {
      {"kind", "EventList"},
      {"apiVersion", "v1"},
      {"metadata", {{"resourceVersion", "4242"}}},
      {"items",
       json::array(
           {event("web-new-1", "Readiness probe failed: HTTP probe failed with statuscode: 500",
                  "2024-05-01T10:00:20Z"),
            event("web-new-1",
                  "Readiness probe failed: Get \"http://10.244.1.17:8080/healthz\": dial tcp "
                  "10.244.1.17:8080: connect: connection refused",
                  "2024-05-01T10:00:45Z"),
            event("web-other", "Readiness probe failed: other pod", "2024-05-01T10:00:59Z"),
            event("web-new-1", "Liveness probe failed: timeout", "2024-05-01T10:00:58Z")})}};
  RolloutFailure f =
      RolloutEvaluator::DescribeUnready(d.signs, "deployment \"web\"", events, 61000);
  EXPECT_EQ(f.error_kind, "deploy_unready");
  EXPECT_EQ(f.details.unready_ms, 61000);
  EXPECT_EQ(f.details.probe_message,
            "Readiness probe failed: Get \"http://<pod IP>:8080/healthz\": dial tcp <pod IP>:8080: "
            "connect: connection refused");
  EXPECT_NE(f.message.find("running but not ready after 61 s: Readiness probe failed"),
            std::string::npos)
      << f.message;
  EXPECT_EQ(f.message.find("10.244"), std::string::npos) << f.message;
  EXPECT_NE(f.next_step.find("readiness probe"), std::string::npos);

  // events.k8s.io/v1 shape: regarding + note.
  json v1 = {
      {"kind", "EventList"},
      {"apiVersion", "events.k8s.io/v1"},
      {"items",
       json::array({{{"regarding", {{"kind", "Pod"}, {"name", "web-new-1"}}},
                     {"reason", "Unhealthy"},
                     {"note", "Readiness probe failed: HTTP probe failed with statuscode: 503"},
                     {"eventTime", "2024-05-01T10:00:30.000000Z"},
                     {"type", "Warning"}}})}};
  EXPECT_EQ(RolloutEvaluator::ProbeFailure(v1, "web-new-1"),
            "Readiness probe failed: HTTP probe failed with statuscode: 503");
  EXPECT_EQ(RolloutEvaluator::ProbeFailure(v1, "web-new-2"), "");
}

TEST(RolloutFailures, ImagePullFailureHidesRegistryCredentials) {
  json cs = ContainerStatus(
      {{"waiting",
        {{"reason", "ErrImagePull"},
         {"message",
          "rpc error: code = Unknown desc = failed to pull and unpack image "
          "\"reg/app@sha256:new\": failed to resolve reference: unexpected status from HEAD "
          "request to https://robot:s3cr3t-pass@reg.internal:5000/v2/app/manifests/"
          "sha256:new?ns=reg&token=abcdef: 401 Unauthorized, Authorization: Bearer eyJhbGciOi"}}}},
      nullptr, 0, false);
  json pod = RealPod("web-new-1", cs, Conds(false), "Pending");
  RolloutDecision d = RolloutEvaluator::Evaluate(Rolling(), RsList(), Pods({pod}), "app");
  ASSERT_EQ(d.phase, RolloutPhase::kFailed);
  EXPECT_EQ(d.reason, "ErrImagePull");
  ASSERT_EQ(d.signs.kind, PodSignKind::kImage);
  RolloutFailure f = RolloutEvaluator::DescribeImage(d.signs, "deployment \"web\"");
  EXPECT_EQ(f.error_kind, "deploy_image");
  EXPECT_EQ(f.reason, "ErrImagePull");
  for (const char* secret : {"s3cr3t-pass", "robot", "abcdef", "eyJhbGciOi"})
    EXPECT_EQ(f.message.find(secret), std::string::npos) << secret << ": " << f.message;
  EXPECT_NE(f.message.find("failed to pull and unpack image"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("401 Unauthorized"), std::string::npos) << f.message;
  EXPECT_NE(f.next_step.find("not your code"), std::string::npos);
}

TEST(RolloutFailures, UnschedulableIsPending) {
  json conds = json::array({{{"type", "PodScheduled"},
                             {"status", "False"},
                             {"lastProbeTime", nullptr},
                             {"lastTransitionTime", "2024-05-01T10:00:00Z"},
                             {"reason", "Unschedulable"},
                             {"message",
                              "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 "
                              "nodes are available: 3 No preemption victims found for incoming "
                              "pod."}}});
  json pod = RealPod("web-new-1", nullptr, conds, "Pending", "64Gi");
  pod["status"].erase("podIP");
  RolloutDecision d = RolloutEvaluator::Evaluate(Rolling(), RsList(), Pods({pod}), "app");
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_TRUE(d.failing);
  ASSERT_EQ(d.signs.kind, PodSignKind::kUnschedulable);
  RolloutFailure f = RolloutEvaluator::DescribeUnschedulable(d.signs, "deployment \"web\"", 60000);
  EXPECT_EQ(f.error_kind, "deploy_unschedulable");
  EXPECT_EQ(f.reason, "Unschedulable");
  EXPECT_NE(f.message.find("3 Insufficient memory"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("unschedulable for 60 s"), std::string::npos) << f.message;
}

TEST(RolloutFailures, HealthyRolloutHasNoSigns) {
  json cs =
      ContainerStatus({{"running", {{"startedAt", "2024-05-01T10:00:02Z"}}}}, nullptr, 0, true);
  RolloutDecision d =
      RolloutEvaluator::Evaluate(Dep(2, 2, 1, 1, 1, 1, 1), RsList(),
                                 Pods({RealPod("web-new-1", cs, Conds(true), "Running")}), "app");
  EXPECT_EQ(d.phase, RolloutPhase::kComplete);
  EXPECT_EQ(d.signs.kind, PodSignKind::kNone);
  EXPECT_FALSE(d.failing);
}

TEST(RolloutFailures, OtherContainersAreNotTheDeployedOne) {
  json cs = ContainerStatus({{"terminated", Terminated(1, "Error")}}, nullptr, 0, false);
  cs["name"] = "sidecar";
  json pod = RealPod("web-new-1", cs, Conds(false), "Running");
  RolloutDecision d = RolloutEvaluator::Evaluate(Rolling(), RsList(), Pods({pod}), "app");
  EXPECT_EQ(d.phase, RolloutPhase::kInProgress);
  EXPECT_EQ(RolloutEvaluator::Evaluate(Rolling(), RsList(), Pods({pod})).phase,
            RolloutPhase::kFailed);
}

TEST(RolloutFailures, LogTailIsValidUtf8AndBounded) {
  std::string log = "\x1b[31mred\x1b[0m text\r\n";
  log += "bad \xff\xfe bytes\n";
  log += "overlong \xc0\xaf and surrogate \xed\xa0\x80 end\n";
  log += std::string(2000, 'x') + "\n";
  log += "ok \xc3\xa9 cut \xe2\x82";  // a truncated sequence at the end of the buffer
  std::vector<std::string> t = RolloutEvaluator::LogTail(log, 20, 512);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[0], "red text");
  EXPECT_EQ(t[1], "bad \xef\xbf\xbd\xef\xbf\xbd bytes");
  EXPECT_EQ(t[2].find("\xc0"), std::string::npos);
  EXPECT_EQ(t[2].find("\xed\xa0"), std::string::npos);
  EXPECT_LE(t[3].size(), 512u);
  EXPECT_EQ(t[3].substr(t[3].size() - 3), "...");
  EXPECT_EQ(t[4], "ok \xc3\xa9 cut \xef\xbf\xbd");
  EXPECT_EQ(RolloutEvaluator::LogTail("a\nb\nc\n", 2), (std::vector<std::string>{"b", "c"}));
  EXPECT_TRUE(RolloutEvaluator::LogTail("").empty());
}

TEST(RolloutFailures, ApiErrorsSayNotYourCodeWithoutServerOrPaths) {
  const std::string what = "deployments.apps \"web\" in namespace \"loop\"";
  for (const auto& [reason, status] :
       std::vector<std::pair<std::string, int>>{{"Unavailable", 0},
                                                {"Unavailable", 503},
                                                {"Unauthorized", 401},
                                                {"Forbidden", 403},
                                                {"TLSError", 0},
                                                {"Config", 0},
                                                {"BadResponse", 200}}) {
    RolloutFailure f = RolloutEvaluator::DescribeApiError(
        reason, status, "patch", what, "deployments", "apps",
        "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:kiln:kiln\"");
    EXPECT_EQ(f.error_kind, "infrastructure") << reason;
    EXPECT_EQ(f.reason, reason);
    EXPECT_NE(f.next_step.find("not your code"), std::string::npos) << reason;
    EXPECT_EQ(f.message.find("serviceaccount"), std::string::npos) << f.message;
    EXPECT_EQ(f.message.find("https://"), std::string::npos) << f.message;
  }
  EXPECT_NE(RolloutEvaluator::DescribeApiError("Unavailable", 0, "get", what, "", "", "")
                .message.find("unreachable"),
            std::string::npos);
  EXPECT_NE(
      RolloutEvaluator::DescribeApiError("Forbidden", 403, "patch", what, "deployments", "apps", "")
          .message.find("grant verb \"patch\" on \"deployments\" (apps)"),
      std::string::npos);
  EXPECT_EQ(RolloutEvaluator::DescribeApiError("NotFound", 404, "get", what, "", "", "").message,
            "deployments.apps \"web\" not found in namespace \"loop\".");
}

TEST(RolloutFailures, DeployFailureJsonCarriesTheKnownDetails) {
  json cs = ContainerStatus({{"running", {{"startedAt", "2024-05-01T10:00:04Z"}}}},
                            Terminated(137, "OOMKilled"), 1, false);
  RolloutDecision d = RolloutEvaluator::Evaluate(
      Rolling(), RsList(), Pods({RealPod("web-new-1", cs, Conds(false), "Running", "1Gi")}), "app");
  RolloutFailure f = RolloutEvaluator::DescribeCrash(d.signs, "deployment \"web\"", "a\nb\n");
  DeployResult r;
  r.state = DeployState::kFailed;
  r.reason = f.reason;
  r.message = f.message;
  r.error_kind = f.error_kind;
  r.next_step = f.next_step;
  r.details = f.details;
  json j = DeployFailureJson(r);
  EXPECT_EQ(j["error"], f.message);
  EXPECT_EQ(j["error_kind"], "deploy_crash");
  EXPECT_EQ(j["next_step"], f.next_step);
  EXPECT_EQ(j["details"]["exit_code"], 137);
  EXPECT_EQ(j["details"]["reason"], "OOMKilled");
  EXPECT_EQ(j["details"]["restarts"], 1);
  EXPECT_EQ(j["details"]["memory_limit"], "1Gi");
  EXPECT_EQ(j["details"]["log_tail"], json::array({"a", "b"}));
  EXPECT_FALSE(j["details"].contains("signal"));
  EXPECT_FALSE(j["details"].contains("probe_message"));
  r.state = DeployState::kRolledOut;
  EXPECT_TRUE(DeployFailureJson(r).empty());
}

}  // namespace
}  // namespace kiln
