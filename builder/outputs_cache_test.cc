#include "builder/outputs_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/sha256.h"

namespace kiln {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kiln-ocache-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

LayerBlob Blob(const std::string& content) {
  LayerBlob b;
  b.data = "gz:" + content;
  b.digest = "sha256:" + Sha256Hex(b.data);
  b.diff_id = "sha256:" + Sha256Hex(content);
  b.size = b.data.size();
  return b;
}

void SetMtime(const std::string& path, time_t t) {
  struct timeval tv[2] = {{t, 0}, {t, 0}};
  ASSERT_EQ(::utimes(path.c_str(), tv), 0) << path;
}

TEST(OutputsCacheTest, StoreThenLookupGivesTheSameBlob) {
  TempDir d;
  OutputsCache cache(d.path() + "/outputs", 1 << 20);
  LayerBlob a = Blob("aaa"), got;
  EXPECT_FALSE(cache.Lookup(a.diff_id, &got));
  ASSERT_TRUE(cache.Store(a).ok());
  ASSERT_TRUE(cache.Lookup(a.diff_id, &got));
  EXPECT_EQ(got.data, a.data);
  EXPECT_EQ(got.digest, a.digest);
  EXPECT_EQ(got.diff_id, a.diff_id);
  EXPECT_EQ(got.size, a.size);
  struct stat st;
  ASSERT_EQ(::stat((d.path() + "/outputs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A second instance on the same directory (another process) sees it too.
  OutputsCache other(d.path() + "/outputs", 1 << 20);
  EXPECT_TRUE(other.Lookup(a.diff_id, &got));
  EXPECT_FALSE(cache.Lookup("sha256:nothex", &got));
}

TEST(OutputsCacheTest, CorruptEntriesAreDroppedNotServed) {
  TempDir d;
  OutputsCache cache(d.path(), 1 << 20);
  LayerBlob a = Blob("aaa"), got;
  ASSERT_TRUE(cache.Store(a).ok());
  const std::string path = d.path() + "/" + a.diff_id.substr(7) + ".layer";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('X');
  }
  EXPECT_FALSE(cache.Lookup(a.diff_id, &got));
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "a corrupt entry is removed";
}

TEST(OutputsCacheTest, EvictsLeastRecentlyUsedDownToTheBound) {
  TempDir d;
  const std::string big(400, 'x');
  // Each entry is ~490 bytes on disk; the bound holds two.
  OutputsCache cache(d.path(), 1000);
  LayerBlob a = Blob(big + "a"), b = Blob(big + "b"), c = Blob(big + "c"), got;
  ASSERT_TRUE(cache.Store(a).ok());
  ASSERT_TRUE(cache.Store(b).ok());
  auto file = [&](const LayerBlob& x) { return d.path() + "/" + x.diff_id.substr(7) + ".layer"; };
  SetMtime(file(a), 1000);
  SetMtime(file(b), 2000);
  ASSERT_TRUE(cache.Lookup(a.diff_id, &got));  // a is now the most recently used
  ASSERT_TRUE(cache.Store(c).ok());
  EXPECT_TRUE(cache.Lookup(a.diff_id, &got));
  EXPECT_FALSE(cache.Lookup(b.diff_id, &got)) << "b was the least recently used";
  EXPECT_TRUE(cache.Lookup(c.diff_id, &got));
  EXPECT_LE(cache.DiskBytes(), 1000u);
  // A blob larger than the whole bound is not stored.
  LayerBlob huge = Blob(std::string(5000, 'h'));
  EXPECT_TRUE(cache.Store(huge).ok());
  EXPECT_FALSE(cache.Lookup(huge.diff_id, &got));
  EXPECT_TRUE(cache.Lookup(c.diff_id, &got));
}

TEST(OutputsCacheTest, RefusesBlobsWithoutDigests) {
  TempDir d;
  OutputsCache cache(d.path(), 1 << 20);
  LayerBlob a = Blob("a");
  a.digest = "";
  EXPECT_EQ(cache.Store(a).code(), Status::Code::kInvalidArgument);
}

// ---- Issue 15: streamed entries ----

BlobProducer Producer(const std::string& bytes, bool fail = false) {
  return [bytes, fail](ByteSink* out, std::string* digest, uint64_t* size) {
    if (fail) return Status::FailedPrecondition("outputs: changed while packing");
    for (size_t off = 0; off < bytes.size(); off += 1000) {
      Status s = out->Write(bytes.data() + off, std::min<size_t>(1000, bytes.size() - off));
      if (!s.ok()) return s;
    }
    *digest = "sha256:" + Sha256Hex(bytes);
    *size = bytes.size();
    return Status::Ok();
  };
}

TEST(OutputsCacheTest, StreamedEntriesAreTheSameFormatAndSurviveEviction) {
  TempDir d;
  OutputsCache cache(d.path(), 1 << 20);
  const std::string gz(300000, 'g');
  const std::string diff_id = "sha256:" + Sha256Hex("tar");
  LayerBlob stored, got, old;
  ASSERT_TRUE(cache.StoreStream(diff_id, Producer(gz), &stored).ok());
  ASSERT_TRUE(stored.file);
  EXPECT_TRUE(stored.data.empty());
  EXPECT_EQ(stored.digest, "sha256:" + Sha256Hex(gz));
  EXPECT_EQ(stored.size, gz.size());
  std::string bytes;
  ASSERT_TRUE(stored.file->ReadAll(&bytes).ok());
  EXPECT_EQ(bytes, gz);
  // The old reader reads the streamed entry; the streaming reader verifies it.
  ASSERT_TRUE(cache.Lookup(diff_id, &old));
  EXPECT_EQ(old.data, gz);
  ASSERT_TRUE(cache.LookupFile(diff_id, &got));
  EXPECT_EQ(got.digest, stored.digest);
  EXPECT_EQ(got.size, gz.size());
  ASSERT_TRUE(got.file->ReadAll(&bytes).ok());
  EXPECT_EQ(bytes, gz);
  // Evicted (or replaced) after the lookup: the open file still serves the push.
  std::system(("rm -f '" + d.path() + "'/*.layer").c_str());
  ASSERT_TRUE(got.file->ReadAll(&bytes).ok());
  EXPECT_EQ(bytes, gz);
  EXPECT_FALSE(cache.LookupFile(diff_id, &got));
  // A failed producer stores nothing; a corrupt entry is dropped by LookupFile.
  EXPECT_EQ(cache.StoreStream(diff_id, Producer(gz, true), &got).code(),
            Status::Code::kFailedPrecondition);
  EXPECT_EQ(cache.DiskBytes(), 0u);
  ASSERT_TRUE(cache.StoreStream(diff_id, Producer(gz), &got).ok());
  const std::string path = d.path() + "/" + diff_id.substr(7) + ".layer";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('X');
  }
  EXPECT_FALSE(cache.LookupFile(diff_id, &got));
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  // Larger than the bound: produced and usable, not kept.
  OutputsCache tiny(d.path() + "/tiny", 1000);
  ASSERT_TRUE(tiny.StoreStream(diff_id, Producer(gz), &got).ok());
  ASSERT_TRUE(got.file->ReadAll(&bytes).ok());
  EXPECT_EQ(bytes, gz);
  EXPECT_EQ(tiny.DiskBytes(), 0u);
}

TEST(OutputsCacheTest, TempBlobsLeaveNothingOnDisk) {
  TempDir d;
  LayerBlob got;
  const std::string gz(5000, 'q');
  ASSERT_TRUE(WriteTempBlob(d.path(), "sha256:" + Sha256Hex("t"), Producer(gz), &got).ok());
  std::string bytes;
  ASSERT_TRUE(got.file->ReadAll(&bytes).ok());
  EXPECT_EQ(bytes, gz);
  EXPECT_EQ(got.digest, "sha256:" + Sha256Hex(gz));
  EXPECT_EQ(std::system(("test -z \"$(ls -A '" + d.path() + "')\"").c_str()), 0);
}

}  // namespace
}  // namespace kiln
