#include "state/state_store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>

#include "state/fault_file_system.h"
#include "state/journal.h"
#include "state/test_util.h"

namespace kiln {
namespace {

using testing_state::TempDir;

std::string Key(int i) {
  std::string k = std::to_string(i);
  return std::string(64 - k.size(), '0') + k;
}

class StateStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<StateStore> Open(LoadSummary* summary = nullptr, StateStoreOptions o = {}) {
    if (!o.fs) o.fs = &faults_;
    if (!o.now_ms) o.now_ms = [this] { return ++now_; };
    auto store = std::make_unique<StateStore>(o);
    LoadSummary ignored;
    Status s = store->Load(dir_.path(), summary ? summary : &ignored);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return store;
  }

  BuildRecord Start(StateStore& store, const std::string& candidate, int key = 0,
                    const std::string& domain = "d") {
    BuildRecord b;
    b.domain = domain;
    b.candidate = candidate;
    b.commit = "0123456789abcdef0123456789abcdef01234567";
    if (key) b.build_key = Key(key);
    b.status = BuildStatus::kRunning;
    Status s = store.RecordBuildStarted(&b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return b;
  }

  Status Finish(StateStore& store, const BuildId& id, BuildStatus status) {
    BuildFinish f;
    f.id = id;
    f.status = status;
    if (status == BuildStatus::kSucceeded) {
      f.digest = "sha256:" + std::string(64, 'a');
      f.image_ref = "127.0.0.1:5000/d/main@" + f.digest;
    } else {
      f.error = "build failed";
      f.diagnostics = {{"main.go", 3, 1, "error", "undefined: x"}};
    }
    f.timings.build_ms = 1200;
    f.timings.total_ms = 1500;
    f.timings.parts = {{"resolve_ms", 7}, {"push_ms", 300}};  // issue 18
    return store.RecordBuildFinished(f);
  }

  TempDir dir_;
  FaultFileSystem faults_{FileSystem::Default()};
  int64_t now_ = 1000;
};

TEST_F(StateStoreTest, RoundTripEverything) {
  BuildId ok_id, failed_id;
  {
    auto s = Open();
    BuildRecord a = Start(*s, "main", 1);
    EXPECT_EQ(a.id, StateStore::FormatBuildId(1));
    EXPECT_GT(a.started_at_ms, 0);
    ASSERT_TRUE(Finish(*s, a.id, BuildStatus::kSucceeded).ok());
    BuildRecord b = Start(*s, "exp");
    ASSERT_TRUE(Finish(*s, b.id, BuildStatus::kFailed).ok());
    ok_id = a.id;
    failed_id = b.id;
    DeployRecord dep;
    dep.domain = "d";
    dep.build_id = a.id;
    dep.image = "127.0.0.1:5000/d/main@sha256:" + std::string(64, 'a');
    dep.status = "rolled_out";
    ASSERT_TRUE(s->RecordDeploy(&dep).ok());
    EXPECT_EQ(dep.deploy_id, "d-0000000000000001");
  }
  LoadSummary sum;
  auto s = Open(&sum);
  EXPECT_EQ(sum.builds, 2u);
  EXPECT_EQ(sum.deploys, 1u);
  EXPECT_TRUE(sum.interrupted.empty());
  auto a = s->Build(ok_id);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, BuildStatus::kSucceeded);
  EXPECT_EQ(a->domain, "d");
  EXPECT_EQ(a->candidate, "main");
  EXPECT_EQ(a->build_key, Key(1));
  EXPECT_EQ(a->timings.build_ms, 1200);
  EXPECT_EQ(a->timings.parts,
            (std::map<std::string, int64_t>{{"push_ms", 300}, {"resolve_ms", 7}}));
  EXPECT_GT(a->finished_at_ms, a->started_at_ms);
  auto b = s->Build(failed_id);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, BuildStatus::kFailed);
  ASSERT_EQ(b->diagnostics.size(), 1u);
  EXPECT_EQ(b->diagnostics[0].message, "undefined: x");
  EXPECT_EQ(b->error, "build failed");
  EXPECT_EQ(s->LatestSuccessful("d", "main")->id, ok_id);
  EXPECT_FALSE(s->LatestSuccessful("d", "exp"));
  EXPECT_EQ(s->LatestSuccessfulInDomain("d")->id, ok_id);
  EXPECT_FALSE(s->LatestSuccessfulInDomain("other"));
  ASSERT_TRUE(s->Deployed("d"));
  EXPECT_EQ(s->Deployed("d")->build_id, ok_id);
}

