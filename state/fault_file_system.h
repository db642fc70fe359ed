// FaultFileSystem: a FileSystem for tests that delegates to another one and fails chosen
// operations on command with a chosen errno (ENOSPC, EIO, ...), like a full or dying disk.
// A failing Append may first write a prefix of its data (a short write), as a real full disk
// does. Test-only (library kiln_state_testing).
//
// Ownership: `base` must outlive this object and every file it opened.
// Thread-safety: thread-safe (one mutex); files it returns share its fault settings.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "state/file_system.h"

namespace kiln {

class FaultFileSystem : public FileSystem {
 public:
  enum class Op { kAppend, kSync, kTruncate, kOpen, kRename, kRemove, kSyncDir };
  static constexpr size_t kNumOps = 7;

  explicit FaultFileSystem(FileSystem* base) : base_(base) {}

  /// From now on, after `skip` more successful calls of `op`, the next `count` calls fail with
  /// errno `err` (count < 0: every later call).
  void Fail(Op op, int err, int skip = 0, int count = -1);
  /// A failing Append writes this many bytes of its data first (default 0).
  void set_short_write_bytes(size_t n);
  /// Clears every fault.
  void Heal();
  /// How many calls of `op` were made (failed or not).
  int calls(Op op) const;
  /// Called (outside the lock) before every counted operation, e.g. to SIGKILL the process at
  /// an exact point of a compaction in crash tests.
  void set_hook(std::function<void(Op)> hook);

  Status ReadFile(const std::string& path, std::string* out) override {
    return base_->ReadFile(path, out);
  }
  Status OpenAppendable(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status OpenTruncated(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Status ListDir(const std::string& dir, std::vector<std::string>* names) override {
    return base_->ListDir(dir, names);
  }
  Status CreateDirs(const std::string& dir) override { return base_->CreateDirs(dir); }
  Status Lock(const std::string& path, std::unique_ptr<LockHandle>* out) override {
    return base_->Lock(path, out);
  }

  /// Counts a call of `op`; returns the injected error for it (0 when it should succeed).
  int Check(Op op);
  size_t short_write_bytes() const;

 private:
  struct Fault {
    int err = 0;
    int skip = 0;
    int count = 0;  // < 0: forever
  };
  FileSystem* const base_;
  mutable std::mutex mu_;
  std::array<Fault, kNumOps> faults_{};  // guarded by mu_
  std::array<int, kNumOps> calls_{};     // guarded by mu_
  size_t short_write_bytes_ = 0;         // guarded by mu_
  std::function<void(Op)> hook_;         // guarded by mu_
};

}  // namespace kiln
