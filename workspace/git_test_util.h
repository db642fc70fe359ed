// Test helpers for workspace/: temporary directories and a scratch (non-bare) clone that makes
// commits and pushes them into a bare repository by file path. Test-only; not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "workspace/git_runner.h"

namespace kiln {
namespace testing {

/// A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content, bool exec = false);
std::string ReadFile(const std::string& path);

/// A non-bare repository in `dir` whose commits are pushed to `bare` by path.
class ScratchClone {
 public:
  ScratchClone(const std::string& dir, const std::string& bare);
  /// Runs git in the clone; fails the test (ADD_FAILURE) on non-zero exit. Returns stdout.
  std::string Git(std::vector<std::string> args, const std::string& stdin_data = "");
  void Write(const std::string& rel, const std::string& content, bool exec = false);
  void Remove(const std::string& rel);
  void Symlink(const std::string& rel, const std::string& target);
  /// Stages everything and commits; returns the new commit id.
  std::string Commit(const std::string& message);
  void Push(const std::string& branch, bool force = false);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, bare_;
};

}  // namespace testing
}  // namespace kiln
