#include "common/json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(ToValidUtf8, ValidTextIsUntouched) {
  for (const std::string& s :
       {std::string(""), std::string("plain ascii\n\t"), std::string("\xC3\xA9t\xC3\xA9"),  // été
        std::string("\xE2\x82\xAC 100"),  // € 100
        std::string("\xF0\x9F\x94\xA5"),  // U+1F525
        std::string("\xED\x9F\xBF"),      // U+D7FF, last before surrogates
        std::string("\xEE\x80\x80"),      // U+E000, first after surrogates
        std::string("\xF4\x8F\xBF\xBF"),  // U+10FFFF
        std::string("nul\0inside", 10)}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(ToValidUtf8(s), s);
  }
}

TEST(ToValidUtf8, ReplacesEveryClassOfIllFormedSequence) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {"\xFF\xFE bad", R + R + " bad"},               // invalid lead bytes
      {"a\x80z", "a" + R + "z"},                      // stray continuation
      {"\xC0\xAF", R + R},                            // overlong '/' (C0 never valid)
      {"\xC1\xBF", R + R},                            // overlong (C1 never valid)
      {"\xE0\x80\xAF", R + R + R},                    // 3-byte overlong
      {"\xF0\x80\x80\xAF", R + R + R + R},            // 4-byte overlong
      {"\xED\xA0\x80", R + R + R},                    // high surrogate U+D800
      {"\xED\xBF\xBF", R + R + R},                    // low surrogate U+DFFF
      {"\xF4\x90\x80\x80", R + R + R + R},            // above U+10FFFF
      {"\xF5\x80\x80\x80", R + R + R + R},            // F5 lead byte
      {"\xE2\x82", R},                                // truncated at the end
      {"\xF0\x9F\x94", R},                            // truncated 4-byte at the end
      {"\xC3", R},                                    // truncated 2-byte at the end
      {"\xE2\x82x", R + "x"},                         // cut short by an ASCII byte
      {"\xE2\x82\xE2\x82\xAC", R + "\xE2\x82\xAC"},   // cut short by a new lead byte
      {"ok\xC3\xA9\xFFok", "ok\xC3\xA9" + R + "ok"},  // valid around invalid
  };
  for (const auto& c : cases) {
    EXPECT_FALSE(IsValidUtf8(c.in)) << c.in;
    std::string got = ToValidUtf8(c.in);
    EXPECT_EQ(got, c.out) << c.in;
    EXPECT_TRUE(IsValidUtf8(got));
  }
}

TEST(ToValidUtf8, IsIdempotent) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  bytes += "\xED\xA0\x80\xF4\x90\x80\xE2\x82";
  std::string once = ToValidUtf8(bytes);
  EXPECT_TRUE(IsValidUtf8(once));
  EXPECT_EQ(ToValidUtf8(once), once);
}

TEST(Utf8SafePrefix, StopsBeforeAnIncompleteLastCharacter) {
  EXPECT_EQ(Utf8SafePrefix("abc"), 3u);
  EXPECT_EQ(Utf8SafePrefix(""), 0u);
  EXPECT_EQ(Utf8SafePrefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(Utf8SafePrefix("ab\xE2"), 2u);
  EXPECT_EQ(Utf8SafePrefix("ab\xF0\x9F\x94"), 2u);
  EXPECT_EQ(Utf8SafePrefix("ab\xE2\x82\xAC"), 5u);  // complete
  EXPECT_EQ(Utf8SafePrefix("ab\xFF"), 3u);          // invalid, not incomplete: nothing to wait for
  EXPECT_EQ(Utf8SafePrefix("ab\xED\xA0"), 4u);      // a surrogate can never complete
}

TEST(DumpJson, NeverThrowsOnIllFormedText) {
  nlohmann::json j = {{"log_tail", "RUN printf '\xFF\xFE'\n"}, {"nested", {"\xC0\xAF", 1}}};
  EXPECT_THROW(j.dump(), nlohmann::json::type_error);
  std::string text;
  ASSERT_NO_THROW(text = DumpJson(j));
  EXPECT_TRUE(IsValidUtf8(text));
  nlohmann::json back = nlohmann::json::parse(text);
  EXPECT_EQ(back["log_tail"], "RUN printf '" + R + R + "'\n");
}

TEST(MakeValidUtf8, FixesStringsAndKeysRecursively) {
  nlohmann::json j = {{"a", {"ok", "\xFF"}}, {"k\xFE", {{"x", "\xE2\x82"}}}, {"n", 3}};
  MakeValidUtf8(&j);
  EXPECT_NO_THROW(j.dump());
  EXPECT_EQ(j["a"][1], R);
  ASSERT_TRUE(j.contains("k" + R));
  EXPECT_EQ(j["k" + R]["x"], R);
  EXPECT_EQ(j["n"], 3);
}

}  // namespace
}  // namespace kiln
