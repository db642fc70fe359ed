#include "workspace/git_test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {
namespace testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kiln-ws-test-XXXXXX";
  if (!mkdtemp(tmpl.data())) ADD_FAILURE() << "mkdtemp failed";
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& content, bool exec) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  ::chmod(path.c_str(), exec ? 0755 : 0644);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

ScratchClone::ScratchClone(const std::string& dir, const std::string& bare)
    : dir_(dir), bare_(bare) {
  fs::create_directories(dir);
  Git({"init", "-q", "-b", "main"});
}

std::string ScratchClone::Git(std::vector<std::string> args, const std::string& stdin_data) {
  GitCommand cmd;
  cmd.args = {"-c", "user.name=Kiln Test", "-c", "user.email=test@kiln.invalid",
              "-c", "commit.gpgSign=false"};
  cmd.args.insert(cmd.args.end(), args.begin(), args.end());
  cmd.cwd = dir_;
  cmd.home = dir_;
  cmd.stdin_data = stdin_data;
  cmd.env = {{"GIT_PROTOCOL_FROM_USER", "1"}};
  GitResult r;
  Status s = DefaultGitRunner()->Run(cmd, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.exit_code, 0) << "git " << args[0] << ": " << r.err;
  return r.out;
}

void ScratchClone::Write(const std::string& rel, const std::string& content, bool exec) {
  WriteFile(dir_ + "/" + rel, content, exec);
}

void ScratchClone::Remove(const std::string& rel) { fs::remove_all(dir_ + "/" + rel); }

void ScratchClone::Symlink(const std::string& rel, const std::string& target) {
  fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
  fs::create_symlink(target, dir_ + "/" + rel);
}

std::string ScratchClone::Commit(const std::string& message) {
  Git({"add", "-A"});
  Git({"commit", "-q", "--allow-empty", "-m", message});
  std::string head = Git({"rev-parse", "HEAD"});
  return head.substr(0, head.find('\n'));
}

void ScratchClone::Push(const std::string& branch, bool force) {
  std::vector<std::string> args = {"push", "-q"};
  if (force) args.push_back("--force");
  args.push_back(bare_);
  args.push_back("HEAD:refs/heads/" + branch);
  Git(args);
}

}  // namespace testing
}  // namespace kiln