TEST_F(StateStoreTest, ValidationErrors) {
  auto s = Open();
  BuildRecord empty;
  EXPECT_EQ(s->RecordBuildStarted(&empty).code(), Status::Code::kInvalidArgument);
  BuildRecord a = Start(*s, "main");
  BuildRecord dup = a;
  EXPECT_EQ(s->RecordBuildStarted(&dup).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Finish(*s, "b-ffffffffffffffff", BuildStatus::kFailed).code(), Status::Code::kNotFound);
  ASSERT_TRUE(Finish(*s, a.id, BuildStatus::kFailed).ok());
  EXPECT_EQ(Finish(*s, a.id, BuildStatus::kSucceeded).code(), Status::Code::kFailedPrecondition);
  StateStore unloaded{StateStoreOptions{}};
  EXPECT_EQ(unloaded.RecordBuildStarted(&a).code(), Status::Code::kFailedPrecondition);
}

TEST_F(StateStoreTest, LatestSuccessfulFollowsFinishOrder) {
  auto s = Open();
  BuildRecord a = Start(*s, "main");
  BuildRecord b = Start(*s, "main");
  BuildRecord c = Start(*s, "exp");
  ASSERT_TRUE(Finish(*s, b.id, BuildStatus::kSucceeded).ok());
  ASSERT_TRUE(Finish(*s, a.id, BuildStatus::kSucceeded).ok());
  EXPECT_EQ(s->LatestSuccessful("d", "main")->id, a.id);
  ASSERT_TRUE(Finish(*s, c.id, BuildStatus::kSucceeded).ok());
  EXPECT_EQ(s->LatestSuccessfulInDomain("d")->id, c.id);
  BuildRecord d = Start(*s, "main");
  ASSERT_TRUE(Finish(*s, d.id, BuildStatus::kFailed).ok());
  EXPECT_EQ(s->LatestSuccessful("d", "main")->id, a.id);
  auto list = s->Builds("d", "main");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].id, d.id);  // newest first
}

// Builds running when the process died come back interrupted; the mark is journaled, so the
// next load does not report them again.
TEST_F(StateStoreTest, UnfinishedBuildsBecomeInterrupted) {
  BuildId running, pushing;
  {
    auto s = Open();
    running = Start(*s, "main").id;
    pushing = Start(*s, "exp").id;
    BuildFinish phase;
    phase.id = pushing;
    phase.status = BuildStatus::kPushing;
    ASSERT_TRUE(s->RecordBuildFinished(phase).ok());
    EXPECT_EQ(s->ActiveBuilds().size(), 2u);
  }
  {
    LoadSummary sum;
    auto s = Open(&sum);
    EXPECT_EQ(sum.interrupted, (std::vector<BuildId>{running, pushing}));
    EXPECT_EQ(s->Build(running)->status, BuildStatus::kInterrupted);
    EXPECT_EQ(s->Build(pushing)->status, BuildStatus::kInterrupted);
    EXPECT_FALSE(s->LatestSuccessful("d", "exp"));
    EXPECT_TRUE(s->ActiveBuilds().empty());
  }
  LoadSummary sum;
  auto s = Open(&sum);
  EXPECT_TRUE(sum.interrupted.empty());
  EXPECT_EQ(s->Build(running)->status, BuildStatus::kInterrupted);
}

