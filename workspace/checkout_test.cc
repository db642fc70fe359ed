#include "workspace/checkout.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "workspace/git_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::ScratchClone;
using testing::TempDir;
using testing::WriteFile;

struct StatStamp {
  ino_t ino;
  timespec mtime, ctime;
};

StatStamp Stamp(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return {st.st_ino, st.st_mtim, st.st_ctim};
}

bool SameStamp(const StatStamp& a, const StatStamp& b) {
  return a.ino == b.ino && a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec &&
         a.ctime.tv_sec == b.ctime.tv_sec && a.ctime.tv_nsec == b.ctime.tv_nsec;
}

// Sorted relative paths of everything under `dir` (dirs with a trailing '/').
std::vector<std::string> ListTree(const std::string& dir) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    std::string rel = fs::relative(it->path(), dir).string();
    out.push_back(it->is_directory() && !it->is_symlink() ? rel + "/" : rel);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool IsExec(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (st.st_mode & 0100);
}

class CheckoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string repo_path = tmp_.path() + "/domains/d/repo.git";
    ASSERT_TRUE(GitRepo::Open(repo_path, &repo_).ok());
    clone_ = std::make_unique<ScratchClone>(tmp_.path() + "/scratch", repo_path);
    ws_ = tmp_.path() + "/domains/d/candidates/c1/src";
  }

  CheckoutStats Update(const std::string& id) {
    CheckoutStats stats;
    Status s = Checkout::Update(*repo_, id, ws_, &stats);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return stats;
  }

  // Commits in the scratch clone and pushes it to the bare repository.
  std::string Commit(const std::string& message) {
    std::string id = clone_->Commit(message);
    clone_->Push("scratch", /*force=*/true);
    return id;
  }

  TempDir tmp_;
  std::unique_ptr<GitRepo> repo_;
  std::unique_ptr<ScratchClone> clone_;
  std::string ws_;
};

TEST_F(CheckoutTest, WritesOnlyChangedFilesAndRemovesEverythingElse) {
  clone_->Write("keep.go", "package keep\n");
  clone_->Write("change.go", "v1\n");
  clone_->Write("gone/old.go", "old\n");
  clone_->Write("run.sh", "#!/bin/sh\n", /*exec=*/true);
  clone_->Write(".gitignore", "*.o\n");
  std::string c1 = Commit("one");
  CheckoutStats s1 = Update(c1);
  EXPECT_TRUE(s1.full_reset);  // first checkout
  EXPECT_EQ(s1.files_written, 5);
  EXPECT_EQ(ReadFile(ws_ + "/change.go"), "v1\n");
  EXPECT_TRUE(IsExec(ws_ + "/run.sh"));
  EXPECT_FALSE(IsExec(ws_ + "/keep.go"));
  std::string id;
  ASSERT_TRUE(Checkout::CheckedOut(ws_, &id).ok());
  EXPECT_EQ(id, c1);

  StatStamp keep = Stamp(ws_ + "/keep.go");
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  // Build outputs: untracked, ignored, nested.
  WriteFile(ws_ + "/junk.txt", "junk");
  WriteFile(ws_ + "/main.o", "obj");
  WriteFile(ws_ + "/out/bin/app", "bin");
  WriteFile(ws_ + "/gone/extra.o", "obj");

  clone_->Write("change.go", "v2\n");
  clone_->Remove("gone");
  clone_->Write("new/added.go", "added\n");
  std::string c2 = Commit("two");
  CheckoutStats s2 = Update(c2);
  EXPECT_FALSE(s2.full_reset);
  EXPECT_EQ(s2.files_written, 3);  // change.go, gone/old.go, new/added.go
  EXPECT_TRUE(SameStamp(keep, Stamp(ws_ + "/keep.go"))) << "unchanged file was rewritten";
  EXPECT_EQ(ReadFile(ws_ + "/change.go"), "v2\n");
  EXPECT_EQ(ListTree(ws_), (std::vector<std::string>{".gitignore", "change.go", "keep.go", "new/",
                                                     "new/added.go", "run.sh"}));
  ASSERT_TRUE(Checkout::CheckedOut(ws_, &id).ok());
  EXPECT_EQ(id, c2);
}

