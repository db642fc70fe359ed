#include "deploy/rootfs_rules.h"

#include <deque>
#include <vector>

namespace kiln {
namespace {

constexpr size_t kMaxNameBytes = 4096;
constexpr int kMaxLinks = 40;
constexpr std::string_view kWhPrefix = ".wh.";
constexpr std::string_view kOpaqueName = ".wh..wh..opq";

std::vector<std::string> Split(std::string_view p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    if (j > i) out.emplace_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& segs) {
  std::string out;
  for (const auto& s : segs) {
    if (!out.empty()) out += '/';
    out += s;
  }
  return out;
}

}  // namespace

Status CleanEntryPath(std::string_view name, std::string* out, bool* hostile) {
  if (name.size() > kMaxNameBytes) return Status::InvalidArgument("entry name too long");
  if (name.find('\0') != std::string_view::npos)
    return Status::InvalidArgument("entry name contains a NUL byte");
  bool bad = !name.empty() && name.front() == '/';
  std::vector<std::string> segs;
  for (auto& s : Split(name)) {
    if (s == ".") continue;
    if (s == "..") {
      if (segs.empty())
        bad = true;
      else
        segs.pop_back();
      continue;
    }
    segs.push_back(std::move(s));
  }
  *out = Join(segs);
  if (hostile) *hostile = bad;
  return Status::Ok();
}

Whiteout ClassifyWhiteout(std::string_view clean_path) {
  size_t slash = clean_path.rfind('/');
  std::string_view dir =
      slash == std::string_view::npos ? std::string_view() : clean_path.substr(0, slash);
  std::string_view base =
      slash == std::string_view::npos ? clean_path : clean_path.substr(slash + 1);
  if (base.substr(0, kWhPrefix.size()) != kWhPrefix) return {};
  if (base == kOpaqueName) return {Whiteout::Kind::kOpaque, std::string(dir)};
  std::string_view victim = base.substr(kWhPrefix.size());
  // ".wh..wh.*" is AUFS metadata; ".wh." / ".wh.." / ".wh..." name nothing we may delete.
  if (victim.empty() || victim == "." || victim == ".." ||
      victim.substr(0, kWhPrefix.size()) == kWhPrefix)
    return {Whiteout::Kind::kIgnore, ""};
  std::string target =
      dir.empty() ? std::string(victim) : std::string(dir) + "/" + std::string(victim);
  return {Whiteout::Kind::kFile, std::move(target)};
}

Status ResolveInRoot(const std::string& rel, bool follow_last, const SymlinkLookup& lookup,
                     std::string* out) {
  std::deque<std::string> todo;
  for (auto& s : Split(rel)) todo.push_back(std::move(s));
  std::vector<std::string> done;
  int links = 0;
  while (!todo.empty()) {
    std::string seg = std::move(todo.front());
    todo.pop_front();
    if (seg == ".") continue;
    if (seg == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    if (todo.empty() && !follow_last) {
      done.push_back(std::move(seg));
      break;
    }
    done.push_back(seg);
    std::optional<std::string> target = lookup(Join(done));
    if (!target) continue;
    if (++links > kMaxLinks)
      return Status::InvalidArgument("too many levels of symbolic links: " + rel);
    if (target->find('\0') != std::string::npos)
      return Status::InvalidArgument("symlink target with NUL");
    done.pop_back();
    if (!target->empty() && target->front() == '/') done.clear();
    std::vector<std::string> t = Split(*target);
    todo.insert(todo.begin(), t.begin(), t.end());
  }
  *out = Join(done);
  return Status::Ok();
}

EntryAction ActionFor(char typeflag) {
  switch (typeflag) {
    case '0':
    case '\0':
    case '7':
      return EntryAction::kFile;
    case '5':
      return EntryAction::kDir;
    case '2':
      return EntryAction::kSymlink;
    case '1':
      return EntryAction::kHardlink;
    default:
      return EntryAction::kSkip;
  }
}

uint32_t SanitizeMode(uint32_t mode) { return mode & 01777; }

}  // namespace kiln
