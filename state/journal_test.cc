#include "state/journal.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>

#include "state/fault_file_system.h"
#include "state/test_util.h"

namespace kiln {
namespace {

using testing_state::ReadAll;
using testing_state::TempDir;
using testing_state::WriteAll;
namespace fs = std::filesystem;

std::string JournalPath(const std::string& dir, uint64_t gen) {
  char name[64];
  std::snprintf(name, sizeof name, "/journal-%016llu.log", static_cast<unsigned long long>(gen));
  return dir + name;
}

std::string Payload(int i) { return "{\"n\":" + std::to_string(i) + ",\"pad\":\"xxxxxxxx\"}"; }

std::unique_ptr<Journal> OpenOk(const std::string& dir, JournalLoad* load,
                                JournalOptions o = JournalOptions()) {
  std::unique_ptr<Journal> j;
  Status s = Journal::Open(dir, o, &j, load);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return j;
}

std::vector<std::string> Payloads(const JournalLoad& l) {
  std::vector<std::string> out;
  for (const auto& r : l.records) out.push_back(r.payload);
  return out;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Journal, RoundTripAndBatches) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    EXPECT_TRUE(l.records.empty());
    EXPECT_FALSE(l.has_snapshot);
    ASSERT_TRUE(j->Append(1, Payload(0)).ok());
    ASSERT_TRUE(j->Append({{2, Payload(1)}, {3, Payload(2)}, {4, ""}}).ok());
  }
  JournalLoad l;
  auto j = OpenOk(d.path(), &l);
  ASSERT_EQ(l.records.size(), 4u);
  EXPECT_EQ(l.records[0].type, 1);
  EXPECT_EQ(l.records[2].type, 3);
  EXPECT_EQ(l.records[2].payload, Payload(2));
  EXPECT_EQ(l.records[3].payload, "");
  EXPECT_EQ(l.truncated_bytes, 0u);
  EXPECT_TRUE(l.corruptions.empty());
  EXPECT_EQ(j->size(), ReadAll(JournalPath(d.path(), 0)).size());
}

TEST(Journal, RejectsBadTypesAndSecondOpener) {
  TempDir d;
  JournalLoad l;
  auto j = OpenOk(d.path(), &l);
  EXPECT_EQ(j->Append(0, "x").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(j->Append(200, "x").code(), Status::Code::kInvalidArgument);
  std::unique_ptr<Journal> other;
  JournalLoad l2;
  EXPECT_EQ(Journal::Open(d.path(), JournalOptions(), &other, &l2).code(),
            Status::Code::kFailedPrecondition);
}

// Cuts the file inside the last record at every byte offset: the earlier records survive, the
// tail is cut away, and appending afterwards works.
TEST(Journal, TornTailAtEveryOffset) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(j->Append(1, Payload(i)).ok());
  }
  const std::string full = ReadAll(JournalPath(d.path(), 0));
  const size_t last = Journal::Encode(1, Payload(2)).size();
  const size_t start = full.size() - last;
  for (size_t cut = start; cut < full.size(); ++cut) {
    WriteAll(JournalPath(d.path(), 0), full.substr(0, cut));
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    ASSERT_EQ(l.records.size(), 2u) << cut;
    EXPECT_EQ(l.truncated_bytes, cut - start) << cut;
    EXPECT_TRUE(l.corruptions.empty());
    EXPECT_EQ(ReadAll(JournalPath(d.path(), 0)).size(), start) << "tail not cut at " << cut;
    ASSERT_TRUE(j->Append(1, Payload(9)).ok());
    j.reset();
    JournalLoad again;
    OpenOk(d.path(), &again);
    EXPECT_EQ(Payloads(again), (std::vector<std::string>{Payload(0), Payload(1), Payload(9)}))
        << cut;
  }
}

