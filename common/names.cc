#include "common/names.h"

namespace kiln {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool EndsWith(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

}  // namespace

Status ValidateName(std::string_view name, std::string_view what) {
  std::string w(what);
  if (name.empty()) return Status::InvalidArgument(w + " name is empty");
  if (name.size() > kMaxNameLength)
    return Status::InvalidArgument(w + " name is longer than " + std::to_string(kMaxNameLength) +
                                   " characters");
  char first = name.front();
  bool alnum = (first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') ||
               (first >= '0' && first <= '9');
  if (!alnum) return Status::InvalidArgument(w + " name must start with a letter or digit");
  for (char c : name)
    if (!IsNameChar(c))
      return Status::InvalidArgument(w +
                                     " name may contain only letters, digits, '.', '_' and '-'");
  if (name.find("..") != std::string_view::npos)
    return Status::InvalidArgument(w + " name must not contain '..'");
  if (EndsWith(name, ".") || EndsWith(name, ".lock"))
    return Status::InvalidArgument(w + " name must not end in '.' or '.lock'");
  return Status::Ok();
}

Status ValidateRef(std::string_view ref) {
  if (ref.empty()) return Status::InvalidArgument("ref is empty");
  if (ref.size() > kMaxRefLength)
    return Status::InvalidArgument("ref is longer than " + std::to_string(kMaxRefLength) +
                                   " characters");
  std::string_view rest = ref;
  if (rest.substr(0, 5) == "refs/") {
    if (rest.substr(0, 11) != "refs/heads/")
      return Status::InvalidArgument("ref must be a branch (refs/heads/...)");
    rest.remove_prefix(11);
  }
  if (rest.empty()) return Status::InvalidArgument("ref names no branch");
  size_t start = 0;
  while (true) {
    size_t slash = rest.find('/', start);
    std::string_view seg = rest.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    Status s = ValidateName(seg, "ref segment");
    if (!s.ok()) return Status::InvalidArgument("invalid ref: " + s.message());
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return Status::Ok();
}

Status ValidateCommit(std::string_view commit) {
  if (commit.size() < 4 || (commit.size() > 40 && commit.size() != 64))
    return Status::InvalidArgument("commit must be 4 to 40 (or 64) hex characters");
  for (char c : commit)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return Status::InvalidArgument("commit must be lowercase hex");
  return Status::Ok();
}

bool IsNormalizedRelativePath(std::string_view p) {
  if (p.empty() || p.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (true) {
    size_t slash = p.find('/', start);
    std::string_view seg =
        p.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool IsNormalizedAbsolutePath(std::string_view p) {
  if (p == "/") return true;
  return !p.empty() && p[0] == '/' && IsNormalizedRelativePath(p.substr(1));
}

}  // namespace kiln
