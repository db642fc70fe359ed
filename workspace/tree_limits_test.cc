#include "workspace/tree_limits.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>

#include "workspace/git_repo.h"
#include "workspace/git_test_util.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;

// ---------------------------------------------------------------------------------------------
// Pure parts

TEST(FormatBytesTest, BinaryWhenExactElseOneDecimal) {
  EXPECT_EQ(FormatBytes(512), "512 bytes");
  EXPECT_EQ(FormatBytes(int64_t{512} << 20), "512 MiB");
  EXPECT_EQ(FormatBytes(int64_t{64} << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 30), "1 GiB");
  EXPECT_EQ(FormatBytes(int64_t{150} * 20000000), "3.0 GB");
  EXPECT_EQ(FormatBytes(2900000000), "2.9 GB");
  EXPECT_EQ(FormatBytes(1500), "1.5 kB");
}

TEST(ParseTreeObjectTest, ParsesEntriesAndRefusesGarbage) {
  std::string raw20(20, '\x01');
  std::string data = std::string("100644 a.txt") + '\0' + raw20 + "40000 dir" + '\0' + raw20 +
                     "160000 sub" + '\0' + raw20 + "120000 link" + '\0' + raw20;
  std::vector<TreeEntry> e;
  ASSERT_TRUE(ParseTreeObject(data, 20, &e).ok());
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].name, "a.txt");
  EXPECT_EQ(e[0].kind, TreeEntry::Kind::kBlob);
  EXPECT_EQ(e[0].id, "0101010101010101010101010101010101010101");
  EXPECT_EQ(e[1].kind, TreeEntry::Kind::kTree);
  EXPECT_EQ(e[2].kind, TreeEntry::Kind::kSubmodule);
  EXPECT_EQ(e[3].kind, TreeEntry::Kind::kBlob);

  EXPECT_FALSE(ParseTreeObject(std::string("100644 a") + '\0' + "short", 20, &e).ok());
  EXPECT_FALSE(ParseTreeObject("no-space-here", 20, &e).ok());
  EXPECT_FALSE(ParseTreeObject(std::string("777 a") + '\0' + raw20, 20, &e).ok());
}

TEST(ParseRefUpdatesTest, ParsesLinesAndRefusesMalformedOnes) {
  std::string a(40, 'a'), z(40, '0');
  std::vector<RefUpdate> u;
  ASSERT_TRUE(
      ParseRefUpdates(z + " " + a + " refs/heads/main\n" + a + " " + z + " refs/heads/x\n", &u)
          .ok());
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].new_id, a);
  EXPECT_EQ(u[1].ref, "refs/heads/x");
  EXPECT_TRUE(ParseRefUpdates("", &u).ok());
  EXPECT_TRUE(u.empty());
  EXPECT_FALSE(ParseRefUpdates("zz " + a + " refs/heads/main\n", &u).ok());
  EXPECT_FALSE(ParseRefUpdates(a + " " + a + "\n", &u).ok());
}

// An in-memory object store: ids are made-up hex strings. Counts what is read.
class FakeObjects : public ObjectSource {
 public:
  std::string Id(int n) {
    std::ostringstream o;
    o << std::hex << n;
    std::string s = o.str();
    return std::string(40 - s.size(), '0') + s;
  }
  std::string Blob(int n, int64_t size) {
    blobs[Id(n)] = size;
    return Id(n);
  }
  std::string Tree(int n, std::vector<TreeEntry> entries) {
    trees[Id(n)] = std::move(entries);
    return Id(n);
  }
  Status ReadTrees(const std::vector<std::string>& ids,
                   std::map<std::string, std::vector<TreeEntry>>* out) override {
    ++calls;
    for (const auto& id : ids) {
      ++reads;
      if (!trees.count(id)) return Status::NotFound("tree " + id);
      (*out)[id] = trees[id];
    }
    return Status::Ok();
  }
  Status BlobSizes(const std::vector<std::string>& ids,
                   std::map<std::string, int64_t>* out) override {
    ++calls;
    for (const auto& id : ids) {
      ++reads;
      if (!blobs.count(id)) return Status::NotFound("blob " + id);
      (*out)[id] = blobs[id];
    }
    return Status::Ok();
  }
  Status TreeOf(const std::string& id, std::string* tree) override {
    auto it = commits.find(id);
    if (it == commits.end()) return Status::NotFound("commit " + id);
    *tree = it->second;
    return Status::Ok();
  }
  std::map<std::string, std::vector<TreeEntry>> trees;
  std::map<std::string, int64_t> blobs;
  std::map<std::string, std::string> commits;
  int calls = 0, reads = 0;
};

