#include "builder/layer_writer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/sha256.h"

namespace kiln {
namespace {

// A temporary directory removed (recursively) at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kiln-layer-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::system(("mkdir -p \"$(dirname '" + path + "')\"").c_str());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  f.close();
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a shell command; returns its stdout, and its exit status in *rc.
std::string Shell(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  if (rc) *rc = WEXITSTATUS(status);
  return out;
}

// A workspace with an executable, a config tree with a nested dir and an in-tree symlink.
void Populate(const std::string& ws) {
  WriteFile(ws + "/bin/server",
            std::string("\x7f"
                        "ELF fake binary\n") +
                std::string(5000, 'x'),
            0755);
  WriteFile(ws + "/config/app.yaml", "port: 8080\n", 0644);
  WriteFile(ws + "/config/sub/b.txt", "bee\n", 0600);
  ASSERT_EQ(::symlink("app.yaml", (ws + "/config/current").c_str()), 0);
}

std::vector<LayerEntry> DefaultEntries() {
  return {{"bin/server", "/app/server"}, {"config", "/etc/app"}};
}

LayerBlob MustWrite(const std::string& ws, const std::vector<LayerEntry>& entries) {
  LayerBlob blob;
  Status s = WriteLayer(ws, entries, 1, &blob);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blob;
}

TEST(LayerWriterTest, DigestsMatchTheBytesAndSizes) {
  TempDir ws;
  Populate(ws.path());
  LayerBlob blob = MustWrite(ws.path(), DefaultEntries());
  EXPECT_EQ(blob.size, blob.data.size());
  EXPECT_EQ(blob.digest, "sha256:" + Sha256Hex(blob.data));
  TempDir out;
  WriteFile(out.path() + "/layer.tgz", blob.data);
  std::string tar_sha = Shell("gunzip -c '" + out.path() + "/layer.tgz' | sha256sum");
  EXPECT_EQ(blob.diff_id, "sha256:" + tar_sha.substr(0, 64));
  EXPECT_NE(blob.diff_id, blob.digest);
  // Uncompressed tar is a whole number of 512-byte blocks.
  int rc = 0;
  std::string tar_len = Shell("gunzip -c '" + out.path() + "/layer.tgz' | wc -c", &rc);
  EXPECT_EQ(std::stoul(tar_len) % 512, 0u);
}

TEST(LayerWriterTest, DeterministicAcrossRunsMtimesAndPermissionNoise) {
  TempDir ws;
  Populate(ws.path());
  LayerBlob a = MustWrite(ws.path(), DefaultEntries());
  LayerBlob b = MustWrite(ws.path(), DefaultEntries());
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.data, b.data);

  // New mtimes and group/other bits do not matter; only the owner exec bit does.
  struct timeval tv[2] = {{123456, 0}, {123456, 0}};
  ASSERT_EQ(::utimes((ws.path() + "/bin/server").c_str(), tv), 0);
  ASSERT_EQ(::utimes((ws.path() + "/config").c_str(), tv), 0);
  ASSERT_EQ(::chmod((ws.path() + "/config/app.yaml").c_str(), 0664), 0);
  LayerBlob c = MustWrite(ws.path(), DefaultEntries());
  EXPECT_EQ(a.digest, c.digest);
  EXPECT_EQ(a.diff_id, c.diff_id);

