#include "state/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c::Value(""), 0u);
  EXPECT_EQ(crc32c::Value("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c::Value(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c::Value(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s = "the quick brown fox jumps over the lazy dog, 0123456789";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t a = crc32c::Extend(0, s.data(), cut);
    EXPECT_EQ(crc32c::Extend(a, s.data() + cut, s.size() - cut), crc32c::Value(s)) << cut;
  }
}

}  // namespace
}  // namespace kiln
