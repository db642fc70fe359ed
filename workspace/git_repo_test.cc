#include "workspace/git_repo.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include "workspace/git_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::ScratchClone;
using testing::TempDir;

// Delegates to the real runner and records every argv.
class RecordingRunner : public GitRunner {
 public:
  Status Run(const GitCommand& cmd, GitResult* result) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      calls_.push_back(cmd.args);
    }
    return DefaultGitRunner()->Run(cmd, result);
  }
  std::vector<std::vector<std::string>> calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    calls_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<std::string>> calls_;
};

std::string Trim(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string ConfigValue(const GitRepo& repo, const std::string& key) {
  GitCommand cmd;
  cmd.args = {"config", "--get", key};
  GitResult r;
  EXPECT_TRUE(repo.RunGit(cmd, &r).ok());
  return Trim(r.out);
}

class GitRepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_path_ = tmp_.path() + "/domains/d1/repo.git";
    ASSERT_TRUE(GitRepo::Open(repo_path_, &runner_, &repo_).ok());
    clone_ = std::make_unique<ScratchClone>(tmp_.path() + "/scratch", repo_path_);
  }

  TempDir tmp_;
  RecordingRunner runner_;
  std::string repo_path_;
  std::unique_ptr<GitRepo> repo_;
  std::unique_ptr<ScratchClone> clone_;
};

TEST_F(GitRepoTest, OpenCreatesBareRepoWithKilnConfig) {
  EXPECT_TRUE(fs::exists(repo_path_ + "/HEAD"));
  EXPECT_EQ(ConfigValue(*repo_, "core.bare"), "true");
  EXPECT_EQ(ConfigValue(*repo_, "receive.fsckObjects"), "true");
  EXPECT_EQ(ConfigValue(*repo_, "transfer.fsckObjects"), "true");
  EXPECT_EQ(ConfigValue(*repo_, "core.logAllRefUpdates"), "false");
  EXPECT_EQ(ConfigValue(*repo_, "gc.auto"), "0");
  EXPECT_EQ(ConfigValue(*repo_, "uploadpack.allowReachableSHA1InWant"), "false");
  EXPECT_EQ(ConfigValue(*repo_, "receive.denyNonFastForwards"), "false");
  EXPECT_EQ(ConfigValue(*repo_, "receive.denyDeletes"), "false");
  // No sample hooks from a template.
  EXPECT_FALSE(fs::exists(repo_path_ + "/hooks/pre-receive.sample"));
  // Reopening an existing repository works and keeps its content.
  clone_->Write("a", "1");
  std::string c = clone_->Commit("one");
  clone_->Push("main");
  std::unique_ptr<GitRepo> again;
  ASSERT_TRUE(GitRepo::Open(repo_path_, &again).ok());
  ResolvedSource src;
  ASSERT_TRUE(again->Resolve(std::nullopt, std::nullopt, "main", &src).ok());
  EXPECT_EQ(src.commit, c);
}

TEST_F(GitRepoTest, ReceiveRejectsCorruptObjects) {
  // receive.fsckObjects: a commit with a malformed author line is refused on push.
  clone_->Write("a", "1");
  std::string tree = Trim(clone_->Git({"write-tree"}));
  std::string bad = "tree " + tree + "\nauthor no-email 1 +0000\ncommitter x <x@y> 1 +0000\n\nm\n";
  std::string id =
      Trim(clone_->Git({"hash-object", "-t", "commit", "-w", "--literally", "--stdin"}, bad));
  GitCommand push;
  push.args = {"push", "-q", repo_path_, id + ":refs/heads/bad"};
  push.cwd = clone_->dir();
  push.env = {{"GIT_PROTOCOL_FROM_USER", "1"}};
  GitResult r;
  ASSERT_TRUE(DefaultGitRunner()->Run(push, &r).ok());
  EXPECT_NE(r.exit_code, 0);
  std::vector<std::pair<std::string, std::string>> branches;
  ASSERT_TRUE(repo_->ListBranches(&branches).ok());
  EXPECT_TRUE(branches.empty());
}