TEST(Journal, GarbageAndZerosAfterTheLastRecordAreCut) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    ASSERT_TRUE(j->Append(1, Payload(0)).ok());
  }
  std::string full = ReadAll(JournalPath(d.path(), 0));
  WriteAll(JournalPath(d.path(), 0), full + std::string(4096, '\0'));
  JournalLoad l;
  OpenOk(d.path(), &l);
  EXPECT_EQ(l.records.size(), 1u);
  EXPECT_EQ(l.truncated_bytes, 4096u);
}

TEST(Journal, FlippedBitInLastRecordIsCut) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(j->Append(1, Payload(i)).ok());
  }
  std::string full = ReadAll(JournalPath(d.path(), 0));
  full[full.size() - 3] ^= 0x10;
  WriteAll(JournalPath(d.path(), 0), full);
  JournalLoad l;
  OpenOk(d.path(), &l);
  EXPECT_EQ(l.records.size(), 2u);
  EXPECT_GT(l.truncated_bytes, 0u);
  EXPECT_TRUE(l.corruptions.empty());
}

// A flipped bit in a middle record is reported (never silently skipped), the records after it
// survive; with fail_on_corruption Open refuses.
TEST(Journal, FlippedBitInTheMiddleIsReported) {
  TempDir d;
  const size_t rec = Journal::Encode(1, Payload(0)).size();
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(j->Append(1, Payload(i)).ok());
  }
  const std::string clean = ReadAll(JournalPath(d.path(), 0));
  for (size_t bit_at : {size_t{0}, size_t{4}, size_t{8}, Journal::kHeaderSize + 3, rec - 1}) {
    std::string bad = clean;
    bad[2 * rec + bit_at] ^= 0x01;  // inside the third record
    WriteAll(JournalPath(d.path(), 0), bad);
    {
      JournalOptions strict;
      strict.fail_on_corruption = true;
      std::unique_ptr<Journal> j;
      JournalLoad l;
      Status s = Journal::Open(d.path(), strict, &j, &l);
      EXPECT_EQ(s.code(), Status::Code::kInternal) << bit_at;
      EXPECT_NE(s.message().find("offset " + std::to_string(2 * rec)), std::string::npos)
          << s.message();
    }
    JournalLoad l;
    OpenOk(d.path(), &l);
    EXPECT_EQ(Payloads(l),
              (std::vector<std::string>{Payload(0), Payload(1), Payload(3), Payload(4)}))
        << bit_at;
    ASSERT_EQ(l.corruptions.size(), 1u);
    EXPECT_NE(l.corruptions[0].find("offset " + std::to_string(2 * rec)), std::string::npos)
        << l.corruptions[0];
    EXPECT_EQ(l.truncated_bytes, 0u);
  }
}

TEST(Journal, CompactionSwitchesGeneration) {
  TempDir d;
  JournalOptions o;
  o.compact_threshold_bytes = 200;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l, o);
    for (int i = 0; i < 10 && !j->CompactionDue(); ++i) ASSERT_TRUE(j->Append(1, Payload(i)).ok());
    EXPECT_TRUE(j->CompactionDue());
    ASSERT_TRUE(j->Compact("SNAP-1").ok());
    EXPECT_EQ(j->generation(), 1u);
    EXPECT_EQ(j->size(), 0u);
    EXPECT_FALSE(j->CompactionDue());
    ASSERT_TRUE(j->Append(2, Payload(100)).ok());
  }
  EXPECT_EQ(Files(d.path()), (std::vector<std::string>{"LOCK", "journal-0000000000000001.log",
                                                       "snapshot-0000000000000001.snap"}));
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l, o);
    EXPECT_TRUE(l.has_snapshot);
    EXPECT_EQ(l.snapshot, "SNAP-1");
    EXPECT_EQ(l.generation, 1u);
    EXPECT_EQ(Payloads(l), std::vector<std::string>{Payload(100)});
    ASSERT_TRUE(j->Compact("SNAP-2").ok());
  }
  JournalLoad l;
  OpenOk(d.path(), &l, o);
  EXPECT_EQ(l.snapshot, "SNAP-2");
  EXPECT_TRUE(l.records.empty());
}

