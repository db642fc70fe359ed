// StateStore's build-key cache: the files (one per key) survive a restart, refuse bad keys,
// skip anything that is not a valid entry, and are shared without the journal's lock.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "state/state_store.h"
#include "state/test_util.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using testing_state::TempDir;

std::string Key(int n) {
  std::string k(64, '0');
  k[63] = static_cast<char>('0' + n);
  return k;
}

// A store with only the build-key cache (never loaded, as in `kiln build`).
StateStore Keys(const std::string& dir) {
  StateStoreOptions o;
  o.keys_dir = dir;
  return StateStore(o);
}

BuildOutcome Succeeded(const std::string& id, char digest) {
  BuildOutcome o;
  o.status = BuildStatus::kSucceeded;
  o.digest = "sha256:" + std::string(64, digest);
  o.image_ref = "127.0.0.1:5000/d/app@" + o.digest;
  o.built_by = id;
  o.commit = std::string(40, 'c');
  o.build_ms = 1200;
  o.push_ms = 30;
  return o;
}

TEST(BuildKeysTest, EntriesSurviveANewInstanceInSaveOrder) {
  TempDir t;
  const std::string dir = t.path() + "/keys";
  {
    StateStore keys = Keys(dir);
    ASSERT_TRUE(keys.SaveBuildKey(Key(1), Succeeded("b-1", 'a')).ok());
    ASSERT_TRUE(keys.SaveBuildKey(Key(2), Succeeded("b-2", 'b')).ok());
    ASSERT_TRUE(keys.SaveBuildKey(Key(1), Succeeded("b-3", 'd')).ok());  // replaced: the newest
  }
  // Distinct mtimes for the order (file systems with coarse timestamps).
  fs::last_write_time(dir + "/" + Key(2) + ".json",
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  auto all = Keys(dir).BuildKeys();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, Key(2));
  EXPECT_EQ(all[1].first, Key(1));
  const BuildOutcome& o = *all[1].second;
  EXPECT_EQ(o.status, BuildStatus::kSucceeded);
  EXPECT_EQ(o.built_by, "b-3");
  EXPECT_EQ(o.digest, "sha256:" + std::string(64, 'd'));
  EXPECT_EQ(o.image_ref, "127.0.0.1:5000/d/app@" + o.digest);
  EXPECT_EQ(o.commit, std::string(40, 'c'));
  EXPECT_EQ(o.build_ms, 1200);
  EXPECT_EQ(o.push_ms, 30);
  // Owner-only files, no temporary left behind.
  struct stat st;
  ASSERT_EQ(::stat((dir + "/" + Key(1) + ".json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2u);
}

// An entry written before the cache became part of StateStore (the same file format) loads.
TEST(BuildKeysTest, AnEntryOfAnOlderVersionLoads) {
  TempDir t;
  const std::string dir = t.path() + "/keys";
  fs::create_directories(dir);
  const std::string digest = "sha256:" + std::string(64, 'e');
  std::ofstream(dir + "/" + Key(7) + ".json")
      << "{\"built_by\":\"b-00000000000000a1\",\"build_ms\":5,\"commit\":\"c1\",\"digest\":\""
      << digest << "\",\"image_ref\":\"r/app@" << digest << "\",\"key\":\"" << Key(7)
      << "\",\"push_ms\":6}\n";
  auto all = Keys(dir).BuildKeys();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, Key(7));
  EXPECT_EQ(all[0].second->digest, digest);
  EXPECT_EQ(all[0].second->built_by, "b-00000000000000a1");
  EXPECT_EQ(all[0].second->push_ms, 6);
}

// `kiln build` saves keys beside a `kiln serve` that holds the journal: the cache needs no lock.
TEST(BuildKeysTest, TheCacheIsSharedWithAStoreThatHoldsTheJournal) {
  TempDir t;
  StateStoreOptions o;
  o.keys_dir = t.path() + "/keys";
  o.sync = false;
  StateStore serve(o);
  LoadSummary sum;
  ASSERT_TRUE(serve.Load(t.path() + "/state", &sum).ok());
  EXPECT_TRUE(serve.journaled());
  StateStore build = Keys(t.path() + "/keys");
  EXPECT_FALSE(build.journaled());
  EXPECT_EQ(build.Load(t.path() + "/state", &sum).code(), Status::Code::kFailedPrecondition);
  EXPECT_FALSE(build.journaled());
  ASSERT_TRUE(build.SaveBuildKey(Key(1), Succeeded("b-1", 'a')).ok());
  auto seen = serve.BuildKeys();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].second->built_by, "b-1");
  // Journal writes stay the loaded store's.
  BuildRecord b;
  b.domain = "d";
  b.candidate = "main";
  EXPECT_EQ(build.RecordBuildStarted(&b).code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(serve.RecordBuildStarted(&b).ok());
}

TEST(BuildKeysTest, BadKeysAreRefusedAndWriteNothing) {
  TempDir t;
  StateStore keys = Keys(t.path() + "/keys");
  for (const std::string& bad : {std::string("../x"), std::string(64, 'A'), std::string(63, 'a'),
                                 std::string(""), "../" + std::string(61, 'a')})
    EXPECT_EQ(keys.SaveBuildKey(bad, Succeeded("b-1", 'a')).code(), Status::Code::kInvalidArgument)
        << bad;
  EXPECT_TRUE(keys.BuildKeys().empty());
  EXPECT_FALSE(fs::exists(t.path() + "/x"));
}

TEST(BuildKeysTest, WithoutAKeysDirNothingIsCached) {
  StateStore none{StateStoreOptions{}};
  EXPECT_EQ(none.SaveBuildKey(Key(1), Succeeded("b-1", 'a')).code(),
            Status::Code::kFailedPrecondition);
  EXPECT_TRUE(none.BuildKeys().empty());
}

TEST(BuildKeysTest, AFileIsParsedAsItIsWithoutThrowingOnOddFields) {
  EXPECT_FALSE(StateStore::ParseBuildKeyFile("{torn"));
  EXPECT_FALSE(StateStore::ParseBuildKeyFile("[1,2]"));
  auto f = StateStore::ParseBuildKeyFile(
      "{\"key\":\"k\",\"image_ref\":7,\"digest\":\"md5:x\",\"build_ms\":\"slow\","
      "\"push_ms\":12}");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->key, "k");
  EXPECT_EQ(f->outcome.image_ref, "");    // not a string
  EXPECT_EQ(f->outcome.digest, "md5:x");  // as it is: the inventory lists invalid entries too
  EXPECT_EQ(f->outcome.build_ms, 0);
  EXPECT_EQ(f->outcome.push_ms, 12);
  EXPECT_EQ(f->outcome.status, BuildStatus::kSucceeded);
}