TEST(GitRepoOpenTest, ConcurrentOpenOfOnePathIsSafe) {
  TempDir tmp;
  std::string path = tmp.path() + "/domains/d/repo.git";
  std::vector<std::thread> threads;
  std::vector<Status> results(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      std::unique_ptr<GitRepo> repo;
      results[i] = GitRepo::Open(path, &repo);
    });
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  // Exactly one repository, no leftover temporary directories.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.path() + "/domains/d")) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "repo.git");
  }
  EXPECT_EQ(entries, 1);
  std::unique_ptr<GitRepo> repo;
  ASSERT_TRUE(GitRepo::Open(path, &repo).ok());
  EXPECT_EQ(ConfigValue(*repo, "receive.fsckObjects"), "true");
}

TEST(GitRepoOpenTest, RejectsRelativePathAndNonRepository) {
  std::unique_ptr<GitRepo> repo;
  EXPECT_EQ(GitRepo::Open("relative/repo.git", &repo).code(), Status::Code::kInvalidArgument);
  TempDir tmp;
  testing::WriteFile(tmp.path() + "/notrepo/HEAD", "junk");
  EXPECT_EQ(GitRepo::Open(tmp.path() + "/notrepo", &repo).code(),
            Status::Code::kFailedPrecondition);
}

// Issue 19: under a GitDeadlineScope (the build's deadline) a hanging git process is killed at
// the deadline, not at its own much longer timeout, and the error names the caller's bound.
TEST(GitDeadlineScopeTest, HangingGitEndsAtTheCallersDeadline) {
  GitCommand cmd;
  cmd.args = {"-c", "alias.hang=!sleep 40", "hang"};
  cmd.timeout_ms = 120 * 1000;
  GitResult r;
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  {
    GitDeadlineScope scope(t0 + std::chrono::milliseconds(300), "the build's timeout (test)");
    st = DefaultGitRunner()->Run(cmd, &r);
  }
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(st.code(), Status::Code::kDeadlineExceeded) << st.message();
  EXPECT_NE(st.message().find("did not finish within the build's timeout (test)"),
            std::string::npos)
      << st.message();
  EXPECT_LT(elapsed, std::chrono::seconds(30));  // killed, not waited for (sleep 40)
  // Outside the scope the command's own timeout applies again.
  cmd.args = {"-c", "alias.hang=!sleep 40", "hang"};
  cmd.timeout_ms = 200;
  st = DefaultGitRunner()->Run(cmd, &r);
  EXPECT_EQ(st.code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(st.message().find("within 200 ms"), std::string::npos) << st.message();
}

TEST_F(GitRepoTest, ResolvesBranchToCommitAndTree) {
  clone_->Write("main.go", "package main\n");
  std::string c1 = clone_->Commit("one");
  clone_->Push("cand1");
  clone_->Write("x.go", "package x\n");
  std::string c2 = clone_->Commit("two");
  clone_->Push("feature/x");
  std::string tree2 = Trim(clone_->Git({"rev-parse", "HEAD^{tree}"}));

  ResolvedSource src;
  ASSERT_TRUE(repo_->Resolve(std::nullopt, std::nullopt, "cand1", &src).ok());
  EXPECT_EQ(src.commit, c1);
  ASSERT_TRUE(repo_->Resolve(std::string("feature/x"), std::nullopt, "cand1", &src).ok());
  EXPECT_EQ(src.commit, c2);
  EXPECT_EQ(src.tree, tree2);
  ASSERT_TRUE(repo_->Resolve(std::string("refs/heads/feature/x"), std::nullopt, "c", &src).ok());
  EXPECT_EQ(src.commit, c2);
  // commit wins over ref.
  ASSERT_TRUE(repo_->Resolve(std::string("feature/x"), c1, "cand1", &src).ok());
  EXPECT_EQ(src.commit, c1);
}

TEST_F(GitRepoTest, BranchResolutionIgnoresTags) {
  clone_->Write("a", "1");
  std::string c1 = clone_->Commit("one");
  clone_->Push("main");
  clone_->Write("a", "2");
  std::string c2 = clone_->Commit("two");
  // A tag named like the candidate must not shadow (or stand in for) the branch.
  clone_->Git({"push", "-q", repo_path_, "HEAD:refs/tags/main", "HEAD:refs/tags/only-tag"});
  ResolvedSource src;
  ASSERT_TRUE(repo_->Resolve(std::nullopt, std::nullopt, "main", &src).ok());
  EXPECT_EQ(src.commit, c1);
  EXPECT_EQ(repo_->Resolve(std::nullopt, std::nullopt, "only-tag", &src).code(),
            Status::Code::kNotFound);
  (void)c2;
}

TEST_F(GitRepoTest, ResolvesAbbreviatedAndFullCommit) {
  clone_->Write("a", "1");
  std::string c1 = clone_->Commit("one");
  clone_->Push("main");
  ResolvedSource src;
  ASSERT_TRUE(repo_->Resolve(std::nullopt, c1.substr(0, 7), "main", &src).ok());
  EXPECT_EQ(src.commit, c1);
  ASSERT_TRUE(repo_->Resolve(std::nullopt, c1, "main", &src).ok());
  EXPECT_EQ(src.commit, c1);
  // Issue 18: the tree comes with the commit (one git cat-file --batch).
  EXPECT_EQ(src.tree, Trim(clone_->Git({"rev-parse", "HEAD^{tree}"})));
  Status s = repo_->Resolve(std::nullopt, std::string(40, '0'), "main", &src);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  // A tree id is not a commit.
  std::string tree = Trim(clone_->Git({"rev-parse", "HEAD^{tree}"}));
  EXPECT_EQ(repo_->Resolve(std::nullopt, tree, "main", &src).code(), Status::Code::kNotFound);
}

// Finds `count` contents whose git object id (type `type`) starts with `prefix` (4 hex).
std::vector<std::string> ObjectsWithPrefix(const std::string& type, const std::string& prefix,
                                           const std::string& base, int count) {
  std::vector<std::string> found;
  for (int i = 0; found.size() < static_cast<size_t>(count) && i < 5000000; ++i) {
    std::string body = base + std::to_string(i) + "\n";
    std::string obj = type + " " + std::to_string(body.size()) + std::string(1, '\0') + body;
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const unsigned char*>(obj.data()), obj.size(), md);
    char hex[5];
    snprintf(hex, sizeof(hex), "%02x%02x", md[0], md[1]);
    if (prefix == hex) found.push_back(body);
  }
  return found;
}