std::vector<TreeEntry> Repeat(TreeEntry::Kind kind, const std::string& id, int n) {
  std::vector<TreeEntry> out;
  for (int i = 0; i < n; ++i) out.push_back({kind, "e" + std::to_string(i), id});
  return out;
}

TEST(TreeLimitCheckerTest, ExponentialBombIsRefusedAfterReadingEachDistinctTreeOnce) {
  FakeObjects o;
  std::string t = o.Tree(1, Repeat(TreeEntry::Kind::kBlob, o.Blob(1000, 1000), 100));
  for (int level = 2; level <= 40; ++level)  // 100^40 files, 10^83 bytes
    t = o.Tree(level, Repeat(TreeEntry::Kind::kTree, t, 100));
  TreeUsage u;
  Status s = TreeLimitChecker(TreeLimits(), &o).Check(t, "tree of refs/heads/x", &u);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("push.max_files"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("tree of refs/heads/x has at least "), 0u) << s.message();
  // The walk stopped as soon as the lower bound passed the limit: 3 levels read, not 40.
  EXPECT_LE(o.reads, 4) << s.message();
  EXPECT_GT(u.files, TreeLimits().max_files);
}

TEST(TreeLimitCheckerTest, RepeatedBlobBombIsRefusedOnBytes) {
  FakeObjects o;
  // The repository: one 20 MB blob named 150 times (2.9 GB... here 3.0 GB).
  std::string t = o.Tree(1, Repeat(TreeEntry::Kind::kBlob, o.Blob(2, 20000000), 150));
  TreeUsage u;
  Status s = TreeLimitChecker(TreeLimits(), &o).Check(t, "tree of refs/heads/x", &u);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "tree of refs/heads/x is 3.0 GB when checked out; the limit is 512 MiB "
            "(push.max_tree_bytes); remove large or repeated files and push again");
  EXPECT_EQ(o.reads, 2);  // one tree, one blob size
}

TEST(TreeLimitCheckerTest, SharedSubtreesAreReadOnceAndCountedEverywhere) {
  FakeObjects o;
  std::string sub = o.Tree(1, Repeat(TreeEntry::Kind::kBlob, o.Blob(9, 10), 3));
  std::vector<TreeEntry> root = Repeat(TreeEntry::Kind::kTree, sub, 4);
  root.push_back({TreeEntry::Kind::kSubmodule, "vendored", o.Id(77)});
  std::string t = o.Tree(2, root);
  TreeUsage u;
  ASSERT_TRUE(TreeLimitChecker(TreeLimits(), &o).Check(t, "tree", &u).ok());
  EXPECT_EQ(u.bytes, 4 * 3 * 10);
  EXPECT_EQ(u.files, 4 + 4 * 3 + 1);
  EXPECT_EQ(u.largest_file, 10);
  EXPECT_EQ(u.depth, 1);
  EXPECT_EQ(o.reads, 3);
}