TEST_F(CheckoutTest, RestoresTrackedFilesABuildModified) {
  clone_->Write("a.go", "a\n");
  clone_->Write("b.go", "b\n");
  std::string c1 = Commit("one");
  Update(c1);
  WriteFile(ws_ + "/a.go", "modified by a build step\n");
  fs::remove(ws_ + "/b.go");
  clone_->Write("c.go", "c\n");
  std::string c2 = Commit("two");
  Update(c2);
  EXPECT_EQ(ReadFile(ws_ + "/a.go"), "a\n");
  EXPECT_EQ(ReadFile(ws_ + "/b.go"), "b\n");
  EXPECT_EQ(ReadFile(ws_ + "/c.go"), "c\n");
  // Same id again (no tree change) still restores.
  WriteFile(ws_ + "/a.go", "again\n");
  CheckoutStats s = Update(c2);
  EXPECT_EQ(ReadFile(ws_ + "/a.go"), "a\n");
  EXPECT_EQ(s.files_written, 0);
}

// A layered build gives the workspace to the build user (lchown: every ctime changes) before it
// compiles. The next update must still write only the files whose content changed.
TEST_F(CheckoutTest, ChangedCtimeAloneDoesNotRewriteAFile) {
  for (int i = 0; i < 20; ++i) clone_->Write("pkg/f" + std::to_string(i) + ".go", "package pkg\n");
  clone_->Write("change.go", "v1\n");
  std::string c1 = Commit("one");
  Update(c1);
  // git compares whole seconds of ctime (built without USE_NSEC): make the change visible.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  for (const auto& e : fs::recursive_directory_iterator(ws_)) {  // ctime only: the same mode again
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    if (S_ISREG(st.st_mode)) {
      ASSERT_EQ(::chmod(e.path().c_str(), st.st_mode & 07777), 0);
    }
  }
  StatStamp before = Stamp(ws_ + "/pkg/f7.go");
  clone_->Write("change.go", "v2\n");
  std::string c2 = Commit("two");
  CheckoutStats s = Update(c2);
  EXPECT_FALSE(s.full_reset);
  StatStamp after = Stamp(ws_ + "/pkg/f7.go");
  EXPECT_EQ(before.ino, after.ino) << "unchanged file was rewritten";
  EXPECT_EQ(before.mtime.tv_sec, after.mtime.tv_sec);
  EXPECT_EQ(before.mtime.tv_nsec, after.mtime.tv_nsec);
  EXPECT_EQ(ReadFile(ws_ + "/change.go"), "v2\n");
  // Converged: the ctime-only change is recorded, so a third update rewrites nothing either.
  clone_->Write("change.go", "v3\n");
  Update(Commit("three"));
  EXPECT_EQ(Stamp(ws_ + "/pkg/f7.go").ino, before.ino);
  EXPECT_EQ(ReadFile(ws_ + "/change.go"), "v3\n");
}

