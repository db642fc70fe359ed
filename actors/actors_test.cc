// Actor-level tests of the core: the real scheduler, domain and candidate actors, with a
// FakeBuilder in place of buildah (tests/ has the same scenarios against real buildah).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "actors/runtime.h"
#include "builder/fake_builder.h"
#include "common/json_text.h"
#include "deploy/fake_deployer.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

class ActorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (getenv("KILN_TEST_DEBUG")) spdlog::set_level(spdlog::level::debug);
    dir_ = fs::temp_directory_path() /
           ("kiln-actors-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    builder_ = std::make_shared<FakeBuilder>();
  }
  void TearDown() override {
    if (rt_) rt_->Shutdown(std::chrono::milliseconds(0));
    rt_.reset();
    fs::remove_all(dir_);
  }
  void Start(int max_parallel, std::vector<std::string> domains = {"a", "b"}) {
    auto cfg = std::make_shared<Config>();
    cfg->server.state_dir = (dir_ / "state").string();
    cfg->scheduler.max_parallel_builds = max_parallel;
    cfg->registries["local"] = RegistryConfig{"local", "http://127.0.0.1:5000", {}, {}};
    for (const auto& d : domains) {
      DomainConfig dc;
      dc.name = d;
      dc.image = {"local", "loop/" + d};
      cfg->domains[d] = dc;
    }
    RuntimeOptions opts;
    opts.builder = builder_;
    opts.open_repositories = false;
    for (const auto& [d, dep] : deployers_) opts.deployers[d] = dep;
    ASSERT_TRUE(Runtime::Create(cfg, opts, &rt_).ok());
  }
  std::string Source(const std::string& name, const std::string& content, bool broken = false) {
    fs::path p = dir_ / "src" / name;
    fs::create_directories(p);
    std::ofstream(p / "main.go") << content;
    if (broken) std::ofstream(p / "BROKEN") << "x";
    return p.string();
  }
  ToolResult Build(const std::string& domain, const std::string& cand, const std::string& src) {
    BuildRequest req;
    req.candidate = cand;
    req.source_dir = src;
    return rt_->BuildAndWait(domain, req);
  }
  // Async tool call through the ToolBackend interface.
  std::future<ToolResult> Call(const std::string& domain, const std::string& tool, json args,
                               uint64_t* handle = nullptr) {
    auto p = std::make_shared<std::promise<ToolResult>>();
    auto f = p->get_future();
    uint64_t h = rt_->Call({domain, tool, std::move(args)}, nullptr,
                           [p](ToolResult r) { p->set_value(std::move(r)); });
    if (handle) *handle = h;
    return f;
  }

  fs::path dir_;
  std::map<std::string, std::shared_ptr<FakeDeployer>> deployers_;  // set before Start
  std::shared_ptr<FakeBuilder> builder_;
  std::unique_ptr<Runtime> rt_;
};

TEST_F(ActorsTest, FourCandidatesInTwoDomainsBuildConcurrently) {
  Start(2);
  std::vector<std::future<ToolResult>> fs;
  for (auto d : {"a", "b"})
    for (auto c : {"c1", "c2"}) {
      std::string src = Source(std::string(d) + c, std::string("package main // ") + d + c);
      fs.push_back(std::async(std::launch::async, [=] { return Build(d, c, src); }));
    }
  std::set<std::string> digests;
  for (auto& f : fs) {
    ToolResult r = f.get();
    EXPECT_FALSE(r.is_error) << r.structured.dump();
    EXPECT_EQ(r.structured["status"], "succeeded");
    digests.insert(r.structured["image"]["digest"].get<std::string>());
  }
  EXPECT_EQ(digests.size(), 4u);
  EXPECT_EQ(builder_->builds.load(), 4);
  EXPECT_LE(builder_->max_concurrent.load(), 2);
  // One lane per repository of the registry: a repository's manifests never go in at once.
  std::lock_guard<std::mutex> l(builder_->mu);
  EXPECT_EQ(builder_->max_repo_pushes["loop/a"], 1);
  EXPECT_EQ(builder_->max_repo_pushes["loop/b"], 1);
}

