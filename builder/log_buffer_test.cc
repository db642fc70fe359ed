// LogBuffer with bytes that are not valid UTF-8, and chunks that end inside a character.
#include "builder/log_buffer.h"

#include <gtest/gtest.h>

#include <string>

#include "common/json_text.h"

namespace kiln {
namespace {

const std::string kEuro = "\xE2\x82\xAC";  // 3 bytes
const std::string R = "\xEF\xBF\xBD";

// Reads the whole log in chunks of `limit`, checking each chunk and that no byte is lost.
std::string ReadAll(const LogBuffer& log, size_t limit, std::string* raw_concat = nullptr) {
  std::string all;
  size_t off = 0;
  for (int guard = 0; guard < 10000; ++guard) {
    auto c = log.Read(off, limit);
    EXPECT_TRUE(IsValidUtf8(c.text));
    EXPECT_EQ(c.offset, off);
    EXPECT_GT(c.next_offset, off) << "no progress at offset " << off;
    if (c.next_offset <= off) break;
    all += c.text;
    off = c.next_offset;
    if (c.complete) break;
  }
  if (raw_concat) *raw_concat = all;
  EXPECT_EQ(off, log.size());
  return all;
}

TEST(LogBufferUtf8, ChunkBoundaryInsideACharacterMovesBack) {
  LogBuffer log(4096);
  log.Append("ab" + kEuro + "cd");  // a b E2 82 AC c d
  log.Close();
  auto c = log.Read(0, 3);  // would end after E2
  EXPECT_EQ(c.text, "ab");
  EXPECT_EQ(c.next_offset, 2u);  // the next chunk starts at the character
  c = log.Read(c.next_offset, 3);
  EXPECT_EQ(c.text, kEuro);
  EXPECT_EQ(c.next_offset, 5u);
  c = log.Read(c.next_offset, 3);
  EXPECT_EQ(c.text, "cd");
  EXPECT_TRUE(c.complete);
}

TEST(LogBufferUtf8, LimitSmallerThanOneCharacterStillProgresses) {
  LogBuffer log(4096);
  log.Append(kEuro + kEuro + "\xF0\x9F\x94\xA5");
  log.Close();
  for (size_t limit : {1u, 2u, 3u, 4u, 5u}) {
    EXPECT_EQ(ReadAll(log, limit), kEuro + kEuro + "\xF0\x9F\x94\xA5") << "limit " << limit;
  }
}

TEST(LogBufferUtf8, EveryChunkSizeReassemblesTheText) {
  LogBuffer log(1 << 16);
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "line " + std::to_string(i) + " \xC3\xA9t\xC3\xA9 " + kEuro + "\n";
  log.Append(text);
  log.Close();
  for (size_t limit = 1; limit <= 17; ++limit) EXPECT_EQ(ReadAll(log, limit), text) << limit;
}

TEST(LogBufferUtf8, CharacterStillBeingWrittenIsHeldBack) {
  LogBuffer log(4096);
  log.Append("x\xE2\x82");  // the build wrote two of the three bytes so far
  auto c = log.Read(0, 100);
  EXPECT_EQ(c.text, "x");
  EXPECT_EQ(c.next_offset, 1u);
  EXPECT_FALSE(c.complete);
  c = log.Read(1, 100);
  EXPECT_EQ(c.text, "");
  EXPECT_EQ(c.next_offset, 1u);
  log.Append("\xAC!");
  log.Close();
  c = log.Read(1, 100);
  EXPECT_EQ(c.text, kEuro + "!");
  EXPECT_TRUE(c.complete);
}

TEST(LogBufferUtf8, InvalidBytesAreReplacedAndOffsetsStayByteOffsets) {
  LogBuffer log(4096);
  std::string raw =
      "RUN printf '\xFF\xFE bad bytes\\n'\n\xFF\xFE bad bytes\n\xED\xA0\x80 end \xE2\x82";
  log.Append(raw);
  log.Close();  // the final sequence is cut short by the end of the log: replaced
  auto c = log.Read(0, 1 << 20);
  EXPECT_TRUE(IsValidUtf8(c.text));
  EXPECT_EQ(c.next_offset, raw.size());
  EXPECT_TRUE(c.complete);
  EXPECT_EQ(c.text, ToValidUtf8(raw));
  for (size_t limit = 1; limit <= 7; ++limit)
    EXPECT_EQ(ReadAll(log, limit), ToValidUtf8(raw)) << limit;
  EXPECT_TRUE(IsValidUtf8(log.Tail(20)));
  EXPECT_TRUE(IsValidUtf8(log.Tail(4096)));
}

TEST(LogBufferUtf8, TailAndDroppedHeadNeverStartInsideACharacter) {
  LogBuffer log(1024);
  std::string block;
  for (int i = 0; i < 400; ++i) block += kEuro;  // no newline at all
  for (int i = 0; i < 5; ++i) log.Append(block);
  std::string tail = log.Tail(100);
  EXPECT_TRUE(IsValidUtf8(tail));
  EXPECT_EQ(tail.find(R), std::string::npos) << "tail began inside a character";
  auto c = log.Read(0, 1 << 20);  // from the oldest kept byte, which may be mid-character
  EXPECT_TRUE(IsValidUtf8(c.text));
}

// Issue 19: logs of older builds shrink to their tail; offsets stay absolute.
TEST(LogBuffer, ShrinkKeepsTheTailAndReleasesMemory) {
  LogBuffer log(1 << 20);
  for (int i = 0; i < 1000; ++i)
    log.Append("line " + std::to_string(i) + " " + std::string(500, 'x') + "\n");
  log.Close();
  const size_t total = log.size();
  ASSERT_GT(log.held_bytes(), size_t{400} << 10);
  log.Shrink(4096);
  EXPECT_LE(log.held_bytes(), size_t{8192});
  EXPECT_EQ(log.size(), total);
  LogBuffer::Chunk c = log.Read(0, 1 << 20);
  EXPECT_EQ(c.offset, total - 4096);
  EXPECT_EQ(c.dropped, total - 4096);
  EXPECT_TRUE(c.complete);
  EXPECT_NE(log.Tail(4096).find("line 999 "), std::string::npos);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A cancelled build's step may still write after the build ended (a checkout finishing, the
// builder's last output): the closed log, and so log_tail and build_log, stay as they were.
TEST(LogBuffer, ALateLineAfterCloseDoesNotChangeTheFinalLog) {
  LogBuffer log(4096);
  log.Append("kiln: cancelled by request\n");
  log.Close();
  const std::string before = log.Tail(1024);
  log.Append("kiln: checked out 0123456789ab (1 files written, 64 ms)\n");
  EXPECT_EQ(log.Tail(1024), before);
  EXPECT_EQ(log.size(), before.size());
  LogBuffer::Chunk c = log.Read(0, 4096);
  EXPECT_EQ(c.text, "kiln: cancelled by request\n");
  EXPECT_TRUE(c.complete);
}

}  // namespace
}  // namespace kiln