// A build that edits a tracked file and puts its size and mtime back is still undone: the edit
// moved the ctime, so the file is re-hashed and rewritten.
TEST_F(CheckoutTest, EditWithRestoredMtimeIsUndone) {
  clone_->Write("a.go", "package a // original\n");
  clone_->Write("b.go", "b1\n");
  std::string c1 = Commit("one");
  Update(c1);
  const std::string a = ws_ + "/a.go";
  struct stat st {};
  ASSERT_EQ(::lstat(a.c_str(), &st), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a ctime git can tell apart
  WriteFile(a, "package a // tampered\n");                       // same size
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, a.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
  clone_->Write("b.go", "b2\n");
  Update(Commit("two"));
  EXPECT_EQ(ReadFile(a), "package a // original\n");
  EXPECT_EQ(ReadFile(ws_ + "/b.go"), "b2\n");
}

TEST_F(CheckoutTest, FollowsForcePushThatRewindsBranch) {
  clone_->Write("f", "1\n");
  std::string c1 = Commit("one");
  clone_->Push("c1");
  clone_->Write("f", "2\n");
  clone_->Write("g", "g\n");
  std::string c2 = Commit("two");
  clone_->Push("c1");
  ResolvedSource src;
  ASSERT_TRUE(repo_->Resolve(std::nullopt, std::nullopt, "c1", &src).ok());
  ASSERT_EQ(src.commit, c2);
  Update(src.commit);
  EXPECT_EQ(ReadFile(ws_ + "/f"), "2\n");

  clone_->Git({"reset", "-q", "--hard", c1});
  clone_->Push("c1", /*force=*/true);
  ASSERT_TRUE(repo_->Resolve(std::nullopt, std::nullopt, "c1", &src).ok());
  ASSERT_EQ(src.commit, c1);
  CheckoutStats s = Update(src.commit);
  EXPECT_FALSE(s.full_reset);
  EXPECT_EQ(ReadFile(ws_ + "/f"), "1\n");
  EXPECT_FALSE(fs::exists(ws_ + "/g"));
}

TEST_F(CheckoutTest, AcceptsTreeIds) {
  clone_->Write("f", "1\n");
  Commit("one");
  std::string tree = clone_->Git({"rev-parse", "HEAD^{tree}"});
  tree.pop_back();
  Update(tree);
  EXPECT_EQ(ReadFile(ws_ + "/f"), "1\n");
}

TEST_F(CheckoutTest, RecoversFromInterruptedState) {
  clone_->Write("a", "a1\n");
  clone_->Write("b", "b1\n");
  std::string c1 = Commit("one");
  Update(c1);
  clone_->Write("a", "a2\n");
  std::string c2 = Commit("two");
  WriteFile(ws_ + "/junk", "x");

  // Index deleted.
  ASSERT_TRUE(fs::remove(Checkout::IndexPath(ws_)));
  CheckoutStats s = Update(c2);
  EXPECT_TRUE(s.full_reset);
  EXPECT_EQ(ListTree(ws_), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ReadFile(ws_ + "/a"), "a2\n");

  // Index corrupt, a stale index.lock from a killed git, junk around.
  WriteFile(Checkout::IndexPath(ws_), "garbage, not an index");
  WriteFile(Checkout::IndexPath(ws_) + ".lock", "");
  WriteFile(ws_ + "/junk", "x");
  s = Update(c1);
  EXPECT_TRUE(s.full_reset);
  EXPECT_EQ(ListTree(ws_), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ReadFile(ws_ + "/a"), "a1\n");

  // State file missing (Update interrupted after it was removed): full reset, still correct.
  fs::remove(fs::path(ws_).parent_path() / "checked-out");
  std::string id;
  EXPECT_EQ(Checkout::CheckedOut(ws_, &id).code(), Status::Code::kNotFound);
  s = Update(c2);
  EXPECT_TRUE(s.full_reset);
  EXPECT_EQ(ReadFile(ws_ + "/a"), "a2\n");
  // And the next update is incremental again.
  s = Update(c1);
  EXPECT_FALSE(s.full_reset);
  EXPECT_EQ(ReadFile(ws_ + "/a"), "a1\n");
}

// Delegates to the real runner, but fails the first `fail_count` invocations of `verb`.
class FaultyRunner : public GitRunner {
 public:
  FaultyRunner(std::string verb, int fail_count) : verb_(std::move(verb)), left_(fail_count) {}
  Status Run(const GitCommand& cmd, GitResult* result) override {
    if (!cmd.args.empty() && cmd.args[0] == verb_ && left_ > 0) {
      --left_;
      *result = GitResult();
      result->exit_code = 128;
      result->err = "fatal: injected failure\n";
      return Status::Ok();
    }
    return DefaultGitRunner()->Run(cmd, result);
  }

 private:
  std::string verb_;
  int left_;
};

TEST_F(CheckoutTest, FailedIncrementalStepFallsBackToFullReset) {
  clone_->Write("a", "a1\n");
  clone_->Write("b", "b1\n");
  std::string c1 = Commit("one");
  Update(c1);
  clone_->Write("a", "a2\n");
  std::string c2 = Commit("two");
  WriteFile(ws_ + "/junk", "x");

  for (const char* verb : {"clean", "read-tree", "ls-files"}) {
    FaultyRunner faulty(verb, 1);
    std::unique_ptr<GitRepo> repo;
    ASSERT_TRUE(GitRepo::Open(repo_->path(), &faulty, &repo).ok());
    CheckoutStats stats;
    std::string target = std::string(verb) == "read-tree" ? c1 : c2;
    ASSERT_TRUE(Checkout::Update(*repo, target, ws_, &stats).ok()) << verb;
    EXPECT_TRUE(stats.full_reset) << verb;
    EXPECT_EQ(ListTree(ws_), (std::vector<std::string>{"a", "b"})) << verb;
    EXPECT_EQ(ReadFile(ws_ + "/a"), target == c1 ? "a1\n" : "a2\n") << verb;
  }

  // Both attempts fail: an error, and the next good Update recovers.
  FaultyRunner broken("read-tree", 2);
  std::unique_ptr<GitRepo> repo;
  ASSERT_TRUE(GitRepo::Open(repo_->path(), &broken, &repo).ok());
  Status s = Checkout::Update(*repo, c1, ws_, nullptr);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_NE(s.message().find("injected failure"), std::string::npos) << s.message();
  std::string id;
  EXPECT_EQ(Checkout::CheckedOut(ws_, &id).code(), Status::Code::kNotFound);
  CheckoutStats stats = Update(c1);
  EXPECT_TRUE(stats.full_reset);
  EXPECT_EQ(ReadFile(ws_ + "/a"), "a1\n");
}

TEST_F(CheckoutTest, SymlinksAreCheckedOutAsLinksAndNeverWrittenThrough) {
  TempDir outside;
  clone_->Symlink("evil", outside.path());
  clone_->Symlink("rel", "../../../../../../etc");
  clone_->Write("f", "1\n");
  std::string c1 = Commit("one");
  Update(c1);
  ASSERT_TRUE(fs::is_symlink(ws_ + "/evil"));
  EXPECT_EQ(fs::read_symlink(ws_ + "/evil"), outside.path());

  // Next tree turns the symlink into a directory with a file in it.
  clone_->Remove("evil");
  clone_->Write("evil/y", "payload\n");
  // A build left an untracked symlink where the next tree puts a directory.
  fs::create_symlink(outside.path(), ws_ + "/later");
  clone_->Write("later/z", "payload\n");
  std::string c2 = Commit("two");
  Update(c2);
  EXPECT_FALSE(fs::is_symlink(ws_ + "/evil"));
  EXPECT_EQ(ReadFile(ws_ + "/evil/y"), "payload\n");
  EXPECT_FALSE(fs::is_symlink(ws_ + "/later"));
  EXPECT_EQ(ReadFile(ws_ + "/later/z"), "payload\n");
  EXPECT_TRUE(fs::is_empty(outside.path())) << "checkout wrote outside the workspace";
}

TEST_F(CheckoutTest, RejectsBadInput) {
  clone_->Write("f", "1\n");
  std::string c1 = Commit("one");
  EXPECT_EQ(Checkout::Update(*repo_, c1.substr(0, 8), ws_, nullptr).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Checkout::Update(*repo_, "--output=/tmp/x", ws_, nullptr).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Checkout::Update(*repo_, c1, "relative/src", nullptr).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Checkout::Update(*repo_, std::string(40, 'a'), ws_, nullptr).code(),
            Status::Code::kNotFound);
}

TEST_F(CheckoutTest, TimingOneFileChangeIn200Files) {
  // ~26k lines over 200 files in 10 directories.
  for (int i = 0; i < 200; ++i) {
    std::string body;
    for (int l = 0; l < 130; ++l)
      body += "func f" + std::to_string(i) + "_" + std::to_string(l) + "() int { return " +
              std::to_string(l) + " }\n";
    clone_->Write("pkg" + std::to_string(i % 10) + "/file" + std::to_string(i) + ".go", body);
  }
  std::string c1 = Commit("one");
  CheckoutStats first = Update(c1);
  clone_->Write("pkg3/file33.go", "package changed\n");
  std::string c2 = Commit("two");
  auto t0 = std::chrono::steady_clock::now();
  CheckoutStats s = Update(c2);
  auto ms =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count() /
      1000.0;
  EXPECT_FALSE(s.full_reset);
  EXPECT_EQ(s.files_written, 1);
  EXPECT_EQ(ReadFile(ws_ + "/pkg3/file33.go"), "package changed\n");
  std::cout << "[timing] full checkout of 200 files: " << first.elapsed_ms
            << " ms; one-file update: " << ms << " ms\n";
  EXPECT_LT(ms, 2000);
}

// --- Issue 15: a tree over the limits is refused before anything is written -----------------

// Inserts a commit whose tree names one 20 MB blob (zeros, piped: stored compressed) 150 times
// straight into the bare repository, as a push from before the limits existed would have.
std::string InsertBombCommit(const GitRepo& repo) {
  auto git = [&](std::vector<std::string> args, const std::string& in) {
    GitCommand cmd;
    cmd.args = std::move(args);
    cmd.stdin_data = in;
    GitResult r;
    Status s = repo.RunGit(cmd, &r);
    EXPECT_TRUE(s.ok() && r.exit_code == 0) << s.ToString() << r.err;
    return r.out.substr(0, r.out.find('\n'));
  };
  std::string blob = git({"hash-object", "-w", "--stdin"}, std::string(20000000, '\0'));
  std::string entries;
  for (int i = 0; i < 150; ++i)
    entries += "100644 blob " + blob + "\tcopy" + std::to_string(i) + "\n";
  std::string tree = git({"mktree"}, entries);
  return git(
      {"-c", "user.name=a", "-c", "user.email=a@kiln.invalid", "commit-tree", tree, "-m", "bomb"},
      "");
}

TEST_F(CheckoutTest, BombCommitIsRefusedWithoutWritingAFile) {
  std::string bomb = InsertBombCommit(*repo_);
  Status s = Checkout::Update(*repo_, bomb, ws_, nullptr);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(),
            "tree of " + bomb.substr(0, 12) +
                " is 3.0 GB when checked out; the limit is 512 MiB "
                "(push.max_tree_bytes); remove large or repeated files and push again");
  EXPECT_TRUE(ListTree(ws_).empty());
  EXPECT_FALSE(fs::exists(Checkout::IndexPath(ws_)));
  std::string id;
  EXPECT_EQ(Checkout::CheckedOut(ws_, &id).code(), Status::Code::kNotFound);
}

