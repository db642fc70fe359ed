#include "builder/build_key.h"

#include <gtest/gtest.h>

#include "builder/log_buffer.h"
#include "builder/oci_image.h"
#include "common/sha256.h"

namespace kiln {
namespace {

DomainConfig Domain() {
  DomainConfig d;
  d.name = "epp";
  d.image = {"local", "loop/epp"};
  return d;
}

TEST(BuildKey, DeterministicAndHex) {
  RegistryConfig r{"local", "http://127.0.0.1:5000", {}, {}};
  auto a = ComputeBuildKey("epp", "git-tree:abc", Domain(), r, {"sha256:1", "sha256:2"});
  auto b = ComputeBuildKey("epp", "git-tree:abc", Domain(), r, {"sha256:2", "sha256:1"});
  EXPECT_EQ(a, b);
  EXPECT_TRUE(IsSha256Hex(a));
}

TEST(BuildKey, EveryInputChangesTheKey) {
  RegistryConfig r{"local", "http://127.0.0.1:5000", {}, {}};
  auto base = ComputeBuildKey("epp", "git-tree:abc", Domain(), r, {"sha256:1"});
  EXPECT_NE(base, ComputeBuildKey("other", "git-tree:abc", Domain(), r, {"sha256:1"}));
  EXPECT_NE(base, ComputeBuildKey("epp", "git-tree:abd", Domain(), r, {"sha256:1"}));
  EXPECT_NE(base, ComputeBuildKey("epp", "git-tree:abc", Domain(), r, {"sha256:2"}));
  auto d = Domain();
  d.build.containerfile.build_args["X"] = "1";
  EXPECT_NE(base, ComputeBuildKey("epp", "git-tree:abc", d, r, {"sha256:1"}));
  d = Domain();
  d.build.containerfile.target = "final";
  EXPECT_NE(base, ComputeBuildKey("epp", "git-tree:abc", d, r, {"sha256:1"}));
  d = Domain();
  d.image.repository = "loop/other";
  EXPECT_NE(base, ComputeBuildKey("epp", "git-tree:abc", d, r, {"sha256:1"}));
  RegistryConfig r2{"local", "http://127.0.0.1:5001", {}, {}};
  EXPECT_NE(base, ComputeBuildKey("epp", "git-tree:abc", Domain(), r2, {"sha256:1"}));
  // The timeout is not part of what is built.
  d = Domain();
  d.build.timeout_s = 5;
  EXPECT_EQ(base, ComputeBuildKey("epp", "git-tree:abc", d, r, {"sha256:1"}));
}

// Issue 18: build.compression decides the layer's bytes, so it is part of the key.
TEST(BuildKey, LayerCompressionChangesTheKey) {
  RegistryConfig r{"local", "http://127.0.0.1:5000", {}, {}};
  auto d = Domain();
  auto key = [&](const std::string& c) {
    d.build.compression = c;
    return ComputeBuildKey("epp", "git-tree:abc", d, r, {"sha256:1"});
  };
  EXPECT_NE(key("auto"), key("gzip"));
  EXPECT_NE(key("gzip"), key("none"));
  EXPECT_NE(key("auto"), key("none"));
}

TEST(LayeredCompression, AutoStoresPlainTarOnlyForALoopbackRegistry) {
  EXPECT_TRUE(StoreLayersUncompressed("auto", "http://127.0.0.1:5000"));
  EXPECT_TRUE(StoreLayersUncompressed("auto", "https://127.0.2.3"));
  EXPECT_TRUE(StoreLayersUncompressed("auto", "http://LocalHost:5000"));
  EXPECT_TRUE(StoreLayersUncompressed("auto", "https://[::1]:5443"));
  EXPECT_FALSE(StoreLayersUncompressed("auto", "https://registry.example.com"));
  EXPECT_FALSE(StoreLayersUncompressed("auto", "http://10.0.0.5:5000"));
  EXPECT_FALSE(StoreLayersUncompressed("auto", "http://127.example.com:5000"));
  EXPECT_FALSE(StoreLayersUncompressed("auto", "http://localhost.example.com"));
  EXPECT_FALSE(StoreLayersUncompressed("auto", "https://[::2]:5443"));
  EXPECT_FALSE(StoreLayersUncompressed("gzip", "http://127.0.0.1:5000"));
  EXPECT_TRUE(StoreLayersUncompressed("none", "https://registry.example.com"));
}

TEST(LogBuffer, ReadsByOffsetAndCompletes) {
  LogBuffer log(2048);
  log.Append("hello ");
  log.Append("world\n");
  auto c = log.Read(0, 5);
  EXPECT_EQ(c.text, "hello");
  EXPECT_EQ(c.next_offset, 5u);
  EXPECT_FALSE(c.complete);
  log.Close();
  c = log.Read(5, 100);
  EXPECT_EQ(c.text, " world\n");
  EXPECT_TRUE(c.complete);
  c = log.Read(1000, 10);  // past the end: empty, complete
  EXPECT_EQ(c.text, "");
  EXPECT_TRUE(c.complete);
}

TEST(LogBuffer, BoundedKeepsTheTail) {
  LogBuffer log(1024);
  for (int i = 0; i < 1000; ++i) log.Append("line " + std::to_string(i) + "\n");
  EXPECT_GT(log.size(), 5000u);
  auto c = log.Read(0, 1 << 20);
  EXPECT_GT(c.offset, 0u);  // head was dropped
  EXPECT_LE(c.text.size(), 1024u + 256u);
  EXPECT_NE(c.text.find("line 999\n"), std::string::npos);
  std::string tail = log.Tail(40);
  EXPECT_EQ(tail.substr(tail.size() - 9), "line 999\n");
  EXPECT_EQ(tail.rfind("line", 0), 0u);  // starts at a line boundary
}

}  // namespace
}  // namespace kiln
