// KeyStore: the build-key cache files (one per key) survive a restart, refuse bad keys and
// skip anything that is not a valid entry.
#include "state/key_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

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

TEST(KeyStoreTest, EntriesSurviveANewInstanceInSaveOrder) {
  TempDir t;
  const std::string dir = t.path() + "/keys";
  {
    KeyStore keys(dir);
    ASSERT_TRUE(keys.Save(Key(1), Succeeded("b-1", 'a')).ok());
    ASSERT_TRUE(keys.Save(Key(2), Succeeded("b-2", 'b')).ok());
    ASSERT_TRUE(keys.Save(Key(1), Succeeded("b-3", 'd')).ok());  // replaced, now the newest
  }
  // Distinct mtimes for the order (file systems with coarse timestamps).
  fs::last_write_time(dir + "/" + Key(2) + ".json",
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  auto all = KeyStore(dir).LoadAll();
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

TEST(KeyStoreTest, BadKeysAreRefusedAndWriteNothing) {
  TempDir t;
  KeyStore keys(t.path() + "/keys");
  for (const std::string& bad : {std::string("../x"), std::string(64, 'A'), std::string(63, 'a'),
                                 std::string(""), "../" + std::string(61, 'a')})
    EXPECT_EQ(keys.Save(bad, Succeeded("b-1", 'a')).code(), Status::Code::kInvalidArgument) << bad;
  EXPECT_TRUE(keys.LoadAll().empty());
  EXPECT_FALSE(fs::exists(t.path() + "/x"));
}

TEST(KeyStoreTest, InvalidFilesAreSkipped) {
  TempDir t;
  const std::string dir = t.path() + "/keys";
  KeyStore keys(dir);
  ASSERT_TRUE(keys.Save(Key(1), Succeeded("b-1", 'a')).ok());
  std::ofstream(dir + "/" + Key(2) + ".json") << "{torn";  // not JSON
  std::ofstream(dir + "/" + Key(3) + ".json")
      << "{\"key\":\"" << Key(4) << "\",\"digest\":\"sha256:" << std::string(64, 'a')
      << "\"}";  // wrong key
  std::ofstream(dir + "/" + Key(5) + ".json")
      << "{\"key\":\"" << Key(5) << "\",\"digest\":\"md5:x\"}";
  std::ofstream(dir + "/notes.txt") << "hello";
  std::ofstream(dir + "/" + Key(6) + ".json.tmp-1-1") << "{}";  // a writer that died
  auto all = keys.LoadAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, Key(1));
  EXPECT_TRUE(KeyStore(t.path() + "/missing").LoadAll().empty());
}

}  // namespace
}  // namespace kiln