// Issue 20: an unfinished build the caller can carry on (dispatched to a worker) stays
// unfinished across the load; the others are interrupted as before; its later end is its one
// terminal record.
TEST_F(StateStoreTest, ResumableUnfinishedBuildIsLeftToTheCaller) {
  BuildId on_worker, local;
  {
    auto s = Open();
    on_worker = Start(*s, "main").id;
    local = Start(*s, "exp").id;
  }
  StateStoreOptions o;
  o.resumable = [&](const BuildRecord& b) { return b.id == on_worker; };
  LoadSummary sum;
  {
    auto s = Open(&sum, o);
    EXPECT_EQ(sum.interrupted, (std::vector<BuildId>{local}));
    EXPECT_EQ(sum.resumed, (std::vector<BuildId>{on_worker}));
    EXPECT_EQ(s->Build(on_worker)->status, BuildStatus::kRunning);
    EXPECT_EQ(s->Build(local)->status, BuildStatus::kInterrupted);
    ASSERT_TRUE(Finish(*s, on_worker, BuildStatus::kSucceeded).ok());
    EXPECT_EQ(s->LatestSuccessful("d", "main")->id, on_worker);
  }
  auto s = Open(&sum, o);
  EXPECT_TRUE(sum.resumed.empty());
  EXPECT_TRUE(sum.duplicate_terminal.empty());
  EXPECT_EQ(s->Build(on_worker)->status, BuildStatus::kSucceeded);
}

TEST_F(StateStoreTest, BuildIdsNeverRepeatAcrossRestarts) {
  std::set<BuildId> seen;
  for (int round = 0; round < 4; ++round) {
    auto s = Open();
    for (int i = 0; i < 5; ++i) {
      BuildRecord b = Start(*s, "main");
      EXPECT_TRUE(seen.insert(b.id).second) << b.id;
    }
    if (round == 2) {
      ASSERT_TRUE(s->Compact().ok());
    }
  }
}

// Journals of older versions: their build-key cache drops (type 6) and id reservations
// (type 5) still load; the reservation still keeps the sequence ahead of reserved ids.
TEST_F(StateStoreTest, OlderRecordTypesStillLoad) {
  {
    std::unique_ptr<Journal> j;
    JournalLoad jl;
    ASSERT_TRUE(Journal::Open(dir_.path(), JournalOptions{}, &j, &jl).ok());
    ASSERT_TRUE(j->Append(5, "{\"upto\":65}").ok());
    ASSERT_TRUE(j->Append(6, "{\"key\":\"" + Key(1) + "\"}").ok());
  }
  LoadSummary sum;
  auto s = Open(&sum);
  for (const auto& n : sum.notes) EXPECT_EQ(n.find("skipped"), std::string::npos) << n;
  EXPECT_TRUE(sum.corruptions.empty());
  EXPECT_EQ(s->build_count(), 0u);
  EXPECT_GE(s->next_build_seq(), 65u);
  BuildRecord b = Start(*s, "main");
  EXPECT_EQ(b.id, StateStore::FormatBuildId(s->next_build_seq() - 1));
}