TEST_F(GitRepoTest, AbbreviatedCommitIgnoresOtherObjectsAndReportsAmbiguity) {
  clone_->Write("a", "1");
  std::string c1 = clone_->Commit("one");
  clone_->Push("main");
  std::string prefix = c1.substr(0, 4);
  // A blob sharing the 4-hex prefix: the commit is still the only *commit* with it.
  auto blobs = ObjectsWithPrefix("blob", prefix, "blob ", 1);
  ASSERT_EQ(blobs.size(), 1u);
  GitCommand w;
  w.args = {"hash-object", "-w", "--stdin"};
  w.stdin_data = blobs[0];
  GitResult r;
  ASSERT_TRUE(repo_->RunGit(w, &r).ok());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.out.substr(0, 4), prefix);
  ResolvedSource src;
  ASSERT_TRUE(repo_->Resolve(std::nullopt, prefix, "main", &src).ok());
  EXPECT_EQ(src.commit, c1);

  // Two commits sharing a prefix: ambiguous → NotFound saying so.
  std::string tree = Trim(clone_->Git({"rev-parse", "HEAD^{tree}"}));
  std::string head = "tree " + tree +
                     "\nauthor A <a@b.c> 1700000000 +0000\ncommitter A <a@b.c> 1700000000 "
                     "+0000\n\nmsg ";
  auto commits = ObjectsWithPrefix("commit", "beef", head, 2);
  ASSERT_EQ(commits.size(), 2u);
  for (const auto& body : commits) {
    w.args = {"hash-object", "-t", "commit", "-w", "--stdin"};
    w.stdin_data = body;
    ASSERT_TRUE(repo_->RunGit(w, &r).ok());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  Status s = repo_->Resolve(std::nullopt, std::string("beef"), "main", &src);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("ambiguous"), std::string::npos) << s.message();
}

