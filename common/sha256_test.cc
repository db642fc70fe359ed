#include "common/sha256.h"

#include <gtest/gtest.h>

namespace kiln {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.HexDigest(), Sha256Hex("abc"));
}

TEST(Sha256, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
}

TEST(Sha256, IsSha256Hex) {
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex("abc"));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
}

TEST(Sha256, IsSha256Digest) {
  EXPECT_TRUE(IsSha256Digest("sha256:" + Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Digest(Sha256Hex("x")));                       // no algorithm
  EXPECT_FALSE(IsSha256Digest("sha512:" + Sha256Hex("x")));           // other algorithm
  EXPECT_FALSE(IsSha256Digest("sha256:" + Sha256Hex("x") + "0"));     // too long
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(64, 'A')));     // uppercase
  EXPECT_FALSE(IsSha256Digest("sha256:../" + std::string(61, 'a')));  // path characters
}

}  // namespace kiln
