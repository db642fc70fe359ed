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

}  // namespace
}  // namespace kiln