// Issue 18 (8 concurrent iterations of 2 domains): the push lane is per repository, not per
// registry. Each domain's manifest push waits until the other domain's (another repository of
// the same registry) has started too: with one lane for the registry, the second would wait
// behind the first, and the first's wait would end at its (failure-only) deadline.
TEST_F(ActorsTest, TwoRepositoriesOfOneRegistryPushAtOnce) {
  std::mutex m;
  std::condition_variable cv;
  std::set<std::string> pushing;
  std::map<std::string, bool> met;
  builder_->push_hook = [&](const BuildJob& job) {
    std::unique_lock<std::mutex> l(m);
    pushing.insert(job.domain);
    cv.notify_all();
    bool both = cv.wait_for(l, std::chrono::seconds(30), [&] { return pushing.size() == 2; });
    met[job.domain] = both;
  };
  Start(2);
  const std::string sa = Source("pa", "package main // a");
  const std::string sb = Source("pb", "package main // b");
  auto fa = std::async(std::launch::async, [&] { return Build("a", "c1", sa); });
  ToolResult rb = Build("b", "c1", sb);
  ToolResult ra = fa.get();
  EXPECT_EQ(ra.structured["status"], "succeeded") << ra.structured.dump();
  EXPECT_EQ(rb.structured["status"], "succeeded") << rb.structured.dump();
  std::lock_guard<std::mutex> l(m);
  EXPECT_TRUE(met["a"] && met["b"]) << "one domain's push waited for the other's lane";
  EXPECT_EQ(builder_->max_concurrent_pushes.load(), 2);
}

// Issue 18: a lone build finds the push lane free when it is built: no separate blob stage,
// its push (under the lane) uploads the blobs and puts the manifest in one phase.
TEST_F(ActorsTest, ABuildThatFindsTheLaneFreePushesWithoutABlobStage) {
  Start(1, {"a"});
  ToolResult r = Build("a", "c1", Source("lone", "package main"));
  EXPECT_EQ(r.structured["status"], "succeeded") << r.structured.dump();
  std::lock_guard<std::mutex> l(builder_->mu);
  EXPECT_EQ(builder_->events, (std::vector<std::string>{"manifest c1"}));
}