// A file with a field of an odd type is skipped, never a failed start.
TEST(BuildKeysTest, AnOddlyTypedEntryIsSkippedAndTheOthersLoad) {
  TempDir t;
  const std::string dir = t.path() + "/keys";
  StateStore keys = Keys(dir);
  ASSERT_TRUE(keys.SaveBuildKey(Key(1), Succeeded("b-1", 'a')).ok());
  std::ofstream(dir + "/" + Key(2) + ".json") << "{\"key\":\"" << Key(2) << "\",\"digest\":5}";
  auto all = keys.BuildKeys();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, Key(1));
}

TEST(BuildKeysTest, InvalidFilesAreSkipped) {
  TempDir t;
  const std::string dir = t.path() + "/keys";
  StateStore keys = Keys(dir);
  ASSERT_TRUE(keys.SaveBuildKey(Key(1), Succeeded("b-1", 'a')).ok());
  std::ofstream(dir + "/" + Key(2) + ".json") << "{torn";  // not JSON
  std::ofstream(dir + "/" + Key(3) + ".json")
      << "{\"key\":\"" << Key(4) << "\",\"digest\":\"sha256:" << std::string(64, 'a')
      << "\"}";  // wrong key
  std::ofstream(dir + "/" + Key(5) + ".json")
      << "{\"key\":\"" << Key(5) << "\",\"digest\":\"md5:x\"}";
  std::ofstream(dir + "/notes.txt") << "hello";
  std::ofstream(dir + "/" + Key(6) + ".json.tmp-1-1") << "{}";  // a writer that died
  auto all = keys.BuildKeys();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, Key(1));
  EXPECT_TRUE(Keys(t.path() + "/missing").BuildKeys().empty());
}

}  // namespace
}  // namespace kiln