TEST_F(GitRepoTest, HexBranchNameDoesNotStandInForCommit) {
  clone_->Write("a", "1");
  std::string c1 = clone_->Commit("one");
  clone_->Push("main");
  clone_->Write("a", "2");
  clone_->Commit("two");
  clone_->Push("abcdef");  // a branch whose name looks like an abbreviated commit
  ResolvedSource src;
  Status s = repo_->Resolve(std::nullopt, std::string("abcdef"), "main", &src);
  if (c1.compare(0, 6, "abcdef") != 0) {
    EXPECT_EQ(s.code(), Status::Code::kNotFound);
  }
}

TEST_F(GitRepoTest, MissingBranchIsNotFoundWithPushHint) {
  ResolvedSource src;
  Status s = repo_->Resolve(std::nullopt, std::nullopt, "cand-7", &src);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("branch 'cand-7' not found"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("git push"), std::string::npos);
  EXPECT_NE(s.message().find("HEAD:refs/heads/cand-7"), std::string::npos);
}

TEST_F(GitRepoTest, HostileRefsAreRejectedWithoutRunningGit) {
  clone_->Write("a", "1");
  clone_->Commit("one");
  clone_->Push("main");
  const std::vector<std::string> hostile = {"--upload-pack=x",
                                            "-x",
                                            "../x",
                                            "HEAD",
                                            "refs/heads/HEAD",
                                            "refs/tags/v1",
                                            "refs/remotes/o/m",
                                            "a..b",
                                            "@{1}",
                                            "main@{1}",
                                            "main~1",
                                            "main^",
                                            "main^{tree}",
                                            "x:y",
                                            "a b",
                                            "",
                                            "refs/heads/",
                                            "main.lock",
                                            "/main",
                                            "main/",
                                            "a//b",
                                            "main\n--exec=x"};
  ResolvedSource src;
  for (const auto& ref : hostile) {
    runner_.Clear();
    EXPECT_EQ(repo_->Resolve(ref, std::nullopt, "main", &src).code(),
              Status::Code::kInvalidArgument)
        << "ref: " << ref;
    EXPECT_EQ(repo_->Resolve(std::nullopt, std::nullopt, ref, &src).code(),
              Status::Code::kInvalidArgument)
        << "candidate: " << ref;
    EXPECT_TRUE(runner_.calls().empty()) << "git ran for ref: " << ref;
  }
  const std::vector<std::string> hostile_commits = {
      "--upload-pack=x", "HEAD",        "main",   "abc",
      "ABCDEF",          "abcd^{tree}", "abcd~1", std::string(41, 'a')};
  for (const auto& c : hostile_commits) {
    runner_.Clear();
    EXPECT_EQ(repo_->Resolve(std::nullopt, c, "main", &src).code(), Status::Code::kInvalidArgument)
        << "commit: " << c;
    EXPECT_TRUE(runner_.calls().empty()) << "git ran for commit: " << c;
  }
}

TEST_F(GitRepoTest, ListBranches) {
  std::vector<std::pair<std::string, std::string>> branches;
  ASSERT_TRUE(repo_->ListBranches(&branches).ok());
  EXPECT_TRUE(branches.empty());
  clone_->Write("a", "1");
  std::string c1 = clone_->Commit("one");
  clone_->Push("zeta");
  clone_->Push("alpha/one");
  clone_->Git({"push", "-q", repo_path_, "HEAD:refs/tags/t1"});
  ASSERT_TRUE(repo_->ListBranches(&branches).ok());
  ASSERT_EQ(branches.size(), 2u);
  EXPECT_EQ(branches[0], std::make_pair(std::string("alpha/one"), c1));
  EXPECT_EQ(branches[1], std::make_pair(std::string("zeta"), c1));
}

TEST_F(GitRepoTest, ConcurrentResolvesFromThreads) {
  clone_->Write("a", "1");
  std::string c1 = clone_->Commit("one");
  clone_->Push("main");
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&] {
      for (int j = 0; j < 5; ++j) {
        ResolvedSource src;
        if (repo_->Resolve(std::nullopt, std::nullopt, "main", &src).ok() && src.commit == c1) ++ok;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 30);
}

}  // namespace
}  // namespace kiln
