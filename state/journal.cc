#include "state/journal.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "state/crc32c.h"

namespace kiln {
namespace {

constexpr uint8_t kSnapshotType = 0xFF;

void Put32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint32_t Get32(const char* p) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

enum class Frame { kOk, kIncomplete, kBad };

// Parses the frame at `off`. Types 1..max_type are accepted, plus kSnapshotType when
// `snapshot` is set.
Frame ParseFrame(std::string_view data, size_t off, bool snapshot, JournalRecord* rec, size_t* next,
                 const char** why) {
  if (data.size() - off < Journal::kHeaderSize) {
    *why = "incomplete header";
    return Frame::kIncomplete;
  }
  const char* h = data.data() + off;
  uint32_t crc = Get32(h);
  uint32_t len = Get32(h + 4);
  uint8_t type = static_cast<uint8_t>(h[8]);
  bool type_ok = snapshot ? type == kSnapshotType : (type >= 1 && type <= Journal::kMaxRecordType);
  if (!type_ok) {
    *why = "bad record type";
    return Frame::kBad;
  }
  if (len > Journal::kMaxPayload) {
    *why = "bad record length";
    return Frame::kBad;
  }
  if (data.size() - off - Journal::kHeaderSize < len) {
    *why = "incomplete payload";
    return Frame::kIncomplete;
  }
  if (crc32c::Extend(0, h + 4, 5 + size_t{len}) != crc) {
    *why = "checksum mismatch";
    return Frame::kBad;
  }
  if (rec) {
    rec->type = type;
    rec->payload.assign(h + Journal::kHeaderSize, len);
  }
  *next = off + Journal::kHeaderSize + len;
  return Frame::kOk;
}

// Parses "<prefix><16 digits><suffix>"; returns false when `name` is not of that form.
bool ParseName(const std::string& name, const std::string& prefix, const std::string& suffix,
               uint64_t* generation) {
  if (name.size() != prefix.size() + 16 + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  uint64_t g = 0;
  for (size_t i = prefix.size(); i < prefix.size() + 16; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    g = g * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *generation = g;
  return true;
}

}  // namespace

std::string Journal::Encode(uint8_t type, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  Put32(&out, 0);  // crc, filled below
  Put32(&out, static_cast<uint32_t>(payload.size()));
  out.push_back(static_cast<char>(type));
  out.append(payload);
  uint32_t crc = crc32c::Extend(0, out.data() + 4, out.size() - 4);
  for (int i = 0; i < 4; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  return out;
}

Journal::Journal(std::string dir, const JournalOptions& options)
    : dir_(std::move(dir)),
      options_(options),
      fs_(options.fs ? options.fs : FileSystem::Default()) {}

Journal::~Journal() {
  if (file_) file_->Close();
}

std::string Journal::Path(const char* kind, uint64_t generation) const {
  char name[64];
  std::snprintf(name, sizeof name, "/%s-%016" PRIu64 ".%s", kind, generation,
                std::strcmp(kind, "journal") == 0 ? "log" : "snap");
  return dir_ + name;
}

Status Journal::Open(const std::string& dir, const JournalOptions& options,
                     std::unique_ptr<Journal>* out, JournalLoad* load) {
  std::unique_ptr<Journal> j(new Journal(dir, options));
  *load = JournalLoad{};
  Status s = j->Load(load);
  if (!s.ok()) return s;
  *out = std::move(j);
  return Status::Ok();
}

Status Journal::Load(JournalLoad* load) {
  Status s = fs_->CreateDirs(dir_);
  if (s.ok()) s = fs_->Lock(dir_ + "/LOCK", &lock_);
  std::vector<std::string> names;
  if (s.ok()) s = fs_->ListDir(dir_, &names);
  if (!s.ok()) return s;

  std::vector<uint64_t> snapshots, journals;
  std::vector<std::string> leftovers;
  for (const std::string& n : names) {
    uint64_t g;
    if (ParseName(n, "snapshot-", ".snap", &g)) {
      snapshots.push_back(g);
    } else if (ParseName(n, "journal-", ".log", &g)) {
      journals.push_back(g);
    } else if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) {
      leftovers.push_back(dir_ + "/" + n);
    }
  }
  uint64_t gen = 0;
  for (uint64_t g : snapshots) gen = std::max(gen, g);

  if (!snapshots.empty()) {
    std::string data;
    std::string path = Path("snapshot", gen);
    if (!(s = fs_->ReadFile(path, &data)).ok()) return s;
    JournalRecord rec;
    size_t next = 0;
    const char* why = "";
    if (ParseFrame(data, 0, true, &rec, &next, &why) != Frame::kOk || next != data.size()) {
      return Status::Internal("snapshot " + path + " is corrupt (" + why +
                              "); move it away to start from the previous state");
    }
    load->has_snapshot = true;
    load->snapshot = std::move(rec.payload);
  }
  // Leftovers of interrupted compactions: older generations, newer (never used) journals,
  // temporary snapshots.
  for (uint64_t g : snapshots) {
    if (g < gen) leftovers.push_back(Path("snapshot", g));
  }
  for (uint64_t g : journals) {
    if (g == gen) continue;
    std::string path = Path("journal", g);
    std::string data;
    if (g > gen && fs_->ReadFile(path, &data).ok() && !data.empty()) {
      // Never written to by design; keep it for inspection rather than lose anything.
      fs_->Rename(path, path + ".orphan");
      load->notes.push_back("kept unexpected non-empty " + path + " as .orphan");
      continue;
    }
    leftovers.push_back(path);
  }
  for (const std::string& path : leftovers) {
    Status r = fs_->Remove(path);
    load->notes.push_back(r.ok() ? "removed leftover " + path : r.ToString());
  }
  if (!leftovers.empty()) fs_->SyncDir(dir_);

  generation_ = gen;
  load->generation = gen;
  return LoadJournalFile(load);
}

Status Journal::LoadJournalFile(JournalLoad* load) {
  std::string path = Path("journal", generation_);
  std::string data;
  Status s = fs_->ReadFile(path, &data);
  if (!s.ok() && s.code() != Status::Code::kNotFound) return s;
  bool created = !s.ok();

  size_t off = 0;
  const std::string_view view(data);
  while (off < view.size()) {
    JournalRecord rec;
    size_t next = 0;
    const char* why = "";
    if (ParseFrame(view, off, false, &rec, &next, &why) == Frame::kOk) {
      load->records.push_back(std::move(rec));
      off = next;
      continue;
    }
    // Resynchronize: the first offset after `off` where a valid record starts.
    size_t found = std::string::npos;
    for (size_t p = off + 1; p + kHeaderSize <= view.size(); ++p) {
      const char* ignored;
      if (ParseFrame(view, p, false, nullptr, &next, &ignored) == Frame::kOk) {
        found = p;
        break;
      }
    }
    if (found == std::string::npos) {  // nothing valid follows: a torn tail
      load->truncated_bytes = view.size() - off;
      break;
    }
    std::string what = path + " offset " + std::to_string(off) + ": " +
                       std::to_string(found - off) + " bytes skipped (" + why + ")";
    if (options_.fail_on_corruption) return Status::Internal("journal corrupt: " + what);
    load->corruptions.push_back(what);
    had_corruption_ = true;
    off = found;
  }
  size_ = off;
  load->journal_bytes = off;

  if (!(s = fs_->OpenAppendable(path, &file_)).ok()) return s;
  if (created) fs_->SyncDir(dir_);
  if (load->truncated_bytes > 0) {
    damaged_ = true;
    Repair();  // on failure the next Append retries
  }
  return Status::Ok();
}

Status Journal::Repair() {
  Status s = file_->Truncate(size_);
  if (s.ok() && options_.sync) s = file_->Sync();
  if (s.ok()) damaged_ = false;
  return s;
}

Status Journal::Append(uint8_t type, std::string payload) {
  std::vector<JournalRecord> batch(1);
  batch[0].type = type;
  batch[0].payload = std::move(payload);
  return Append(batch);
}

Status Journal::Append(const std::vector<JournalRecord>& batch) {
  size_t total = 0;
  for (const JournalRecord& r : batch) {
    if (r.type < 1 || r.type > kMaxRecordType) {
      return Status::InvalidArgument("journal record type " + std::to_string(r.type) +
                                     " out of range");
    }
    if (r.payload.size() > kMaxPayload) {
      return Status::InvalidArgument("journal record of " + std::to_string(r.payload.size()) +
                                     " bytes is too large");
    }
    total += kHeaderSize + r.payload.size();
  }
  Status s;
  if (damaged_ && !(s = Repair()).ok()) return s;
  if (dir_unsynced_) {
    if (!(s = fs_->SyncDir(dir_)).ok()) return s;
    dir_unsynced_ = false;
  }
  std::string buf;
  buf.reserve(total);
  for (const JournalRecord& r : batch) buf += Encode(r.type, r.payload);
  s = file_->Append(buf);
  if (s.ok() && options_.sync) s = file_->Sync();
  if (!s.ok()) {
    damaged_ = true;
    Repair();  // best effort now; retried by the next Append
    return s;
  }
  size_ += buf.size();
  return Status::Ok();
}

Status Journal::Compact(std::string_view snapshot) {
  if (snapshot.size() > kMaxPayload) return Status::InvalidArgument("snapshot too large");
  const uint64_t next = generation_ + 1;
  const std::string tmp = dir_ + "/snapshot-" + std::to_string(next) + ".tmp";
  const std::string snap = Path("snapshot", next);
  const std::string new_journal = Path("journal", next);
  auto fail = [&](Status s) {
    fs_->Remove(tmp);
    fs_->Remove(new_journal);
    return s;
  };

  std::unique_ptr<WritableFile> f;
  Status s = fs_->OpenTruncated(tmp, &f);
  if (!s.ok()) return fail(s);
  s = f->Append(Encode(kSnapshotType, snapshot));
  if (s.ok()) s = f->Sync();
  Status c = f->Close();
  if (s.ok()) s = c;
  if (!s.ok()) return fail(s);

  std::unique_ptr<WritableFile> nj;
  if (!(s = fs_->OpenTruncated(new_journal, &nj)).ok()) return fail(s);
  if (options_.sync && !(s = nj->Sync()).ok()) return fail(s);
  if (!(s = fs_->Rename(tmp, snap)).ok()) return fail(s);
  // Committed (in this process's view). Until the directory is synced no append is
  // acknowledged: a power loss could still bring back generation `generation_`.
  dir_unsynced_ = !fs_->SyncDir(dir_).ok();

  const uint64_t old = generation_;
  file_->Close();
  file_ = std::move(nj);
  generation_ = next;
  size_ = 0;
  damaged_ = false;
  const std::string old_journal = Path("journal", old);
  if (had_corruption_) {
    fs_->Rename(old_journal, old_journal + ".corrupt");
    had_corruption_ = false;
  } else {
    fs_->Remove(old_journal);
  }
  fs_->Remove(Path("snapshot", old));
  if (!dir_unsynced_) fs_->SyncDir(dir_);
  return Status::Ok();
}

}  // namespace kiln
