#include "state/fault_file_system.h"

namespace kiln {
namespace {

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultFileSystem* fs, std::string path, std::unique_ptr<WritableFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}

  Status Append(std::string_view data) override {
    if (int err = fs_->Check(FaultFileSystem::Op::kAppend)) {
      size_t n = std::min(fs_->short_write_bytes(), data.size());
      if (n > 0) base_->Append(data.substr(0, n));
      return ErrnoStatus("write", path_, err);
    }
    return base_->Append(data);
  }
  Status Sync() override {
    if (int err = fs_->Check(FaultFileSystem::Op::kSync)) return ErrnoStatus("fsync", path_, err);
    return base_->Sync();
  }
  Status Truncate(uint64_t size) override {
    if (int err = fs_->Check(FaultFileSystem::Op::kTruncate)) {
      return ErrnoStatus("truncate", path_, err);
    }
    return base_->Truncate(size);
  }
  Status Close() override { return base_->Close(); }

 private:
  FaultFileSystem* const fs_;
  const std::string path_;
  std::unique_ptr<WritableFile> base_;
};

}  // namespace

void FaultFileSystem::Fail(Op op, int err, int skip, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_[static_cast<size_t>(op)] = Fault{err, skip, count};
}

void FaultFileSystem::set_short_write_bytes(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  short_write_bytes_ = n;
}

size_t FaultFileSystem::short_write_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return short_write_bytes_;
}

void FaultFileSystem::Heal() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_ = {};
  short_write_bytes_ = 0;
}

int FaultFileSystem::calls(Op op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_[static_cast<size_t>(op)];
}

void FaultFileSystem::set_hook(std::function<void(Op)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hook_ = std::move(hook);
}

int FaultFileSystem::Check(Op op) {
  std::function<void(Op)> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = hook_;
  }
  if (hook) hook(op);
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_[static_cast<size_t>(op)];
  Fault& f = faults_[static_cast<size_t>(op)];
  if (f.err == 0) return 0;
  if (f.skip > 0) {
    --f.skip;
    return 0;
  }
  if (f.count == 0) return 0;
  if (f.count > 0) --f.count;
  return f.err;
}

Status FaultFileSystem::OpenAppendable(const std::string& path,
                                       std::unique_ptr<WritableFile>* out) {
  if (int err = Check(Op::kOpen)) return ErrnoStatus("open", path, err);
  std::unique_ptr<WritableFile> f;
  Status s = base_->OpenAppendable(path, &f);
  if (s.ok()) *out = std::make_unique<FaultWritableFile>(this, path, std::move(f));
  return s;
}

Status FaultFileSystem::OpenTruncated(const std::string& path, std::unique_ptr<WritableFile>* out) {
  if (int err = Check(Op::kOpen)) return ErrnoStatus("open", path, err);
  std::unique_ptr<WritableFile> f;
  Status s = base_->OpenTruncated(path, &f);
  if (s.ok()) *out = std::make_unique<FaultWritableFile>(this, path, std::move(f));
  return s;
}

Status FaultFileSystem::Rename(const std::string& from, const std::string& to) {
  if (int err = Check(Op::kRename)) return ErrnoStatus("rename", from, err);
  return base_->Rename(from, to);
}

Status FaultFileSystem::Remove(const std::string& path) {
  if (int err = Check(Op::kRemove)) return ErrnoStatus("remove", path, err);
  return base_->Remove(path);
}

Status FaultFileSystem::SyncDir(const std::string& dir) {
  if (int err = Check(Op::kSyncDir)) return ErrnoStatus("fsync", dir, err);
  return base_->SyncDir(dir);
}

}  // namespace kiln