// Issue 20: a build that finds the lane held uploads its blobs before it asks for the push
// lane, and its place in the lane's line is taken when it is built: a later build whose (small)
// blobs are done first still puts its manifest (moves its tag) after the earlier build's.
TEST_F(ActorsTest, BlobsUploadBeforeTheLaneAndTagsStillMoveInBuildOrder) {
  std::mutex m;
  std::condition_variable cv;
  bool holder_pushing = false, first_in_blobs = false, second_blobs_done = false;
  bool first_waited = false, holder_waited = false;
  // "holder" holds the lane (its push runs) until the first build is uploading its blobs.
  builder_->push_hook = [&](const BuildJob& job) {
    if (job.candidate != "holder") return;
    std::unique_lock<std::mutex> l(m);
    holder_pushing = true;
    cv.notify_all();
    holder_waited = cv.wait_for(l, std::chrono::seconds(30), [&] { return first_in_blobs; });
  };
  builder_->blob_hook = [&](const std::string& c) {
    std::unique_lock<std::mutex> l(m);
    if (c == "second") {
      second_blobs_done = true;
      cv.notify_all();
    } else if (c == "first") {
      first_in_blobs = true;
      cv.notify_all();
      // The first build's upload ends only after the second's (a big layer against a small one).
      first_waited = cv.wait_for(l, std::chrono::seconds(30), [&] { return second_blobs_done; });
    }
  };
  Start(3, {"a"});
  const std::string s0 = Source("holder", "package main // 0");
  const std::string s1 = Source("first", "package main // 1");
  const std::string s2 = Source("second", "package main // 2");
  auto f0 = std::async(std::launch::async, [&] { return Build("a", "holder", s0); });
  {
    std::unique_lock<std::mutex> l(m);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return holder_pushing; }));
  }
  auto f1 = std::async(std::launch::async, [&] { return Build("a", "first", s1); });
  {
    std::unique_lock<std::mutex> l(m);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return first_in_blobs; }));
  }
  // Built after the first one (which is uploading its blobs now).
  ToolResult r2 = Build("a", "second", s2);
  ToolResult r1 = f1.get();
  ToolResult r0 = f0.get();
  EXPECT_EQ(r0.structured["status"], "succeeded") << r0.structured.dump();
  EXPECT_EQ(r1.structured["status"], "succeeded") << r1.structured.dump();
  EXPECT_EQ(r2.structured["status"], "succeeded") << r2.structured.dump();
  EXPECT_TRUE(holder_waited) << "the first build uploaded its blobs while the lane was held";
  EXPECT_TRUE(first_waited) << "the second build's blobs uploaded while the first's did";
  std::lock_guard<std::mutex> l(builder_->mu);
  std::vector<std::string> manifests;
  for (const auto& e : builder_->events)
    if (e.rfind("manifest ", 0) == 0) manifests.push_back(e);
  EXPECT_EQ(manifests,
            (std::vector<std::string>{"manifest holder", "manifest first", "manifest second"}))
      << "tags move in build order";
  // The holder found the lane free (no blob stage); the others found it held or someone ahead.
  EXPECT_EQ(std::count(builder_->events.begin(), builder_->events.end(), "blobs holder"), 0);
  EXPECT_EQ(std::count(builder_->events.begin(), builder_->events.end(), "blobs first"), 1);
  EXPECT_EQ(std::count(builder_->events.begin(), builder_->events.end(), "blobs second"), 1);
}

TEST_F(ActorsTest, IdenticalRebuildIsACacheHit) {
  Start(1);
  std::string src = Source("x", "package main");
  ToolResult first = Build("a", "c1", src);
  ASSERT_FALSE(first.is_error) << first.structured.dump();
  EXPECT_FALSE(first.structured["cache_hit"].get<bool>());
  ToolResult second = Build("a", "c1", src);
  ASSERT_FALSE(second.is_error);
  EXPECT_TRUE(second.structured["cache_hit"].get<bool>());
  EXPECT_EQ(second.structured["image"], first.structured["image"]);
  EXPECT_EQ(builder_->builds.load(), 1);
  // A different domain with the same source is not a hit (keys include the domain).
  ToolResult other = Build("b", "c1", src);
  EXPECT_FALSE(other.structured["cache_hit"].get<bool>());
}

TEST_F(ActorsTest, CompileErrorReturnsDiagnostics) {
  Start(1);
  ToolResult r = Build("a", "c1", Source("bad", "package main", true));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["status"], "failed");
  ASSERT_EQ(r.structured["diagnostics"].size(), 1u);
  EXPECT_EQ(r.structured["diagnostics"][0]["file"], "main.go");
  EXPECT_NE(r.structured["log_tail"].get<std::string>().find("undefined: foo"), std::string::npos);
  EXPECT_EQ(builder_->pushes.load(), 0);
}

TEST_F(ActorsTest, ConcurrentIdenticalBuildsAreDeduplicated) {
  Start(2);
  builder_->build_delay = std::chrono::milliseconds(300);
  std::string s1 = Source("s1", "same"), s2 = Source("s2", "same");
  auto f1 = std::async(std::launch::async, [&] { return Build("a", "c1", s1); });
  auto f2 = std::async(std::launch::async, [&] { return Build("a", "c2", s2); });
  ToolResult r1 = f1.get(), r2 = f2.get();
  EXPECT_EQ(r1.structured["status"], "succeeded");
  EXPECT_EQ(r2.structured["status"], "succeeded");
  EXPECT_EQ(r1.structured["image"]["digest"], r2.structured["image"]["digest"]);
  EXPECT_EQ(builder_->builds.load(), 1);
  EXPECT_TRUE(r1.structured["deduplicated"].get<bool>() ||
              r2.structured["deduplicated"].get<bool>());
}

