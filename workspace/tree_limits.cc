#include "workspace/tree_limits.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace kiln {
namespace {

constexpr int64_t kCap = INT64_MAX / 4;  // saturation point of expanded sizes
constexpr size_t kChunk = 4096;          // ids per git cat-file run

int64_t SatAdd(int64_t a, int64_t b) { return a >= kCap - b ? kCap : a + b; }

bool IsHex(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool IsFullId(const std::string& s) { return (s.size() == 40 || s.size() == 64) && IsHex(s); }

bool AllZero(const std::string& s) { return s.find_first_not_of('0') == std::string::npos; }

std::string ToHex(const char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    out[2 * i] = kDigits[c >> 4];
    out[2 * i + 1] = kDigits[c & 15];
  }
  return out;
}

// A path from the agent's tree, safe to print: control bytes become '?', long ones are cut.
std::string Printable(const std::string& path) {
  std::string out;
  for (unsigned char c : path.substr(0, 200)) out += (c < 0x20 || c == 0x7f) ? '?' : char(c);
  if (path.size() > 200) out += "...";
  return out;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// Splits "<a> <b> <c>" header lines of cat-file output.
std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> f;
  std::istringstream in(line);
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  static const char* kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  static const char* kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  for (int i = 4; i >= 0; --i) {
    int64_t unit = int64_t{1} << (10 * (i + 1));
    if (bytes % unit == 0) return std::to_string(bytes / unit) + " " + kBinary[i];
  }
  double v = static_cast<double>(bytes);
  int i = -1;
  while (v >= 1000.0 && i < 5) v /= 1000.0, ++i;
  if (i < 0) return std::to_string(bytes) + " bytes";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kDecimal[i]);
  return buf;
}