TEST(TreeLimitCheckerTest, LimitsAreInclusive) {
  FakeObjects o;
  std::string t = o.Tree(1, {{TreeEntry::Kind::kBlob, "a", o.Blob(2, 600)},
                             {TreeEntry::Kind::kBlob, "b", o.Blob(3, 400)}});
  TreeLimits l;
  l.max_tree_bytes = 1000;
  l.max_files = 2;
  l.max_file_bytes = 600;
  EXPECT_TRUE(TreeLimitChecker(l, &o).Check(t, "tree", nullptr).ok());
  l.max_tree_bytes = 999;
  EXPECT_NE(TreeLimitChecker(l, &o).Check(t, "tree", nullptr).message().find("push.max_tree_bytes"),
            std::string::npos);
  l.max_tree_bytes = 1000;
  l.max_files = 1;
  EXPECT_NE(TreeLimitChecker(l, &o).Check(t, "tree", nullptr).message().find("push.max_files"),
            std::string::npos);
  l.max_files = 2;
  l.max_file_bytes = 599;
  Status s = TreeLimitChecker(l, &o).Check(t, "tree", nullptr);
  EXPECT_NE(s.message().find("push.max_file_bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s.message();
}

TEST(TreeLimitCheckerTest, DeepNestingIsRefusedWithoutDeepRecursion) {
  FakeObjects o;
  std::string t = o.Tree(1, {{TreeEntry::Kind::kBlob, "f", o.Blob(999999, 1)}});
  for (int i = 2; i <= 5000; ++i) t = o.Tree(i, {{TreeEntry::Kind::kTree, "d", t}});
  TreeLimits l;
  l.max_depth = 20;
  Status s = TreeLimitChecker(l, &o).Check(t, "tree", nullptr);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(s.message().find("more than 20 levels deep"), std::string::npos) << s.message();
  EXPECT_LE(o.reads, 30);
}

TEST(CheckPushTest, RefCountAndEveryUpdatedRefsTree) {
  FakeObjects o;
  std::string small = o.Tree(1, {{TreeEntry::Kind::kBlob, "a", o.Blob(2, 10)}});
  std::string big = o.Tree(3, Repeat(TreeEntry::Kind::kBlob, o.Blob(4, 1000), 10));
  std::string c1(40, 'c'), c2(40, 'd'), z(40, '0');
  o.commits[c1] = small;
  o.commits[c2] = big;
  TreeLimits l;
  l.max_tree_bytes = 5000;
  l.max_refs_per_push = 2;
  EXPECT_TRUE(CheckPush({{z, c1, "refs/heads/a"}, {c2, z, "refs/heads/gone"}}, l, &o).ok());
  Status s = CheckPush({{z, c1, "refs/heads/a"}, {z, c2, "refs/heads/b"}}, l, &o);
  EXPECT_EQ(s.message().find("tree of refs/heads/b is 10.0 kB when checked out"), 0u)
      << s.message();
  s = CheckPush({{z, c1, "refs/heads/a"}, {z, c1, "refs/heads/b"}, {z, c1, "refs/heads/c"}}, l, &o);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "this push updates 3 refs; the limit is 2 per push (push.max_refs_per_push); push "
            "fewer branches at a time");
}

// ---------------------------------------------------------------------------------------------
// Through real git objects (git mktree, git hash-object -w --stdin): the GitObjectSource.

class GitTreeLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(GitRepo::Open(tmp_.path() + "/repo.git", &repo_).ok());
    source_ = std::make_unique<GitObjectSource>(
        [this](GitCommand c, GitResult* r) { return repo_->RunGit(std::move(c), r); });
  }
  std::string Git(std::vector<std::string> args, const std::string& in = "") {
    GitCommand cmd;
    cmd.args = std::move(args);
    cmd.stdin_data = in;
    GitResult r;
    Status s = repo_->RunGit(cmd, &r);
    EXPECT_TRUE(s.ok() && r.exit_code == 0) << s.ToString() << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  // Content goes through a pipe (stored compressed: no large file on disk).
  std::string Blob(const std::string& content) {
    return Git({"hash-object", "-w", "--stdin"}, content);
  }
  // entries: (mode, id, name)
  std::string Tree(const std::vector<std::tuple<std::string, std::string, std::string>>& entries) {
    std::string in;
    for (const auto& [mode, id, name] : entries)
      in += mode + (mode == "040000" ? " tree " : " blob ") + id + "\t" + name + "\n";
    return Git({"mktree"}, in);
  }
  std::vector<std::tuple<std::string, std::string, std::string>> Many(const std::string& mode,
                                                                      const std::string& id,
                                                                      int n) {
    std::vector<std::tuple<std::string, std::string, std::string>> out;
    for (int i = 0; i < n; ++i) out.emplace_back(mode, id, "f" + std::to_string(i));
    return out;
  }
  Status Check(const std::string& tree, TreeUsage* u, const TreeLimits& l = TreeLimits()) {
    return TreeLimitChecker(l, source_.get()).Check(tree, "tree of refs/heads/bomb", u);
  }

  TempDir tmp_;
  std::unique_ptr<GitRepo> repo_;
  std::unique_ptr<GitObjectSource> source_;
};