TEST_F(StateStoreTest, CompactionKeepsStateAndPrunesOldBuilds) {
  StateStoreOptions o;
  o.compact_threshold_bytes = 8 << 10;
  o.max_builds_per_candidate = 10;
  BuildId first_ok, deployed;
  std::vector<BuildId> all;
  {
    auto s = Open(nullptr, o);
    BuildRecord d = Start(*s, "main", 1);
    ASSERT_TRUE(Finish(*s, d.id, BuildStatus::kSucceeded).ok());
    deployed = d.id;
    DeployRecord dep{"", "d", d.id, "img", "rolled_out", "", 0};
    ASSERT_TRUE(s->RecordDeploy(&dep).ok());
    for (int i = 0; i < 100; ++i) {
      BuildRecord b = Start(*s, "main", 100 + i);
      ASSERT_TRUE(Finish(*s, b.id, i == 98 ? BuildStatus::kSucceeded : BuildStatus::kFailed).ok());
      if (i == 98) first_ok = b.id;
      all.push_back(b.id);
    }
    EXPECT_GT(s->generation(), 0u);
    EXPECT_LT(s->journal_bytes(), o.compact_threshold_bytes);
  }
  LoadSummary sum;
  auto s = Open(&sum, o);
  EXPECT_GT(sum.generation, 0u);
  EXPECT_TRUE(s->Build(deployed)) << "deployed build pruned";
  EXPECT_EQ(s->Deployed("d")->build_id, deployed);
  EXPECT_EQ(s->LatestSuccessful("d", "main")->id, first_ok);
  EXPECT_TRUE(s->Build(all.back()));
  EXPECT_FALSE(s->Build(all.front())) << "old build not pruned";
  EXPECT_LE(s->build_count(), 30u);  // 10 kept + builds since the last compaction
  EXPECT_EQ(s->next_build_seq(), 102u);
}

// A full disk: the call fails with ResourceExhausted, nothing changes in memory, the next load
// sees the last good record, and writing works again once space is back.
TEST_F(StateStoreTest, DiskFullLeavesStateConsistent) {
  BuildId a_id, b_id;
  {
    auto s = Open();
    a_id = Start(*s, "main", 1).id;
    faults_.set_short_write_bytes(5);
    faults_.Fail(FaultFileSystem::Op::kAppend, ENOSPC);
    Status st = Finish(*s, a_id, BuildStatus::kSucceeded);
    EXPECT_EQ(st.code(), Status::Code::kResourceExhausted) << st.ToString();
    EXPECT_EQ(s->Build(a_id)->status, BuildStatus::kRunning);
    EXPECT_FALSE(s->LatestSuccessful("d", "main"));
    BuildRecord b;
    b.domain = "d";
    b.candidate = "x";
    EXPECT_EQ(s->RecordBuildStarted(&b).code(), Status::Code::kResourceExhausted);
    EXPECT_TRUE(b.id.empty());
    EXPECT_EQ(s->build_count(), 1u);
    faults_.Heal();
    ASSERT_TRUE(Finish(*s, a_id, BuildStatus::kSucceeded).ok());
    b_id = Start(*s, "x").id;
  }
  LoadSummary sum;
  auto s = Open(&sum);
  EXPECT_EQ(sum.truncated_bytes, 0u);
  EXPECT_TRUE(sum.corruptions.empty());
  EXPECT_EQ(s->Build(a_id)->status, BuildStatus::kSucceeded);
  EXPECT_EQ(sum.interrupted, std::vector<BuildId>{b_id});
}

// The disk is full at start-up: marking interrupted builds fails, and Load says so.
TEST_F(StateStoreTest, DiskFullAtLoad) {
  {
    auto s = Open();
    Start(*s, "main");
  }
  faults_.Fail(FaultFileSystem::Op::kSync, ENOSPC);
  StateStoreOptions o;
  o.fs = &faults_;
  auto store = std::make_unique<StateStore>(o);
  LoadSummary sum;
  EXPECT_EQ(store->Load(dir_.path(), &sum).code(), Status::Code::kResourceExhausted);
  store.reset();
  faults_.Heal();
  LoadSummary ok;
  auto s = Open(&ok);
  EXPECT_EQ(ok.interrupted.size(), 1u);
}

TEST_F(StateStoreTest, CompactionFailureIsNotAWriteFailure) {
  StateStoreOptions o;
  o.compact_threshold_bytes = 2 << 10;
  auto s = Open(nullptr, o);
  faults_.Fail(FaultFileSystem::Op::kRename, ENOSPC);
  for (int i = 0; i < 30; ++i) {
    BuildRecord b = Start(*s, "main");
    ASSERT_TRUE(Finish(*s, b.id, BuildStatus::kFailed).ok());
  }
  EXPECT_EQ(s->generation(), 0u);
  faults_.Heal();
  for (int i = 0; i < 30; ++i) Start(*s, "main");
  EXPECT_GT(s->generation(), 0u);
}