  // Content changes do.
  WriteFile(ws.path() + "/config/app.yaml", "port: 8081\n");
  LayerBlob d = MustWrite(ws.path(), DefaultEntries());
  EXPECT_NE(a.digest, d.digest);
  // And so does the exec bit.
  WriteFile(ws.path() + "/config/app.yaml", "port: 8080\n", 0744);
  LayerBlob e = MustWrite(ws.path(), DefaultEntries());
  EXPECT_NE(a.digest, e.digest);
  // Entry order given by the caller does not matter.
  LayerBlob f = MustWrite(ws.path(), {{"config", "/etc/app"}, {"bin/server", "/app/server"}});
  EXPECT_EQ(e.digest, f.digest);
}

TEST(LayerWriterTest, FixedGzipHeader) {
  TempDir ws;
  Populate(ws.path());
  LayerBlob blob = MustWrite(ws.path(), DefaultEntries());
  ASSERT_GT(blob.data.size(), 10u);
  EXPECT_EQ(static_cast<unsigned char>(blob.data[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(blob.data[1]), 0x8b);
  EXPECT_EQ(blob.data[3], 0) << "no file name, comment or extra field";
  EXPECT_EQ(blob.data.substr(4, 4), std::string(4, '\0')) << "mtime 0";
  EXPECT_EQ(static_cast<unsigned char>(blob.data[9]), 255) << "constant OS byte";
}

TEST(LayerWriterTest, TarListsAndExtractsEqualContent) {
  TempDir ws;
  Populate(ws.path());
  LayerBlob blob = MustWrite(ws.path(), DefaultEntries());
  TempDir out;
  const std::string tgz = out.path() + "/layer.tgz";
  WriteFile(tgz, blob.data);
  int rc = -1;
  std::string listing = Shell("tar tzvf '" + tgz + "' 2>&1", &rc);
  ASSERT_EQ(rc, 0) << listing;
  // Sorted order, created parents, normalized modes, root owner.
  std::string names = Shell("tar tzf '" + tgz + "'", &rc);
  EXPECT_EQ(names,
            "app/\napp/server\netc/\netc/app/\netc/app/app.yaml\netc/app/current\n"
            "etc/app/sub/\netc/app/sub/b.txt\n");
  EXPECT_NE(listing.find("drwxr-xr-x 0/0"), std::string::npos) << listing;
  EXPECT_NE(listing.find("-rwxr-xr-x 0/0"), std::string::npos) << listing;
  EXPECT_NE(listing.find("-rw-r--r-- 0/0"), std::string::npos) << listing;
  EXPECT_NE(listing.find("etc/app/current -> app.yaml"), std::string::npos) << listing;
  EXPECT_NE(listing.find("1970-01-01"), std::string::npos) << listing;

  const std::string root = out.path() + "/root";
  Shell("mkdir -p '" + root + "' && tar xzf '" + tgz + "' -C '" + root + "'", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(ReadFile(root + "/app/server"), ReadFile(ws.path() + "/bin/server"));
  EXPECT_EQ(ReadFile(root + "/etc/app/app.yaml"), "port: 8080\n");
  EXPECT_EQ(ReadFile(root + "/etc/app/sub/b.txt"), "bee\n");
  EXPECT_EQ(ReadFile(root + "/etc/app/current"), "port: 8080\n");  // via the symlink
  struct stat st;
  ASSERT_EQ(::stat((root + "/app/server").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(::stat((root + "/etc/app/sub/b.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::lstat((root + "/etc/app/current").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(LayerWriterTest, LongNamesAndLinkTargetsUsePax) {
  TempDir ws;
  std::string deep = "d/" + std::string(60, 'a') + "/" + std::string(70, 'b');
  WriteFile(ws.path() + "/" + deep + "/file.txt", "deep\n");
  std::string long_target = std::string(120, 'x');
  ASSERT_EQ(::symlink(long_target.c_str(), (ws.path() + "/" + deep + "/lnk").c_str()), 0);
  LayerBlob blob = MustWrite(ws.path(), {{"d", "/opt/" + std::string(50, 'o')}});
  TempDir out;
  WriteFile(out.path() + "/l.tgz", blob.data);
  int rc = -1;
  Shell("mkdir -p '" + out.path() + "/r' && tar xzf '" + out.path() + "/l.tgz' -C '" + out.path() +
            "/r'",
        &rc);
  ASSERT_EQ(rc, 0);
  std::string in_image = out.path() + "/r/opt/" + std::string(50, 'o') + "/" + deep.substr(2);
  EXPECT_EQ(ReadFile(in_image + "/file.txt"), "deep\n");
  std::string target(512, '\0');
  ssize_t n = ::readlink((in_image + "/lnk").c_str(), &target[0], target.size());
  ASSERT_GT(n, 0);
  target.resize(static_cast<size_t>(n));
  EXPECT_EQ(target, long_target);
}

void ExpectRefused(const std::string& ws, const std::vector<LayerEntry>& entries,
                   Status::Code code = Status::Code::kInvalidArgument) {
  LayerBlob blob;
  blob.digest = "untouched";
  Status s = WriteLayer(ws, entries, 1, &blob);
  EXPECT_EQ(s.code(), code) << entries[0].from << " -> " << entries[0].to << ": " << s.ToString();
  EXPECT_EQ(blob.digest, "untouched");
}

TEST(LayerWriterTest, HostilePathsAreRefused) {
  TempDir parent;
  const std::string ws = parent.path() + "/ws";
  WriteFile(ws + "/ok", "ok\n");
  WriteFile(parent.path() + "/secret", "secret\n");
  ASSERT_EQ(::symlink("/etc/shadow", (ws + "/shadow").c_str()), 0);
  ASSERT_EQ(::symlink("/etc", (ws + "/etcdir").c_str()), 0);
  ASSERT_EQ(::symlink("../secret", (ws + "/up").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent/x", (ws + "/dangling").c_str()), 0);

  ExpectRefused(ws, {{"../secret", "/x"}});
  ExpectRefused(ws, {{"ok/../../secret", "/x"}});
  ExpectRefused(ws, {{"/etc/passwd", "/x"}});
  ExpectRefused(ws, {{"shadow", "/x"}});
  ExpectRefused(ws, {{"etcdir/passwd", "/x"}});
  ExpectRefused(ws, {{"etcdir", "/x"}});
  ExpectRefused(ws, {{"up", "/x"}});
  ExpectRefused(ws, {{"dangling", "/x"}});
  ExpectRefused(ws, {{"", "/x"}});
  ExpectRefused(ws, {{"ok", "relative"}});
  ExpectRefused(ws, {{"ok", "/a/../b"}});
  ExpectRefused(ws, {{"ok", "/a/./b"}});
  ExpectRefused(ws, {{"ok", "/a//b"}});
  ExpectRefused(ws, {{"ok", "/"}});
  ExpectRefused(ws, {{"ok", ""}});
  ExpectRefused(ws, {{"ok", std::string("/a\0b", 4)}});
  ExpectRefused(ws, {{"missing", "/x"}}, Status::Code::kNotFound);
  // One bad entry among good ones spoils the layer.
  ExpectRefused(ws, {{"ok", "/ok"}, {"shadow", "/x"}});
  // Sanity: the good entry alone works.
  LayerBlob blob;
  EXPECT_TRUE(WriteLayer(ws, {{"ok", "/ok"}}, 1, &blob).ok());
}

TEST(LayerWriterTest, SymlinksInsideTreesAreStoredNotFollowed) {
  TempDir ws;
  WriteFile(ws.path() + "/out/a.txt", "a\n");
  ASSERT_EQ(::symlink("/etc/passwd", (ws.path() + "/out/pw").c_str()), 0);
  LayerBlob blob = MustWrite(ws.path(), {{"out", "/out"}});
  TempDir out;
  WriteFile(out.path() + "/l.tgz", blob.data);
  int rc = -1;
  std::string listing = Shell("tar tzvf '" + out.path() + "/l.tgz'", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(listing.find("out/pw -> /etc/passwd"), std::string::npos) << listing;
  std::string tar = Shell("gunzip -c '" + out.path() + "/l.tgz'");
  EXPECT_EQ(tar.find("root:x:0:0"), std::string::npos) << "host /etc/passwd content leaked";
}

TEST(LayerWriterTest, FifoIsRefused) {
  TempDir ws;
  WriteFile(ws.path() + "/out/a.txt", "a\n");
  ASSERT_EQ(::mkfifo((ws.path() + "/out/pipe").c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((ws.path() + "/toppipe").c_str(), 0644), 0);
  ExpectRefused(ws.path(), {{"out", "/out"}});
  ExpectRefused(ws.path(), {{"toppipe", "/p"}});
}

TEST(LayerWriterTest, LimitsAndConflicts) {
  TempDir ws;
  WriteFile(ws.path() + "/big", std::string(10000, 'z'));
  WriteFile(ws.path() + "/small", "s");
  for (int i = 0; i < 20; ++i) WriteFile(ws.path() + "/many/f" + std::to_string(i), "x");
  LayerBlob blob;
  LayerLimits tiny_size;
  tiny_size.max_total_bytes = 9999;
  Status s = WriteLayer(ws.path(), {{"big", "/big"}}, 1, &blob, tiny_size);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("size limit"), std::string::npos);
  tiny_size.max_total_bytes = 10000;
  EXPECT_TRUE(WriteLayer(ws.path(), {{"big", "/big"}}, 1, &blob, tiny_size).ok());

  LayerLimits few;
  few.max_entries = 10;
  s = WriteLayer(ws.path(), {{"many", "/many"}}, 1, &blob, few);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("entries"), std::string::npos);

  ExpectRefused(ws.path(), {{"big", "/x"}, {"small", "/x"}});
  ExpectRefused(ws.path(), {{"big", "/x"}, {"small", "/x/y"}});
  EXPECT_EQ(WriteLayer(ws.path(), {{"big", "/x"}}, 42, &blob).code(),
            Status::Code::kInvalidArgument);
}

TEST(LayerWriterTest, SymlinkedFromInsideWorkspaceIsPackedAsContent) {
  TempDir ws;
  WriteFile(ws.path() + "/real/bin", "binary", 0755);
  ASSERT_EQ(::symlink("real", (ws.path() + "/alias").c_str()), 0);
  LayerBlob a = MustWrite(ws.path(), {{"alias/bin", "/app"}});
  LayerBlob b = MustWrite(ws.path(), {{"real/bin", "/app"}});
  EXPECT_EQ(a.digest, b.digest);
}

// A workspace with a few MiB of output: a compressible part and a pseudo-random part, so the
// layer spans several compression chunks.
void PopulateBig(const std::string& ws, size_t mib) {
  std::string data;
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < mib * (1u << 20); ++i) {
    if ((i / 4096) % 2 == 0) {
      data.push_back(static_cast<char>('a' + (i % 7)));
    } else {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      data.push_back(static_cast<char>(x & 0xff));
    }
  }
  WriteFile(ws + "/out/app", data, 0755);
  WriteFile(ws + "/out/small.txt", "small\n");
}

TEST(LayerWriterTest, ParallelCompressionIsOneDeterministicGzipMember) {
  TempDir ws;
  PopulateBig(ws.path(), 5);
  LayerTar tar;
  ASSERT_TRUE(PackLayerTar(ws.path(), {{"out", "/app"}}, &tar).ok());
  EXPECT_EQ(tar.diff_id, "sha256:" + Sha256Hex(tar.data));
  EXPECT_EQ(tar.data.size() % 512, 0u);
  ASSERT_GT(tar.data.size(), size_t{5} << 20);

  // The bytes do not depend on the number of threads.
  LayerBlob one, two, many;
  CompressOptions o;
  o.threads = 1;
  ASSERT_TRUE(CompressLayer(tar.data, tar.diff_id, o, &one).ok());
  o.threads = 2;
  ASSERT_TRUE(CompressLayer(tar.data, tar.diff_id, o, &two).ok());
  o.threads = 7;
  ASSERT_TRUE(CompressLayer(tar.data, tar.diff_id, o, &many).ok());
  EXPECT_EQ(one.data, two.data);
  EXPECT_EQ(one.data, many.data);
  EXPECT_EQ(one.digest, "sha256:" + Sha256Hex(one.data));
  EXPECT_EQ(one.size, one.data.size());
  EXPECT_EQ(one.diff_id, tar.diff_id);
  EXPECT_LT(one.size, tar.data.size());

  // WriteLayer is PackLayerTar + CompressLayer.
  LayerBlob whole = MustWrite(ws.path(), {{"out", "/app"}});
  EXPECT_EQ(whole.digest, one.digest);

  // Re-read from disk: gunzip gives back exactly the tar (diff_id), the file hashes to the digest,
  // and Python's zlib sees ONE gzip member with nothing after it, whose ISIZE is the tar length.
  TempDir out;
  WriteFile(out.path() + "/l.tgz", one.data);
  EXPECT_EQ("sha256:" + Shell("sha256sum '" + out.path() + "/l.tgz'").substr(0, 64), one.digest);
  int rc = -1;
  std::string gun = Shell("gunzip -c '" + out.path() + "/l.tgz' | sha256sum", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ("sha256:" + gun.substr(0, 64), tar.diff_id);
  std::string py = Shell(
      "python3 -c \"import zlib,sys; b=open(sys.argv[1],'rb').read(); d=zlib.decompressobj(31); "
      "t=d.decompress(b); print(d.eof, len(d.unused_data), len(t), "
      "int.from_bytes(b[-4:],'little'))\" '" +
          out.path() + "/l.tgz'",
      &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(py, "True 0 " + std::to_string(tar.data.size()) + " " +
                    std::to_string(tar.data.size()) + "\n");
  std::string listing = Shell("tar tzvf '" + out.path() + "/l.tgz'", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(listing.find("app/app"), std::string::npos) << listing;
  EXPECT_NE(listing.find(std::to_string(size_t{5} << 20)), std::string::npos) << listing;

  // The chunk size changes the compressed bytes (so it is fixed), never the tar.
  LayerBlob other;
  o.chunk_bytes = 256 * 1024;
  ASSERT_TRUE(CompressLayer(tar.data, tar.diff_id, o, &other).ok());
  EXPECT_NE(other.digest, one.digest);
  WriteFile(out.path() + "/o.tgz", other.data);
  gun = Shell("gunzip -c '" + out.path() + "/o.tgz' | sha256sum", &rc);
  EXPECT_EQ("sha256:" + gun.substr(0, 64), tar.diff_id);
}

TEST(LayerWriterTest, CompressOptionsAreChecked) {
  LayerBlob blob;
  blob.digest = "untouched";
  CompressOptions o;
  o.level = 10;
  EXPECT_EQ(CompressLayer("x", "sha256:x", o, &blob).code(), Status::Code::kInvalidArgument);
  o.level = 1;
  o.chunk_bytes = 1000;
  EXPECT_EQ(CompressLayer("x", "sha256:x", o, &blob).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(blob.digest, "untouched");
  // Level 0 (stored) still gives a valid gzip.
  o.level = 0;
  o.chunk_bytes = 64 * 1024;
  std::string tar(200 * 1024, 'z');
  ASSERT_TRUE(CompressLayer(tar, "sha256:" + Sha256Hex(tar), o, &blob).ok());
  TempDir out;
  WriteFile(out.path() + "/l.gz", blob.data);
  EXPECT_EQ(Shell("gunzip -c '" + out.path() + "/l.gz' | wc -c"),
            std::to_string(tar.size()) + "\n");
}

// ---- Issue 15: streaming ----

namespace streaming {

// Collects the sink's bytes (the test's own memory, not the writer's).
class CollectSink : public ByteSink {
 public:
  Status Write(const char* data, size_t n) override {
    bytes.append(data, n);
    return Status::Ok();
  }
  std::string bytes;
};

// Hashes and counts, keeping nothing.
class CountSink : public ByteSink {
 public:
  Status Write(const char* data, size_t n) override {
    sha.Update(data, n);
    count += n;
    return Status::Ok();
  }
  Sha256 sha;
  uint64_t count = 0;
};

// Deterministic, poorly compressible bytes.
std::string Noise(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>((x >> 24) & (i % 3 == 0 ? 0xff : 0x0f));
  }
  return s;
}

}  // namespace streaming

TEST(LayerWriterTest, StreamedTarIsTheSameAsThePackedOne) {
  TempDir ws;
  Populate(ws.path());
  PopulateBig(ws.path(), 3);
  std::vector<LayerEntry> entries = DefaultEntries();
  entries.push_back({"out", "/big"});
  LayerTar tar;
  ASSERT_TRUE(PackLayerTar(ws.path(), entries, &tar).ok());
  streaming::CollectSink sink;
  std::string diff_id, hashed_only;
  ASSERT_TRUE(StreamLayerTar(ws.path(), entries, &sink, &diff_id).ok());
  EXPECT_EQ(sink.bytes, tar.data);
  EXPECT_EQ(diff_id, tar.diff_id);
  ASSERT_TRUE(StreamLayerTar(ws.path(), entries, nullptr, &hashed_only).ok());
  EXPECT_EQ(hashed_only, tar.diff_id);
  // Hostile outputs are refused by the streaming path too.
  EXPECT_EQ(StreamLayerTar(ws.path(), {{"../etc", "/x"}}, nullptr, &diff_id).code(),
            Status::Code::kInvalidArgument);
}

TEST(LayerWriterTest, StreamingGzipGivesTheOldWritersBytes) {
  // Sizes around chunk boundaries (exact multiple, one byte more, empty) and odd piece sizes.
  for (size_t n : {size_t{0}, size_t{1} << 20, (size_t{3} << 20) + 1, size_t{2500000}}) {
    std::string tar = streaming::Noise(n, static_cast<uint32_t>(n));
    const std::string diff_id = "sha256:" + Sha256Hex(tar);
    for (int threads : {1, 3}) {
      CompressOptions o;
      o.threads = threads;
      LayerBlob old;
      ASSERT_TRUE(CompressLayer(tar, diff_id, o, &old).ok());
      streaming::CollectSink sink;
      GzipLayerWriter gz(o, &sink);
      for (size_t off = 0; off < tar.size(); off += 77777)
        ASSERT_TRUE(gz.Write(tar.data() + off, std::min<size_t>(77777, tar.size() - off)).ok());
      std::string digest;
      uint64_t size = 0;
      ASSERT_TRUE(gz.Finish(&digest, &size).ok());
      EXPECT_EQ(sink.bytes, old.data) << n << " bytes, " << threads << " threads";
      EXPECT_EQ(digest, old.digest);
      EXPECT_EQ(size, old.size);
    }
  }
  // The layered builder's path end to end: streamed tar into the streaming gzip = WriteLayer.
  TempDir ws;
  Populate(ws.path());
  LayerBlob whole = MustWrite(ws.path(), DefaultEntries());
  streaming::CollectSink sink;
  CompressOptions o;
  GzipLayerWriter gz(o, &sink);
  std::string diff_id, digest;
  uint64_t size = 0;
  ASSERT_TRUE(StreamLayerTar(ws.path(), DefaultEntries(), &gz, &diff_id).ok());
  ASSERT_TRUE(gz.Finish(&digest, &size).ok());
  EXPECT_EQ(digest, whole.digest);
  EXPECT_EQ(diff_id, whole.diff_id);
  EXPECT_EQ(sink.bytes, whole.data);
}

TEST(LayerWriterTest, StreamingGzipHoldsABoundedAmountOfMemory) {
  // 32 MiB through the writer (generated piece by piece, never held whole): the writer holds
  // at most (threads + 1) chunks with their dictionaries and outputs.
  CompressOptions o;
  o.threads = 2;
  streaming::CountSink sink;
  GzipLayerWriter gz(o, &sink);
  const std::string piece = streaming::Noise(256 * 1024, 7);
  uint64_t fed = 0;
  for (int i = 0; i < 128; ++i) {
    ASSERT_TRUE(gz.Write(piece.data(), piece.size()).ok());
    fed += piece.size();
  }
  std::string digest;
  uint64_t size = 0;
  ASSERT_TRUE(gz.Finish(&digest, &size).ok());
  EXPECT_EQ(fed, uint64_t{32} << 20);
  EXPECT_EQ(size, sink.count);
  EXPECT_EQ(digest, "sha256:" + sink.sha.HexDigest());
  EXPECT_GT(gz.peak_buffered_bytes(), size_t{1} << 20);  // it did buffer a chunk
  EXPECT_LT(gz.peak_buffered_bytes(), size_t{8} << 20) << "buffers more than (threads+1) chunks";
}

TEST(LayerWriterTest, StreamingGzipChecksItsOptions) {
  streaming::CollectSink sink;
  CompressOptions o;
  o.level = 10;
  GzipLayerWriter bad(o, &sink);
  EXPECT_EQ(bad.Write("x", 1).code(), Status::Code::kInvalidArgument);
  std::string d;
  uint64_t n = 0;
  EXPECT_EQ(bad.Finish(&d, &n).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(sink.bytes.empty());
}

}  // namespace
}  // namespace kiln