// Issue 18: the resolve step's tree is used as given (no git rev-parse); the limits still hold.
TEST_F(CheckoutTest, KnownTreeIsCheckedOutAndStillHeldToTheLimits) {
  auto git = [&](std::vector<std::string> args, const std::string& in) {
    GitCommand cmd;
    cmd.args = std::move(args);
    cmd.stdin_data = in;
    GitResult r;
    Status s = repo_->RunGit(cmd, &r);
    EXPECT_TRUE(s.ok() && r.exit_code == 0) << s.ToString() << r.err;
    return r.out.substr(0, r.out.find('\n'));
  };
  clone_->Write("main.go", "package main\n");
  std::string c1 = Commit("one");
  Update(c1);
  clone_->Write("a.go", "a\n");
  std::string c2 = Commit("two");
  const std::string t2 = git({"rev-parse", c2 + "^{tree}"}, "");
  ASSERT_EQ(t2.size(), 40u);
  ASSERT_TRUE(Checkout::Update(*repo_, c2, ws_, nullptr, t2).ok());
  EXPECT_EQ(ReadFile(ws_ + "/a.go"), "a\n");
  std::string id;
  ASSERT_TRUE(Checkout::CheckedOut(ws_, &id).ok());
  EXPECT_EQ(id, c2);
  // Trusted, not derived again: given c1's tree for c2, c1's files are what is checked out.
  const std::string t1 = git({"rev-parse", c1 + "^{tree}"}, "");
  ASSERT_TRUE(Checkout::Update(*repo_, c2, ws_, nullptr, t1).ok());
  EXPECT_FALSE(fs::exists(ws_ + "/a.go"));
  // A malformed tree id is refused; a tree over the limits too, leaving c1's checkout complete.
  EXPECT_EQ(Checkout::Update(*repo_, c2, ws_, nullptr, "HEAD").code(),
            Status::Code::kInvalidArgument);
  TreeLimits limits;
  limits.max_files = 1;
  repo_->set_tree_limits(limits);
  WriteFile(ws_ + "/untracked.o", "x");
  Status s = Checkout::Update(*repo_, c2, ws_, nullptr, t2);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_EQ(ReadFile(ws_ + "/main.go"), "package main\n");
  EXPECT_FALSE(fs::exists(ws_ + "/a.go"));
  ASSERT_TRUE(Checkout::CheckedOut(ws_, &id).ok());
  EXPECT_EQ(id, c2);  // the last completed Update (with c1's tree) stays recorded
}

