// Issue 15 (git bomb) through the real git smart-HTTP endpoint: real `git push` clients against
// GitHttpHandler, whose pre-receive hook runs `<this test binary> git-hook pre-receive` (main()
// below dispatches it exactly like kiln's main does).
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "app/git_hook_command.h"
#include "common/sha256.h"
#include "transport/fake_tool_backend.h"
#include "transport/git_http.h"
#include "workspace/git_repo.h"
#include "workspace/git_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using kiln::testing::ReadFile;
using kiln::testing::TempDir;
using kiln::testing::WriteFile;

class PushLimitsTest : public ::testing::Test {
 protected:
  PushLimitsTest() {
    DomainConfig d;
    d.name = "demo";
    d.token_sha256 = {Sha256Hex("demo-token")};
    d.push.max_refs_per_push = 3;
    config_.domains["demo"] = d;
    config_.server.state_dir = tmp_.path() + "/state";
    options_.state_dir = config_.server.state_dir;
    options_.hook_exe = SelfExecutable();
    fs::create_directories(tmp_.path() + "/client-home");
  }
  ~PushLimitsTest() override {
    server_.reset();
    handler_.reset();
  }

  void Start() {
    handler_ = std::make_unique<GitHttpHandler>(config_, options_);
    HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    server_ = std::make_unique<HttpServer>(config_, backend_, o);
    handler_->Register(*server_);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::string Url() const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + "/git/demo.git";
  }
  std::string RepoDir() const { return config_.server.state_dir + "/domains/demo/repo.git"; }