// The files an interrupted compaction leaves behind, at each step: the load uses the newest
// committed generation and removes the rest.
TEST(Journal, LeftoversOfInterruptedCompactions) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    ASSERT_TRUE(j->Append(1, Payload(0)).ok());
  }
  // Crash after writing the temporary snapshot and the new journal, before the rename.
  WriteAll(d.path() + "/snapshot-1.tmp", Journal::Encode(1, "partial"));
  WriteAll(JournalPath(d.path(), 1), "");
  {
    JournalLoad l;
    OpenOk(d.path(), &l);
    EXPECT_EQ(l.generation, 0u);
    EXPECT_EQ(Payloads(l), std::vector<std::string>{Payload(0)});
    EXPECT_EQ(Files(d.path()), (std::vector<std::string>{"LOCK", "journal-0000000000000000.log"}));
  }
  // Crash after the rename, before the old generation was removed.
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    ASSERT_TRUE(j->Compact("S1").ok());
  }
  WriteAll(JournalPath(d.path(), 0), Journal::Encode(1, Payload(0)));
  JournalLoad l;
  OpenOk(d.path(), &l);
  EXPECT_EQ(l.generation, 1u);
  EXPECT_EQ(l.snapshot, "S1");
  EXPECT_TRUE(l.records.empty());
  EXPECT_EQ(Files(d.path()), (std::vector<std::string>{"LOCK", "journal-0000000000000001.log",
                                                       "snapshot-0000000000000001.snap"}));
}

TEST(Journal, CorruptSnapshotFailsLoudly) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    ASSERT_TRUE(j->Compact("S1").ok());
  }
  std::string snap = d.path() + "/snapshot-0000000000000001.snap";
  std::string data = ReadAll(snap);
  data[data.size() - 1] ^= 1;
  WriteAll(snap, data);
  std::unique_ptr<Journal> j;
  JournalLoad l;
  Status s = Journal::Open(d.path(), JournalOptions(), &j, &l);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("corrupt"), std::string::npos);
}

TEST(Journal, CompactionKeepsDamagedJournalForForensics) {
  TempDir d;
  {
    JournalLoad l;
    auto j = OpenOk(d.path(), &l);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(j->Append(1, Payload(i)).ok());
  }
  std::string data = ReadAll(JournalPath(d.path(), 0));
  data[Journal::kHeaderSize + 2] ^= 4;
  WriteAll(JournalPath(d.path(), 0), data);
  JournalLoad l;
  auto j = OpenOk(d.path(), &l);
  ASSERT_EQ(l.corruptions.size(), 1u);
  ASSERT_TRUE(j->Compact("S").ok());
  EXPECT_TRUE(fs::exists(JournalPath(d.path(), 0) + ".corrupt"));
}

class JournalFaults : public ::testing::Test {
 protected:
  JournalOptions Options() {
    JournalOptions o;
    o.fs = &faults_;
    return o;
  }
  void ExpectOnDisk(const std::vector<std::string>& payloads) {
    JournalLoad l;
    std::unique_ptr<Journal> j;
    JournalOptions o;  // a fresh view through the real file system
    // The faulty journal holds the lock; read the raw records instead of opening.
    std::string data = ReadAll(JournalPath(dir_.path(), generation_));
    std::vector<std::string> got;
    size_t off = 0;
    while (off < data.size()) {
      std::string enc;
      ASSERT_GE(data.size() - off, Journal::kHeaderSize);
      uint32_t len = static_cast<uint8_t>(data[off + 4]) |
                     static_cast<uint8_t>(data[off + 5]) << 8 |
                     static_cast<uint8_t>(data[off + 6]) << 16;
      std::string payload = data.substr(off + Journal::kHeaderSize, len);
      ASSERT_EQ(data.substr(off, Journal::kHeaderSize + len),
                Journal::Encode(static_cast<uint8_t>(data[off + 8]), payload));
      got.push_back(payload);
      off += Journal::kHeaderSize + len;
    }
    EXPECT_EQ(got, payloads);
  }