TEST_F(CheckoutTest, RefusedTreeLeavesThePreviousCheckoutInPlace) {
  clone_->Write("main.go", "package main\n");
  std::string c1 = Commit("one");
  Update(c1);
  std::vector<std::string> before = ListTree(ws_);
  StatStamp main_go = Stamp(ws_ + "/main.go");

  TreeLimits limits;
  limits.max_files = 2;
  repo_->set_tree_limits(limits);
  clone_->Write("a.go", "a\n");
  clone_->Write("b.go", "b\n");
  std::string c2 = Commit("three files");
  Status s = Checkout::Update(*repo_, c2, ws_, nullptr);
  ASSERT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("(push.max_files)"), std::string::npos) << s.message();
  EXPECT_EQ(ListTree(ws_), before);
  EXPECT_TRUE(SameStamp(Stamp(ws_ + "/main.go"), main_go));
  std::string id;
  ASSERT_TRUE(Checkout::CheckedOut(ws_, &id).ok());
  EXPECT_EQ(id, c1);

  limits.max_files = 3;  // inclusive: exactly at the limit is fine
  repo_->set_tree_limits(limits);
  Update(c2);
  EXPECT_EQ(ReadFile(ws_ + "/b.go"), "b\n");
}

}  // namespace
}  // namespace kiln