TEST_F(GitTreeLimitsTest, RepeatedTwentyMegabyteBlobIsRefused) {
  std::string b = Blob(std::string(20000000, '\0'));
  std::string t = Tree(Many("100644", b, 150));
  TreeUsage u;
  Status s = Check(t, &u);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message().find("tree of refs/heads/bomb is 3.0 GB when checked out; the limit is "
                             "512 MiB (push.max_tree_bytes)"),
            0u)
      << s.message();
  EXPECT_EQ(u.git_runs, 2);  // one cat-file --batch, one --batch-check
}

TEST_F(GitTreeLimitsTest, NestedExponentialBombFinishesQuicklyWithARefusal) {
  std::string t = Tree(Many("100644", Blob(std::string(1000, 'x')), 100));
  for (int level = 0; level < 12; ++level) t = Tree(Many("040000", t, 100));
  TreeUsage u;
  Status s = Check(t, &u);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("push.max_files"), std::string::npos) << s.message();
  EXPECT_LE(u.objects_read, 5);
  EXPECT_LE(u.git_runs, 5);
}

TEST_F(GitTreeLimitsTest, EmptyDirectoryBombCountsEntries) {
  std::string empty = Tree({});
  std::string t = empty;
  for (int level = 0; level < 8; ++level) t = Tree(Many("040000", t, 50));
  Status s = Check(t, nullptr);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("files and directories"), std::string::npos) << s.message();
}

TEST_F(GitTreeLimitsTest, FileCountBombIsRefused) {
  TreeLimits l;
  l.max_files = 10000;  // the default (100000) works the same, only slower to build
  std::string t = Tree(Many("100644", Blob(""), 10001));
  TreeUsage u;
  Status s = Check(t, &u, l);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(),
            "tree of refs/heads/bomb has at least 10001 files and directories when checked out; "
            "the limit is 10000 (push.max_files); remove generated or repeated files and push "
            "again");
  EXPECT_EQ(u.git_runs, 1);  // refused before asking for any blob size
}

TEST_F(GitTreeLimitsTest, SingleBigFileIsRefusedWithItsPath) {
  std::string big = Blob(std::string((int64_t{64} << 20) + 1, '\0'));
  std::string sub = Tree({{"100644", big, "weights.bin"}});
  std::string t = Tree({{"040000", sub, "data"}, {"100644", Blob("x"), "main.go"}});
  Status s = Check(t, nullptr);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message().find("tree of refs/heads/bomb contains a file of 67.1 MB ('data/"
                             "weights.bin'); the limit is 64 MiB per file (push.max_file_bytes)"),
            0u)
      << s.message();
}

TEST_F(GitTreeLimitsTest, LegalTreeJustUnderTheLimitsIsAccepted) {
  TreeLimits l;
  l.max_tree_bytes = 3 * 100000;
  l.max_file_bytes = 100000;
  l.max_files = 7;
  std::string b = Blob(std::string(100000, 'a'));
  std::string sub = Tree({{"100644", b, "one"}, {"100755", Blob("#!/bin/sh\n"), "run.sh"}});
  std::string t = Tree({{"040000", sub, "a"}, {"040000", sub, "b"}, {"100644", b, "top"}});
  TreeUsage u;
  // 10 bytes of run.sh twice push it over by 20: allow exactly that.
  l.max_tree_bytes += 20;
  Status s = Check(t, &u, l);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(u.bytes, 300020);
  EXPECT_EQ(u.files, 7);
  EXPECT_EQ(u.largest_file, 100000);
  l.max_tree_bytes -= 1;
  EXPECT_EQ(Check(t, &u, l).code(), Status::Code::kResourceExhausted);
}

TEST_F(GitTreeLimitsTest, TreeOfACommitAndMissingObjects) {
  std::string t = Tree({{"100644", Blob("hello\n"), "a"}});
  std::string c = Git({"-c", "user.name=a", "-c", "user.email=a@b", "commit-tree", t, "-m", "m"});
  std::string tree;
  ASSERT_TRUE(source_->TreeOf(c, &tree).ok());
  EXPECT_EQ(tree, t);
  EXPECT_EQ(source_->TreeOf(std::string(40, 'e'), &tree).code(), Status::Code::kNotFound);
  EXPECT_EQ(Check(std::string(40, 'e'), nullptr).code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace kiln