  TempDir dir_;
  FaultFileSystem faults_{FileSystem::Default()};
  uint64_t generation_ = 0;
};

// ENOSPC in the middle of a write (a short write): the caller gets ResourceExhausted, the
// partial bytes are cut away, and the next load sees exactly the acknowledged records.
TEST_F(JournalFaults, DiskFullOnWrite) {
  JournalLoad l;
  auto j = OpenOk(dir_.path(), &l, Options());
  ASSERT_TRUE(j->Append(1, Payload(0)).ok());
  faults_.set_short_write_bytes(7);
  faults_.Fail(FaultFileSystem::Op::kAppend, ENOSPC, 0, 1);
  Status s = j->Append(1, Payload(1));
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  ExpectOnDisk({Payload(0)});
  ASSERT_TRUE(j->Append(1, Payload(2)).ok());
  ExpectOnDisk({Payload(0), Payload(2)});
}

// fsync fails (EIO) and the rollback truncate fails too: appends are refused until the
// rollback succeeds, then continue after the last acknowledged record.
TEST_F(JournalFaults, FailedSyncAndFailedRollback) {
  JournalLoad l;
  auto j = OpenOk(dir_.path(), &l, Options());
  ASSERT_TRUE(j->Append(1, Payload(0)).ok());
  faults_.Fail(FaultFileSystem::Op::kSync, EIO, 0, 1);
  faults_.Fail(FaultFileSystem::Op::kTruncate, EIO, 0, 2);
  EXPECT_EQ(j->Append(1, Payload(1)).code(), Status::Code::kInternal);
  Status again = j->Append(1, Payload(2));  // the retried rollback fails again
  EXPECT_EQ(again.code(), Status::Code::kInternal);
  EXPECT_NE(again.message().find("truncate"), std::string::npos) << again.message();
  ASSERT_TRUE(j->Append(1, Payload(3)).ok());
  ExpectOnDisk({Payload(0), Payload(3)});
}

TEST_F(JournalFaults, DiskFullDuringCompactionChangesNothing) {
  JournalLoad l;
  auto j = OpenOk(dir_.path(), &l, Options());
  ASSERT_TRUE(j->Append(1, Payload(0)).ok());
  auto before = Files(dir_.path());
  for (auto op : {FaultFileSystem::Op::kAppend, FaultFileSystem::Op::kSync,
                  FaultFileSystem::Op::kOpen, FaultFileSystem::Op::kRename}) {
    faults_.Heal();
    faults_.set_short_write_bytes(3);
    faults_.Fail(op, ENOSPC, 0, 1);
    Status s = j->Compact("SNAPSHOT");
    EXPECT_EQ(s.code(), Status::Code::kResourceExhausted) << static_cast<int>(op);
    EXPECT_EQ(j->generation(), 0u);
    EXPECT_EQ(Files(dir_.path()), before) << static_cast<int>(op);
  }
  faults_.Heal();
  ASSERT_TRUE(j->Append(1, Payload(1)).ok());
  ExpectOnDisk({Payload(0), Payload(1)});
}

// The directory fsync after the snapshot rename fails: nothing is acknowledged until it works.
TEST_F(JournalFaults, UnsyncedCompactionBlocksAppends) {
  JournalLoad l;
  auto j = OpenOk(dir_.path(), &l, Options());
  faults_.Fail(FaultFileSystem::Op::kSyncDir, EIO, 0, 2);
  ASSERT_TRUE(j->Compact("S").ok());
  EXPECT_EQ(j->generation(), 1u);
  EXPECT_FALSE(j->Append(1, Payload(0)).ok());
  ASSERT_TRUE(j->Append(1, Payload(1)).ok());
  generation_ = 1;
  ExpectOnDisk({Payload(1)});
}

}  // namespace
}  // namespace kiln