Status ParseTreeObject(const std::string& data, size_t id_bytes, std::vector<TreeEntry>* out) {
  out->clear();
  size_t i = 0;
  while (i < data.size()) {
    size_t sp = data.find(' ', i);
    if (sp == std::string::npos) return Status::InvalidArgument("malformed tree object (mode)");
    std::string mode = data.substr(i, sp - i);
    size_t nul = data.find('\0', sp + 1);
    if (nul == std::string::npos || nul + 1 + id_bytes > data.size())
      return Status::InvalidArgument("malformed tree object (name)");
    TreeEntry e;
    e.name = data.substr(sp + 1, nul - sp - 1);
    e.id = ToHex(data.data() + nul + 1, id_bytes);
    if (mode == "40000" || mode == "040000") {
      e.kind = TreeEntry::Kind::kTree;
    } else if (mode == "160000") {
      e.kind = TreeEntry::Kind::kSubmodule;
    } else if (mode == "100644" || mode == "100755" || mode == "120000" || mode == "100664") {
      e.kind = TreeEntry::Kind::kBlob;
    } else {
      return Status::InvalidArgument("malformed tree object (mode '" + Printable(mode) + "')");
    }
    out->push_back(std::move(e));
    i = nul + 1 + id_bytes;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// GitObjectSource

Status GitObjectSource::CatFile(const std::string& mode, const std::vector<std::string>& lines,
                                GitResult* r) {
  GitCommand cmd;
  cmd.args = {"cat-file", mode};
  for (const std::string& l : lines) cmd.stdin_data += l + "\n";
  Status s = run_(std::move(cmd), r);
  if (!s.ok()) return s;
  if (r->exit_code != 0) return Status::Internal("git cat-file failed: " + r->ErrorSummary());
  return Status::Ok();
}

Status GitObjectSource::ReadTrees(const std::vector<std::string>& ids,
                                  std::map<std::string, std::vector<TreeEntry>>* out) {
  if (ids.empty()) return Status::Ok();
  GitResult r;
  Status s = CatFile("--batch", ids, &r);
  if (!s.ok()) return s;
  size_t pos = 0;
  for (const std::string& id : ids) {
    size_t eol = r.out.find('\n', pos);
    if (eol == std::string::npos) return Status::Internal("git cat-file: truncated output");
    std::vector<std::string> f = Fields(r.out.substr(pos, eol - pos));
    pos = eol + 1;
    if (f.size() != 3 || f[0] != id) {
      if (f.size() == 2 && f[1] == "missing")
        return Status::NotFound(
            "tree " + id + " cannot be read: the domain's repository is corrupt or incomplete");
      return Status::Internal("git cat-file: unexpected output for " + id);
    }
    if (f[1] != "tree") return Status::NotFound("object " + id + " is a " + f[1] + ", not a tree");
    size_t size = 0;
    try {
      size = std::stoull(f[2]);
    } catch (...) {
      return Status::Internal("git cat-file: bad size for " + id);
    }
    if (pos + size + 1 > r.out.size()) return Status::Internal("git cat-file: truncated output");
    s = ParseTreeObject(r.out.substr(pos, size), id.size() / 2, &(*out)[id]);
    if (!s.ok()) return Status::InvalidArgument("tree " + id + ": " + s.message());
    pos += size + 1;
  }
  return Status::Ok();
}

Status GitObjectSource::BlobSizes(const std::vector<std::string>& ids,
                                  std::map<std::string, int64_t>* out) {
  if (ids.empty()) return Status::Ok();
  GitResult r;
  Status s = CatFile("--batch-check", ids, &r);
  if (!s.ok()) return s;
  std::istringstream in(r.out);
  std::string line;
  for (const std::string& id : ids) {
    if (!std::getline(in, line)) return Status::Internal("git cat-file: truncated output");
    std::vector<std::string> f = Fields(line);
    if (f.size() == 2 && f[1] == "missing")
      return Status::NotFound("blob " + id +
                              " cannot be read: the domain's repository is corrupt or incomplete");
    if (f.size() != 3 || f[0] != id || f[1] != "blob")
      return Status::Internal("git cat-file: unexpected output for " + id);
    try {
      (*out)[id] = static_cast<int64_t>(std::stoull(f[2]));
    } catch (...) {
      return Status::Internal("git cat-file: bad size for " + id);
    }
  }
  return Status::Ok();
}

Status GitObjectSource::TreeOf(const std::string& commit_or_tree, std::string* tree) {
  if (!IsFullId(commit_or_tree))
    return Status::InvalidArgument("not a full object id: '" + Printable(commit_or_tree) + "'");
  GitResult r;
  Status s = CatFile("--batch-check", {commit_or_tree + "^{tree}"}, &r);
  if (!s.ok()) return s;
  std::vector<std::string> f = Fields(r.out.substr(0, r.out.find('\n')));
  if (f.size() != 3 || f[1] != "tree" || !IsFullId(f[0]))
    return Status::NotFound("no commit or tree " + commit_or_tree);
  *tree = f[0];
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// TreeLimitChecker

TreeLimitChecker::Sum TreeLimitChecker::Expand(const std::string& id, int depth,
                                               std::map<std::string, Sum>* memo) const {
  auto m = memo->find(id);
  if (m != memo->end()) return m->second;
  Sum sum;
  auto t = trees_.find(id);
  if (depth > limits_.max_depth) {
    sum.depth = kCap;  // deeper than allowed: stop here (the caller refuses)
  } else if (t != trees_.end() && t->second.read) {
    for (const TreeEntry& e : t->second.entries) {
      sum.files = SatAdd(sum.files, 1);
      if (e.kind == TreeEntry::Kind::kBlob) {
        auto b = blobs_.find(e.id);
        if (b != blobs_.end()) sum.bytes = SatAdd(sum.bytes, b->second);
      } else if (e.kind == TreeEntry::Kind::kTree) {
        Sum c = Expand(e.id, depth + 1, memo);
        sum.files = SatAdd(sum.files, c.files);
        sum.bytes = SatAdd(sum.bytes, c.bytes);
        sum.depth = std::max(sum.depth, c.depth == kCap ? kCap : c.depth + 1);
      }
    }
  }
  (*memo)[id] = sum;
  return sum;
}

Status TreeLimitChecker::Exceeded(const std::string& what, const TreeUsage& u,
                                  bool complete) const {
  const std::string is = complete ? " is " : " is at least ";
  if (u.largest_file > limits_.max_file_bytes)
    return Status::ResourceExhausted(what + " contains a file of " + FormatBytes(u.largest_file) +
                                     " ('" + Printable(largest_path_) + "'); the limit is " +
                                     FormatBytes(limits_.max_file_bytes) +
                                     " per file (push.max_file_bytes); remove or shrink it "
                                     "(keep large data out of the repository) and push again");
  if (u.depth > limits_.max_depth)
    return Status::ResourceExhausted(what + " nests directories more than " +
                                     std::to_string(limits_.max_depth) +
                                     " levels deep; flatten it and push again");
  if (u.files > limits_.max_files)
    return Status::ResourceExhausted(
        what + " has" + (complete ? " " : " at least ") + std::to_string(u.files) +
        " files and directories when checked out; the limit is " +
        std::to_string(limits_.max_files) +
        " (push.max_files); remove generated or repeated files and push again");
  if (u.bytes > limits_.max_tree_bytes)
    return Status::ResourceExhausted(
        what + is + FormatBytes(u.bytes) + " when checked out; the limit is " +
        FormatBytes(limits_.max_tree_bytes) +
        " (push.max_tree_bytes); remove large or repeated files and push again");
  return Status::Ok();
}

Status TreeLimitChecker::Check(const std::string& tree_id, const std::string& what,
                               TreeUsage* usage) {
  TreeUsage local;
  TreeUsage& u = usage ? *usage : local;
  u = TreeUsage();
  if (!IsFullId(tree_id))
    return Status::InvalidArgument("not a full tree id: '" + Printable(tree_id) + "'");

  // Trees still to read: the root, or (when earlier checks shared objects) whatever below it
  // is not read yet.
  std::vector<std::string> frontier;
  {
    std::set<std::string> seen;
    std::vector<std::string> stack{tree_id};
    if (!trees_.count(tree_id)) tree_path_[tree_id] = "";
    while (!stack.empty()) {
      std::string id = stack.back();
      stack.pop_back();
      if (!seen.insert(id).second) continue;
      Node& n = trees_[id];
      if (!n.read) {
        frontier.push_back(id);
        continue;
      }
      for (const TreeEntry& e : n.entries)
        if (e.kind == TreeEntry::Kind::kTree) stack.push_back(e.id);
    }
  }

  auto evaluate = [&](bool complete) {
    std::map<std::string, Sum> memo;
    Sum s = Expand(tree_id, 0, &memo);
    u.bytes = s.bytes;
    u.files = s.files;
    u.depth = static_cast<int>(std::min<int64_t>(s.depth, limits_.max_depth + 1));
    return Exceeded(what, u, complete);
  };

  std::set<std::string> queued(frontier.begin(), frontier.end());
  int64_t distinct_entries = 0;
  while (!frontier.empty()) {
    std::vector<std::string> next;
    for (size_t at = 0; at < frontier.size(); at += kChunk) {
      std::vector<std::string> chunk(frontier.begin() + at,
                                     frontier.begin() + std::min(frontier.size(), at + kChunk));
      std::map<std::string, std::vector<TreeEntry>> got;
      ++u.git_runs;
      Status s = source_->ReadTrees(chunk, &got);
      if (!s.ok()) return s;
      std::vector<std::string> new_blobs;
      for (const std::string& id : chunk) {
        Node& n = trees_[id];
        n.entries = std::move(got[id]);
        n.read = true;
        ++u.objects_read;
        distinct_entries += static_cast<int64_t>(n.entries.size());
        const std::string dir = tree_path_[id];
        for (const TreeEntry& e : n.entries) {
          if (e.kind == TreeEntry::Kind::kBlob) {
            if (blobs_.count(e.id) || blob_path_.count(e.id)) continue;
            blob_path_[e.id] = JoinPath(dir, e.name);
            new_blobs.push_back(e.id);
          } else if (e.kind == TreeEntry::Kind::kTree && !trees_[e.id].read &&
                     queued.insert(e.id).second) {
            if (!tree_path_.count(e.id)) tree_path_[e.id] = JoinPath(dir, e.name);
            next.push_back(e.id);
          }
        }
      }
      // Every entry of every distinct tree appears at least once in the expansion: a cheap
      // bound that also caps how many blob sizes are asked for.
      if (distinct_entries > limits_.max_files) {
        u.files = distinct_entries;
        return Exceeded(what, u, false);
      }
      for (size_t b = 0; b < new_blobs.size(); b += kChunk) {
        std::vector<std::string> ids(new_blobs.begin() + b,
                                     new_blobs.begin() + std::min(new_blobs.size(), b + kChunk));
        std::map<std::string, int64_t> sizes;
        ++u.git_runs;
        s = source_->BlobSizes(ids, &sizes);
        if (!s.ok()) return s;
        for (const std::string& id : ids) {
          int64_t size = sizes.count(id) ? sizes[id] : 0;
          blobs_[id] = size;
          ++u.objects_read;
          if (size > u.largest_file) {
            u.largest_file = size;
            largest_path_ = blob_path_[id];
          }
        }
        if (u.largest_file > limits_.max_file_bytes) return Exceeded(what, u, false);
      }
      const bool pending = at + kChunk < frontier.size() || !next.empty();
      s = evaluate(/*complete=*/!pending);
      if (!s.ok()) return s;
    }
    frontier = std::move(next);
  }
  // Everything below the root is read: the largest file over the whole tree, exactly.
  u.largest_file = 0;
  {
    std::set<std::string> seen;
    std::vector<std::string> stack{tree_id};
    while (!stack.empty()) {
      std::string id = stack.back();
      stack.pop_back();
      if (!seen.insert(id).second) continue;
      for (const TreeEntry& e : trees_[id].entries) {
        if (e.kind == TreeEntry::Kind::kTree) stack.push_back(e.id);
        if (e.kind == TreeEntry::Kind::kBlob && blobs_[e.id] > u.largest_file) {
          u.largest_file = blobs_[e.id];
          largest_path_ = blob_path_[e.id];
        }
      }
    }
  }
  return evaluate(true);
}

// ---------------------------------------------------------------------------------------------
// Pre-receive

Status ParseRefUpdates(const std::string& input, std::vector<RefUpdate>* out) {
  out->clear();
  std::istringstream in(input);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> f = Fields(line);
    if (f.size() != 3 || !IsFullId(f[0]) || !IsFullId(f[1]) || f[2].size() > 1024)
      return Status::InvalidArgument("malformed ref update line: '" + Printable(line) + "'");
    out->push_back({f[0], f[1], f[2]});
  }
  return Status::Ok();
}

Status CheckPush(const std::vector<RefUpdate>& updates, const TreeLimits& limits,
                 ObjectSource* source) {
  if (static_cast<int64_t>(updates.size()) > limits.max_refs_per_push)
    return Status::ResourceExhausted(
        "this push updates " + std::to_string(updates.size()) + " refs; the limit is " +
        std::to_string(limits.max_refs_per_push) +
        " per push (push.max_refs_per_push); push fewer branches at a time");
  TreeLimitChecker checker(limits, source);  // shared: objects common to several refs read once
  for (const RefUpdate& u : updates) {
    if (AllZero(u.new_id)) continue;  // a deletion writes nothing
    std::string tree;
    Status s = source->TreeOf(u.new_id, &tree);
    if (!s.ok()) return s;
    s = checker.Check(tree, "tree of " + Printable(u.ref), nullptr);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace kiln