TEST_F(ActorsTest, NewerRequestSupersedesRunningBuild) {
  Start(1);
  builder_->build_delay = std::chrono::milliseconds(3000);
  std::string s1 = Source("v1", "v1"), s2 = Source("v2", "v2");
  auto f1 = std::async(std::launch::async, [&] { return Build("a", "c1", s1); });
  while (builder_->concurrent.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  builder_->build_delay = std::chrono::milliseconds(10);
  auto t0 = std::chrono::steady_clock::now();
  ToolResult r2 = Build("a", "c1", s2);
  ToolResult r1 = f1.get();
  EXPECT_EQ(r1.structured["status"], "cancelled");
  EXPECT_TRUE(r1.is_error);
  EXPECT_EQ(r2.structured["status"], "succeeded") << r2.structured.dump();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
}

TEST_F(ActorsTest, CancelBuildToolCancelsAndLogIsReadable) {
  Start(1);
  builder_->build_delay = std::chrono::milliseconds(5000);
  // Tool path: git mode is off in this runtime, so drive the build through the CLI path and
  // cancel it through the tools.
  std::string src = Source("x", "x");
  auto f = std::async(std::launch::async, [&] { return Build("a", "c1", src); });
  while (builder_->concurrent.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ToolResult st = Call("a", "candidate_status", {{"candidate", "c1"}}).get();
  ASSERT_FALSE(st.is_error);
  EXPECT_EQ(st.structured["state"], "building");
  std::string id = st.structured["latest_build"]["build_id"];
  ToolResult log = Call("a", "build_log", {{"build_id", id}}).get();
  ASSERT_FALSE(log.is_error) << log.structured.dump();
  EXPECT_FALSE(log.structured["complete"].get<bool>());
  // Another domain cannot see or cancel it.
  EXPECT_TRUE(Call("b", "cancel_build", {{"build_id", id}}).get().is_error);
  EXPECT_TRUE(Call("b", "build_log", {{"build_id", id}}).get().is_error);
  ToolResult c = Call("a", "cancel_build", {{"build_id", id}}).get();
  EXPECT_FALSE(c.is_error);
  EXPECT_EQ(c.structured["status"], "cancelled");
  ToolResult r = f.get();
  EXPECT_EQ(r.structured["status"], "cancelled");
  ToolResult list = Call("a", "list_candidates", json::object()).get();
  ASSERT_EQ(list.structured["candidates"].size(), 1u);
  EXPECT_EQ(list.structured["candidates"][0]["candidate"], "c1");
  // The slot was freed: the next build runs.
  builder_->build_delay = std::chrono::milliseconds(10);
  EXPECT_EQ(Build("a", "c2", Source("y", "y")).structured["status"], "succeeded");
}

TEST_F(ActorsTest, SingleBuildOfOtherDomainIsNotStarved) {
  Start(1);
  builder_->build_delay = std::chrono::milliseconds(150);
  std::vector<std::future<ToolResult>> flood;
  for (int i = 0; i < 6; ++i) {
    std::string c = "c" + std::to_string(i);
    std::string src = Source("a" + c, c);
    flood.push_back(std::async(std::launch::async, [=] { return Build("a", c, src); }));
  }
  while (builder_->builds.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a's queue is formed
  std::string bsrc = Source("b1", "b1");
  ToolResult rb = Build("b", "solo", bsrc);
  EXPECT_EQ(rb.structured["status"], "succeeded");
  for (auto& f : flood) f.get();
  std::vector<std::string> order;
  {
    std::lock_guard<std::mutex> l(builder_->mu);
    order = builder_->built_candidates;
  }
  auto pos = std::find(order.begin(), order.end(), "solo") - order.begin();
  EXPECT_LE(pos, 2) << "b's single build waited behind a's flood";
}

TEST_F(ActorsTest, RegistryFailureIsAClearError) {
  Start(1);
  builder_->push_fails = true;
  ToolResult r = Build("a", "c1", Source("x", "x"));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.structured["status"], "failed");
  EXPECT_NE(r.structured["error"].get<std::string>().find("unreachable"), std::string::npos);
  // Failures are not cached: once the registry is back, the same tree builds.
  builder_->push_fails = false;
  ToolResult ok = Build("a", "c1", Source("x", "x"));
  EXPECT_EQ(ok.structured["status"], "succeeded");
  EXPECT_FALSE(ok.structured["cache_hit"].get<bool>());
}

TEST_F(ActorsTest, BadArgumentsAreToolErrors) {
  Start(1);
  EXPECT_TRUE(Call("a", "build_candidate", {{"candidate", "../../etc"}}).get().is_error);
  EXPECT_TRUE(Call("a", "build_log", {{"build_id", "b-0000000000000000"}}).get().is_error);
  ToolResult st = Call("a", "candidate_status", {{"candidate", "never"}}).get();
  EXPECT_TRUE(st.is_error);
  EXPECT_EQ(st.structured["state"], "unknown");
  EXPECT_EQ(st.structured["error_kind"], "not_pushed");
  EXPECT_NE(st.structured["next_step"].get<std::string>().find("refs/heads/never"),
            std::string::npos);
  EXPECT_TRUE(Call("zzz", "list_candidates", json::object()).get().is_error);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// ---- deploys (domain actor + DeployOrder + a FakeDeployer) ----

TEST_F(ActorsTest, DeployLatestSuccessfulBuildAndShowItInStatus) {
  auto dep = std::make_shared<FakeDeployer>();
  deployers_["a"] = dep;
  Start(1);
  ToolResult none = Call("a", "deploy_candidate", {{"candidate", "c1"}}).get();
  EXPECT_TRUE(none.is_error);
  EXPECT_NE(none.structured["error"].get<std::string>().find("no successful build"),
            std::string::npos);
  ToolResult b = Build("a", "c1", Source("d1", "package main // 1"));
  ASSERT_FALSE(b.is_error) << b.structured.dump();
  ToolResult d = Call("a", "deploy_candidate", {{"candidate", "c1"}}).get();
  ASSERT_FALSE(d.is_error) << d.structured.dump();
  EXPECT_EQ(d.structured["status"], "rolled_out");
  EXPECT_EQ(d.structured["build_id"], b.structured["build_id"]);
  EXPECT_EQ(d.structured["image"]["digest"], b.structured["image"]["digest"]);
  EXPECT_TRUE(d.structured["changed"].get<bool>());
  ASSERT_EQ(dep->requests().size(), 1u);
  EXPECT_EQ(dep->requests()[0].image, b.structured["image"]["ref"].get<std::string>());
  EXPECT_NE(dep->requests()[0].image.find("@sha256:"), std::string::npos);
  ToolResult st = Call("a", "candidate_status", {{"candidate", "c1"}}).get();
  EXPECT_EQ(st.structured["deployed_build"]["build_id"], b.structured["build_id"]);
  EXPECT_EQ(st.structured["deployed_build"]["deploy_id"], d.structured["deploy_id"]);
  // A failed build is not deployable by id.
  ToolResult bad = Build("a", "c1", Source("d2", "x", /*broken=*/true));
  ToolResult bd =
      Call("a", "deploy_candidate", {{"candidate", "c1"}, {"build_id", bad.structured["build_id"]}})
          .get();
  EXPECT_TRUE(bd.is_error);
  EXPECT_NE(bd.structured["error"].get<std::string>().find("only a succeeded build"),
            std::string::npos);
  // Domain b has no deploy target.
  ToolResult nb = Call("b", "deploy_candidate", {{"candidate", "c1"}}).get();
  EXPECT_TRUE(nb.is_error);
  EXPECT_NE(nb.structured["error"].get<std::string>().find("no deploy target"), std::string::npos);
}

TEST_F(ActorsTest, DeployFailureIsReported) {
  auto dep = std::make_shared<FakeDeployer>();
  dep->fail_reason = "ImagePullBackOff";
  deployers_["a"] = dep;
  Start(1);
  ASSERT_FALSE(Build("a", "c1", Source("f1", "package main")).is_error);
  ToolResult d = Call("a", "deploy_candidate", {{"candidate", "c1"}}).get();
  EXPECT_TRUE(d.is_error);
  EXPECT_EQ(d.structured["status"], "failed");
  EXPECT_EQ(d.structured["reason"], "ImagePullBackOff");
  ToolResult st = Call("a", "candidate_status", {{"candidate", "c1"}}).get();
  EXPECT_TRUE(st.structured["deployed_build"].is_null());
}

TEST_F(ActorsTest, NoWaitDeployAnswersInProgressAndJoins) {
  auto dep = std::make_shared<FakeDeployer>();
  dep->delay = std::chrono::milliseconds(300);
  deployers_["a"] = dep;
  Start(1);
  ASSERT_FALSE(Build("a", "c1", Source("w1", "package main")).is_error);
  ToolResult d = Call("a", "deploy_candidate", {{"candidate", "c1"}, {"wait", false}}).get();
  EXPECT_FALSE(d.is_error);
  EXPECT_EQ(d.structured["status"], "in_progress");
  ToolResult j = Call("a", "deploy_candidate", {{"candidate", "c1"}}).get();  // joins
  EXPECT_EQ(j.structured["status"], "rolled_out");
  EXPECT_EQ(j.structured["deploy_id"], d.structured["deploy_id"]);
  EXPECT_EQ(dep->requests().size(), 1u);
}

TEST_F(ActorsTest, OlderBuildNeverOverwritesNewerDeployInProgress) {
  auto dep = std::make_shared<FakeDeployer>();
  dep->delay = std::chrono::milliseconds(400);
  deployers_["a"] = dep;
  Start(1);
  ToolResult older = Build("a", "c1", Source("o1", "package main // old"));
  ToolResult newer = Build("a", "c2", Source("o2", "package main // new"));
  ASSERT_FALSE(older.is_error);
  ASSERT_FALSE(newer.is_error);
  auto fn = Call("a", "deploy_candidate", {{"candidate", "c2"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ToolResult fo = Call("a", "deploy_candidate", {{"candidate", "c1"}}).get();
  EXPECT_TRUE(fo.is_error);
  EXPECT_EQ(fo.structured["reason"], "Superseded");
  ToolResult rn = fn.get();
  EXPECT_EQ(rn.structured["status"], "rolled_out");
  ASSERT_EQ(dep->requests().size(), 1u);
  std::string current;
  dep->Current(&current);
  EXPECT_EQ(current, newer.structured["image"]["ref"].get<std::string>());
}

TEST_F(ActorsTest, NewerBuildSupersedesOlderDeployInProgress) {
  auto dep = std::make_shared<FakeDeployer>();
  dep->delay = std::chrono::milliseconds(1000);
  deployers_["a"] = dep;
  Start(1);
  ToolResult older = Build("a", "c1", Source("s1", "package main // old"));
  ToolResult newer = Build("a", "c2", Source("s2", "package main // new"));
  auto fo = Call("a", "deploy_candidate", {{"candidate", "c1"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto fn = Call("a", "deploy_candidate", {{"candidate", "c2"}});
  ToolResult ro = fo.get();
  EXPECT_EQ(ro.structured["status"], "failed");
  EXPECT_EQ(ro.structured["reason"], "Superseded");
  ToolResult rn = fn.get();
  EXPECT_EQ(rn.structured["status"], "rolled_out") << rn.structured.dump();
  std::string current;
  dep->Current(&current);
  EXPECT_EQ(current, newer.structured["image"]["ref"].get<std::string>());
}

TEST_F(ActorsTest, ApplyDeploysMostRecentlyBuiltCandidateAndIsIdempotent) {
  auto dep = std::make_shared<FakeDeployer>();
  deployers_["a"] = dep;
  Start(1);
  ToolResult n = Call("a", "apply", json::object()).get();
  EXPECT_FALSE(n.is_error);
  EXPECT_EQ(n.structured["status"], "nothing_built");
  ASSERT_FALSE(Build("a", "c1", Source("a1", "package main // 1")).is_error);
  ToolResult latest = Build("a", "c2", Source("a2", "package main // 2"));
  ASSERT_FALSE(latest.is_error);
  ToolResult r1 = Call("a", "apply", json::object()).get();
  ASSERT_FALSE(r1.is_error) << r1.structured.dump();
  EXPECT_EQ(r1.structured["status"], "rolled_out");
  EXPECT_EQ(r1.structured["candidate"], "c2");
  EXPECT_EQ(r1.structured["build_id"], latest.structured["build_id"]);
  EXPECT_TRUE(r1.structured["changed"].get<bool>());
  ToolResult r2 = Call("a", "apply", json::object()).get();
  EXPECT_EQ(r2.structured["status"], "rolled_out");
  EXPECT_FALSE(r2.structured["changed"].get<bool>());
  ToolResult r3 = Call("a", "apply", {{"candidate", "c1"}}).get();
  EXPECT_EQ(r3.structured["candidate"], "c1");
  ToolResult r4 = Call("a", "apply", {{"candidate", "zz"}}).get();
  EXPECT_EQ(r4.structured["status"], "nothing_built");
  ToolResult ds = Call("a", "domain_status", json::object()).get();
  EXPECT_EQ(ds.structured["deployed"]["candidate"], "c1");
  EXPECT_EQ(ds.structured["candidates"].size(), 2u);
}

// ---- durable state: a restart keeps the builds and the deployed build (state/ journal) ----

TEST_F(ActorsTest, RestartKeepsLatestBuildsAndDeployedBuild) {
  auto dep = std::make_shared<FakeDeployer>();
  deployers_["a"] = dep;
  Start(1);
  ToolResult good = Build("a", "c1", Source("r1", "package main // 1"));
  ASSERT_FALSE(good.is_error) << good.structured.dump();
  ToolResult bad = Build("a", "c2", Source("r2", "x", /*broken=*/true));
  ASSERT_TRUE(bad.is_error);
  ToolResult d = Call("a", "deploy_candidate", {{"candidate", "c1"}}).get();
  ASSERT_EQ(d.structured["status"], "rolled_out");
  ToolResult before = Call("a", "candidate_status", {{"candidate", "c1"}}).get();

  rt_->Shutdown(std::chrono::milliseconds(0));
  rt_.reset();
  Start(1);  // same state_dir

  ToolResult after = Call("a", "candidate_status", {{"candidate", "c1"}}).get();
  EXPECT_EQ(after.structured["latest_build"]["build_id"], good.structured["build_id"]);
  EXPECT_EQ(after.structured["latest_build"]["status"], "succeeded");
  EXPECT_EQ(after.structured["latest_build"]["image"], good.structured["image"]);
  EXPECT_EQ(after.structured["latest_successful_build"]["build_id"], good.structured["build_id"]);
  EXPECT_EQ(after.structured["deployed_build"]["build_id"], good.structured["build_id"]);
  EXPECT_EQ(after.structured["deployed_build"]["deploy_id"], d.structured["deploy_id"]);
  EXPECT_EQ(after.structured["deployed_build"]["image"],
            before.structured["deployed_build"]["image"]);
  ToolResult c2 = Call("a", "candidate_status", {{"candidate", "c2"}}).get();
  EXPECT_EQ(c2.structured["latest_build"]["status"], "failed");
  EXPECT_EQ(c2.structured["latest_build"]["diagnostics"], bad.structured["diagnostics"]);
  ToolResult list = Call("a", "list_candidates", json::object()).get();
  EXPECT_EQ(list.structured["candidates"].size(), 2u);
  // The restored build is deployable and apply finds it (no patch: already running).
  ToolResult ap = Call("a", "apply", json::object()).get();
  EXPECT_EQ(ap.structured["status"], "rolled_out") << ap.structured.dump();
  EXPECT_EQ(ap.structured["build_id"], good.structured["build_id"]);
  EXPECT_FALSE(ap.structured["changed"].get<bool>());
  // New builds still get fresh ids and become the latest.
  ToolResult next = Build("a", "c1", Source("r3", "package main // 3"));
  EXPECT_NE(next.structured["build_id"], good.structured["build_id"]);
  ToolResult st = Call("a", "candidate_status", {{"candidate", "c1"}}).get();
  EXPECT_EQ(st.structured["latest_build"]["build_id"], next.structured["build_id"]);
}

// --- every byte that reaches a result is safe (issue 15) ---
TEST_F(ActorsTest, InvalidUtf8InBuildOutputIsAnsweredAsValidJson) {
  const std::string hostile =
      "RUN printf '\\377\\376'\n\xFF\xFE bad bytes\n\xED\xA0\x80 \xC0\xAF caf\xC3\xA9\n";
  builder_->extra_output = hostile + "trunc \xE2\x82";
  builder_->error_suffix = ": \xFF\xFE";
  Start(1);
  ToolResult r = Build("a", "bad", Source("bad", "x", /*broken=*/true));
  EXPECT_TRUE(r.is_error);
  std::string text;
  ASSERT_NO_THROW(text = r.structured.dump()) << "the strict dump must not throw";
  EXPECT_TRUE(IsValidUtf8(text));
  EXPECT_NE(r.structured["log_tail"].get<std::string>().find("\xEF\xBF\xBD\xEF\xBF\xBD bad bytes"),
            std::string::npos);
  EXPECT_NE(r.structured["log_tail"].get<std::string>().find("caf\xC3\xA9"), std::string::npos);
  // Through the per-call bridge (the MCP path): status and the log in small chunks.
  ToolResult st = Call("a", "candidate_status", {{"candidate", "bad"}}).get();
  ASSERT_FALSE(st.is_error) << DumpJson(st.structured);
  ASSERT_NO_THROW(st.structured.dump());
  std::string id = st.structured["latest_build"]["build_id"];
  std::string whole = Call("a", "build_log", {{"build_id", id}}).get().structured["text"];
  EXPECT_TRUE(IsValidUtf8(whole));
  std::string joined;
  size_t offset = 0;
  for (int i = 0; i < 1000; ++i) {
    ToolResult c =
        Call("a", "build_log", {{"build_id", id}, {"offset", offset}, {"limit", 3}}).get();
    ASSERT_FALSE(c.is_error) << DumpJson(c.structured);
    ASSERT_NO_THROW(c.structured.dump());
    joined += c.structured["text"].get<std::string>();
    ASSERT_GT(c.structured["next_offset"].get<size_t>(), offset);
    offset = c.structured["next_offset"];
    if (c.structured["complete"].get<bool>()) break;
  }
  EXPECT_EQ(joined, whole);
  // kiln keeps answering, also the other domain.
  EXPECT_FALSE(Call("b", "list_candidates", json::object()).get().is_error);
}

TEST_F(ActorsTest, ACallWhoseAnswerFailsToRenderStillGetsExactlyOneErrorAnswer) {
  Start(1);
  auto p = std::make_shared<std::promise<ToolResult>>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  rt_->Call({"a", "list_candidates", json::object()}, nullptr, [p, calls](ToolResult r) {
    if (++*calls == 1) throw std::runtime_error("rendering failed");  // e.g. a transport bug
    p->set_value(std::move(r));
  });
  ToolResult r = p->get_future().get();
  EXPECT_TRUE(r.is_error);
  EXPECT_NE(r.structured["error"].get<std::string>().find("internal error"), std::string::npos)
      << DumpJson(r.structured);
  EXPECT_EQ(calls->load(), 2);
  // The runtime is still healthy.
  EXPECT_FALSE(Call("a", "list_candidates", json::object()).get().is_error);
  EXPECT_EQ(calls->load(), 2);
}
// --- end every byte safe ---

}  // namespace
}  // namespace kiln