  GitResult Git(const std::string& cwd, std::vector<std::string> args,
                const std::string& stdin_data = "") {
    GitCommand cmd;
    cmd.args = {"-c", "user.name=Agent",      "-c", "user.email=agent@kiln.invalid",
                "-c", "commit.gpgSign=false", "-c", "init.defaultBranch=main"};
    cmd.args.insert(cmd.args.end(), args.begin(), args.end());
    cmd.cwd = cwd;
    cmd.home = tmp_.path() + "/client-home";
    cmd.stdin_data = stdin_data;
    cmd.timeout_ms = 120000;
    cmd.env = {{"GIT_CONFIG_COUNT", "1"},
               {"GIT_CONFIG_KEY_0", "http.extraHeader"},
               {"GIT_CONFIG_VALUE_0", "Authorization: Bearer demo-token"}};
    GitResult r;
    Status s = DefaultGitRunner()->Run(cmd, &r);
    if (!s.ok()) r.err += "\n[runner: " + s.ToString() + "]";
    return r;
  }
  std::string GitOk(const std::string& cwd, std::vector<std::string> args,
                    const std::string& stdin_data = "") {
    GitResult r = Git(cwd, args, stdin_data);
    EXPECT_EQ(r.exit_code, 0) << "git " << args[0] << ": " << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  std::string Clone(const std::string& name) {
    std::string dir = tmp_.path() + "/" + name;
    GitOk(tmp_.path(), {"clone", "-q", Url(), dir});
    return dir;
  }
  std::string Commit(const std::string& dir, const std::string& file, const std::string& text) {
    WriteFile(dir + "/" + file, text);
    GitOk(dir, {"add", "-A"});
    GitOk(dir, {"commit", "-q", "-m", "change " + file});
    return GitOk(dir, {"rev-parse", "HEAD"});
  }
  // The repository: one 20 MB blob (zeros, piped into git: the pack is tiny) named 150
  // times in one tree.
  std::string BombCommit(const std::string& dir) {
    std::string blob = GitOk(dir, {"hash-object", "-w", "--stdin"}, std::string(20000000, '\0'));
    std::string entries;
    for (int i = 0; i < 150; ++i)
      entries += "100644 blob " + blob + "\tcopy" + std::to_string(i) + ".bin\n";
    std::string tree = GitOk(dir, {"mktree"}, entries);
    return GitOk(dir, {"commit-tree", tree, "-m", "bomb"});
  }
  std::map<std::string, std::string> ServerBranches() {
    std::map<std::string, std::string> out;
    std::unique_ptr<GitRepo> repo;
    EXPECT_TRUE(GitRepo::Open(RepoDir(), &repo).ok());
    std::vector<std::pair<std::string, std::string>> branches;
    EXPECT_TRUE(repo->ListBranches(&branches).ok());
    for (auto& [b, c] : branches) out[b] = c;
    return out;
  }
  // Objects in the repository proper (quarantined objects of a refused push are gone).
  bool ServerHasObject(const std::string& id) {
    GitResult r = Git(tmp_.path(), {"--git-dir=" + RepoDir(), "cat-file", "-e", id});
    return r.exit_code == 0;
  }

  TempDir tmp_;
  Config config_;
  GitHttpHandler::Options options_;
  FakeToolBackend backend_;
  std::unique_ptr<GitHttpHandler> handler_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(PushLimitsTest, BombPushIsRefusedWithGitsMessageAndNothingIsWritten) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "main.go", "package main\n");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});  // a normal push still works
  EXPECT_EQ(ServerBranches()["main"], c1);

  std::string bomb = BombCommit(a);
  GitResult r = Git(a, {"push", "origin", bomb + ":refs/heads/bomb"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("remote: kiln: refused: tree of refs/heads/bomb is 3.0 GB when checked "
                       "out; the limit is 512 MiB (push.max_tree_bytes)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("pre-receive hook declined"), std::string::npos) << r.err;
  EXPECT_EQ(ServerBranches(), (std::map<std::string, std::string>{{"main", c1}}));
  EXPECT_FALSE(ServerHasObject(bomb));

  // The same bomb onto an existing branch: refused too, the branch keeps its commit.
  r = Git(a, {"push", "-f", "origin", bomb + ":refs/heads/main"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("remote: kiln: refused: tree of refs/heads/main is 3.0 GB"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(ServerBranches()["main"], c1);

  std::string c2 = Commit(a, "more.go", "package main\n");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  EXPECT_EQ(ServerBranches()["main"], c2);
}

TEST_F(PushLimitsTest, TooManyRefsInOnePushAreRefused) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitResult r = Git(a, {"push", "origin", "HEAD:refs/heads/b1", "HEAD:refs/heads/b2",
                        "HEAD:refs/heads/b3", "HEAD:refs/heads/b4"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("remote: kiln: refused: this push updates 4 refs; the limit is 3 per push "
                       "(push.max_refs_per_push); push fewer branches at a time"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(ServerBranches().empty());

  // At the limit: accepted.
  GitOk(a,
        {"push", "-q", "origin", "HEAD:refs/heads/b1", "HEAD:refs/heads/b2", "HEAD:refs/heads/b3"});
  EXPECT_EQ(ServerBranches().size(), 3u);
  EXPECT_EQ(ServerBranches()["b3"], c1);
}

TEST_F(PushLimitsTest, PerDomainTreeLimitsReachTheHook) {
  config_.domains["demo"].push.max_file_bytes = 1024;
  Start();
  std::string a = Clone("a");
  Commit(a, "small.txt", "ok\n");
  Commit(a, "data/big.bin", std::string(2000, 'x'));
  GitResult r = Git(a, {"push", "origin", "HEAD:refs/heads/main"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("remote: kiln: refused: tree of refs/heads/main contains a file of 2.0 kB "
                       "('data/big.bin'); the limit is 1 KiB per file (push.max_file_bytes)"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(ServerBranches().empty());
}

TEST_F(PushLimitsTest, HookIsRewrittenWhenTheBinaryOrTheLimitsChange) {
  GitHttpHandler first(config_, options_);
  ASSERT_TRUE(first.PrepareDomain("demo").ok());
  std::string hook = ReadFile(RepoDir() + "/hooks/pre-receive");
  EXPECT_NE(hook.find("'" + SelfExecutable() + "' git-hook pre-receive"), std::string::npos)
      << hook;
  EXPECT_NE(hook.find("--max-refs-per-push=3"), std::string::npos) << hook;

  config_.domains["demo"].push.max_refs_per_push = 9;
  options_.hook_exe = "/opt/kiln's/bin/kiln";
  GitHttpHandler second(config_, options_);
  ASSERT_TRUE(second.PrepareDomain("demo").ok());
  hook = ReadFile(RepoDir() + "/hooks/pre-receive");
  EXPECT_NE(hook.find("'/opt/kiln'\\''s/bin/kiln' git-hook pre-receive"), std::string::npos)
      << hook;
  EXPECT_NE(hook.find("--max-refs-per-push=9"), std::string::npos) << hook;
  EXPECT_EQ(hook, PreReceiveHookScript(options_.hook_exe,
                                       TreeLimitsFromConfig(config_.domains["demo"].push)));
}

TEST(GitHookCommandTest, FlagsRoundTripAndBadOnesAreRefused) {
  TreeLimits l;
  l.max_tree_bytes = 123;
  l.max_refs_per_push = 4;
  TreeLimits back;
  std::string error;
  ASSERT_TRUE(ParseGitHookFlags(GitHookFlags(l), &back, &error)) << error;
  EXPECT_EQ(back.max_tree_bytes, 123);
  EXPECT_EQ(back.max_refs_per_push, 4);
  EXPECT_EQ(back.max_files, TreeLimits().max_files);
  EXPECT_FALSE(ParseGitHookFlags({"--max-files=0"}, &back, &error));
  EXPECT_FALSE(ParseGitHookFlags({"--max-files=-1"}, &back, &error));
  EXPECT_FALSE(ParseGitHookFlags({"--max-files"}, &back, &error));
  EXPECT_FALSE(ParseGitHookFlags({"--max-filesx=3"}, &back, &error));
  EXPECT_FALSE(ParseGitHookFlags({"--max-files=99999999999999999999"}, &back, &error));

  std::istringstream in("");
  std::ostringstream err;
  EXPECT_EQ(GitHookCommand({"post-receive"}, in, err), 2);
  std::istringstream garbage("not a ref line\n");
  EXPECT_EQ(GitHookCommand({"pre-receive"}, garbage, err), 1);
  EXPECT_NE(err.str().find("kiln: refused: malformed ref update line"), std::string::npos)
      << err.str();
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  // The pre-receive hook installed by the tests above runs this binary as kiln's.
  if (argc >= 2 && std::string(argv[1]) == "git-hook")
    return kiln::GitHookCommand(std::vector<std::string>(argv + 2, argv + argc), std::cin,
                                std::cerr);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