TEST_F(StateStoreTest, CorruptionInTheMiddleIsReportedAndCompactedAway) {
  std::vector<BuildId> ids;
  {
    auto s = Open();
    for (int i = 0; i < 5; ++i) ids.push_back(Start(*s, "main").id);
  }
  std::string path = dir_.path() + "/journal-0000000000000000.log";
  std::string data = testing_state::ReadAll(path);
  size_t at = data.find(ids[1]);
  ASSERT_NE(at, std::string::npos);
  data[at] ^= 0x20;
  testing_state::WriteAll(path, data);
  LoadSummary sum;
  auto s = Open(&sum);
  ASSERT_EQ(sum.corruptions.size(), 1u);
  EXPECT_FALSE(s->Build(ids[1]));
  EXPECT_TRUE(s->Build(ids[4]));
  EXPECT_EQ(s->generation(), 1u);  // compacted right away
  s.reset();
  LoadSummary again;
  Open(&again);
  EXPECT_TRUE(again.corruptions.empty());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST_F(StateStoreTest, InvalidUtf8IsStoredNotThrown) {
  BuildId id;
  {
    auto s = Open();
    BuildRecord b = Start(*s, "main");
    id = b.id;
    BuildFinish f;
    f.id = id;
    f.status = BuildStatus::kFailed;
    f.error = "bad \xff\xfe bytes";
    ASSERT_TRUE(s->RecordBuildFinished(f).ok());
    EXPECT_EQ(s->Build(id)->status, BuildStatus::kFailed);
    ASSERT_TRUE(s->Compact().ok());
  }
  auto s = Open();
  EXPECT_EQ(s->Build(id)->error.rfind("bad ", 0), 0u);
}

// A second terminal record of one build (only a damaged or hand-edited journal has one) does not
// change the build: the first end wins and the duplicate is reported (kiln state-check fails).
TEST_F(StateStoreTest, SecondTerminalRecordIsReportedNotApplied) {
  BuildId id;
  {
    auto s = Open();
    id = Start(*s, "main").id;
    ASSERT_TRUE(Finish(*s, id, BuildStatus::kSucceeded).ok());
    EXPECT_EQ(Finish(*s, id, BuildStatus::kFailed).code(), Status::Code::kFailedPrecondition);
  }
  {
    std::unique_ptr<Journal> j;
    JournalLoad jl;
    ASSERT_TRUE(Journal::Open(dir_.path(), JournalOptions{}, &j, &jl).ok());
    std::string finish;
    for (const auto& r : jl.records)
      if (r.payload.find("\"succeeded\"") != std::string::npos) finish = r.payload;
    ASSERT_FALSE(finish.empty());
    finish.replace(finish.find("\"succeeded\""), 11, "\"failed\"");
    ASSERT_TRUE(j->Append(2, finish).ok());
    finish.replace(finish.find(id), id.size(), "b-00000000000000ff");  // unknown build
    ASSERT_TRUE(j->Append(2, finish).ok());
  }
  LoadSummary sum;
  auto s = Open(&sum);
  EXPECT_EQ(sum.duplicate_terminal, std::vector<BuildId>{id});
  EXPECT_TRUE(sum.duplicate_started.empty());
  EXPECT_EQ(sum.notes.size(), 1u);  // the finish of an unknown build
  ASSERT_TRUE(s->Build(id));
  EXPECT_EQ(s->Build(id)->status, BuildStatus::kSucceeded);
  ASSERT_TRUE(s->LatestSuccessful("d", "main"));
  EXPECT_EQ(s->LatestSuccessful("d", "main")->id, id);
  EXPECT_EQ(s->Domains(), std::vector<std::string>{"d"});
  EXPECT_EQ(s->AllBuilds().size(), 1u);
}

}  // namespace
}  // namespace kiln
