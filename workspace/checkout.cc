#include "workspace/checkout.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>

#include "common/file_util.h"
#include "common/names.h"
#include "common/safe_remove.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct Layout {
  std::string ws;     // normalized absolute workspace dir
  std::string index;  // <parent>/index
  std::string lock;   // <parent>/checkout.lock
  std::string state;  // <parent>/checked-out
};

Status MakeLayout(const std::string& workspace_dir, Layout* l) {
  if (workspace_dir.empty() || workspace_dir[0] != '/')
    return Status::InvalidArgument("workspace path must be absolute: '" + workspace_dir + "'");
  fs::path ws = fs::path(workspace_dir).lexically_normal();
  if (!ws.has_filename()) ws = ws.parent_path();  // trailing slash
  if (ws == ws.root_path()) return Status::InvalidArgument("workspace must not be '/'");
  fs::path parent = ws.parent_path();
  l->ws = ws.string();
  l->index = (parent / "index").string();
  l->lock = (parent / "checkout.lock").string();
  l->state = (parent / "checked-out").string();
  return Status::Ok();
}

// Reads "<id> <tree>" from the state file; empty strings when absent or malformed.
void ReadState(const std::string& path, std::string* id, std::string* tree) {
  std::ifstream f(path);
  if (!(f >> *id >> *tree)) id->clear(), tree->clear();
}

// git reports a write that failed for lack of space without the reason ("unable to write file
// X"), and so does WriteFileAtomic: when the workspace's file system is (nearly) out of blocks
// or inodes, say so.
Status NoteFullDisk(Status s, const std::string& dir) {
  constexpr uint64_t kFullBelowBytes = 64 << 10;
  struct statvfs v;
  if (s.ok() || ::statvfs(dir.c_str(), &v) != 0) return s;
  const bool root = ::geteuid() == 0;  // root may also use the blocks and inodes reserved for it
  const uint64_t free_bytes = uint64_t{root ? v.f_bfree : v.f_bavail} * v.f_frsize;
  const uint64_t free_inodes = root ? v.f_ffree : v.f_favail;
  if (free_bytes >= kFullBelowBytes && (v.f_files == 0 || free_inodes > 0)) return s;
  return Status::ResourceExhausted(
      "no space left on device (the workspace's file system is full): " + s.message());
}

int64_t CountNul(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (c == '\0');
  return n;
}

// Runs git commands on one workspace with its own index.
class WorkspaceGit {
 public:
  WorkspaceGit(const GitRepo& repo, const Layout& l) : repo_(repo), l_(l) {}

  // Runs git; non-zero exit → Internal("git <args[0]>: <stderr>").
  Status Run(std::vector<std::string> args, GitResult* r, bool allow_exit_1 = false) {
    GitCommand cmd;
    cmd.args = std::move(args);
    cmd.work_tree = l_.ws;
    cmd.cwd = l_.ws;
    cmd.env = {{"GIT_INDEX_FILE", l_.index}};
    Status s = repo_.RunGit(cmd, r);
    if (!s.ok()) return s;
    if (r->exit_code != 0 && !(allow_exit_1 && r->exit_code == 1))
      return Status::Internal("git " + cmd.args[0] + " failed: " + r->ErrorSummary());
    return Status::Ok();
  }

  // clean, refresh, read-tree --reset -u, verify. Any failure or difference → non-OK.
  // The refresh re-hashes the files whose stat data no longer matches the index (a layered
  // build's chown to the build user changes every ctime) and records the new stat data of those
  // whose content is unchanged. Without it `read-tree --reset -u` rewrites every stat-dirty file:
  // every file of the tree on every layered build (new mtimes, cold mtime-based caches). With
  // it, only files whose content differs from the index are written. Safe against a build that
  // edits a file and restores its mtime: the edit changes the ctime (which nobody can set),
  // so the file is re-hashed and, its content differing, rewritten (git's defaults
  // core.trustctime and core.checkStat; kiln's repositories never change them).
  // `alongside` (optional) runs on another thread while the verification runs (read-only work
  // on the repository, e.g. the diff for the stats): one git start less on the critical path.
  Status Sync(const std::string& tree, bool refresh, const std::function<void()>& alongside = {}) {
    Status s = Prepare(refresh);
    return s.ok() ? Finish(tree, alongside) : s;
  }
  // The first half of Sync: clean, then (refresh) the stat refresh. Neither changes a tracked
  // file's content, so it may run before the tree is known to be within the limits.
  Status Prepare(bool refresh) {
    GitResult r;
    Status s = Run({"clean", "-ffdxq"}, &r);
    // Exit 1: some files still differ (read-tree rewrites them).
    if (s.ok() && refresh) s = Run({"update-index", "-q", "--refresh"}, &r, /*allow_exit_1=*/true);
    return s;
  }
  // The second half: read-tree --reset -u, then the verification (with `alongside`).
  Status Finish(const std::string& tree, const std::function<void()>& alongside = {}) {
    GitResult r;
    Status s = Run({"read-tree", "--reset", "-u", "--end-of-options", tree}, &r);
    if (s.ok()) {
      std::future<void> side;
      if (alongside) side = std::async(std::launch::async, alongside);
      s = Verify();
      if (side.valid()) side.get();
    }
    return s;
  }

  // The work tree equals the index: no modified or deleted tracked file, no untracked entry
  // (ignore rules are not consulted, so ignored files count too).
  Status Verify() {
    GitResult r;
    Status s = Run({"ls-files", "-z", "--modified", "--deleted", "--others", "--directory"}, &r);
    if (!s.ok()) return s;
    if (!r.out.empty())
      return Status::Internal("work tree differs from the tree after checkout: '" +
                              r.out.substr(0, std::min<size_t>(r.out.find('\0'), 200)) + "'");
    return Status::Ok();
  }

 private:
  const GitRepo& repo_;
  const Layout& l_;
};

Status EmptyDirectory(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) return Status::Internal("cannot empty workspace " + dir + ": " + ec.message());
  // The build user may write the workspace (layered builds): never follow what it planted.
  for (const std::string& name : names) {
    Status st = RemoveTreeBeneath(dir, name);
    if (!st.ok()) return Status::Internal("cannot empty workspace " + dir + ": " + st.message());
  }
  return Status::Ok();
}

bool IsFullObjectId(const std::string& id) {
  return (id.size() == 40 || id.size() == 64) && ValidateCommit(id).ok();
}

}  // namespace

std::string Checkout::IndexPath(const std::string& workspace_dir) {
  Layout l;
  if (!MakeLayout(workspace_dir, &l).ok()) return std::string();
  return l.index;
}

Status Checkout::CheckedOut(const std::string& workspace_dir, std::string* id) {
  Layout l;
  Status s = MakeLayout(workspace_dir, &l);
  if (!s.ok()) return s;
  std::string tree;
  ReadState(l.state, id, &tree);
  if (id->empty()) return Status::NotFound("no completed checkout in " + l.ws);
  return Status::Ok();
}

Status Checkout::Update(const GitRepo& repo, const std::string& commit_or_tree,
                        const std::string& workspace_dir, CheckoutStats* stats,
                        const std::string& known_tree) {
  auto start = std::chrono::steady_clock::now();
  CheckoutStats local;
  if (!stats) stats = &local;
  *stats = CheckoutStats();
  if (!IsFullObjectId(commit_or_tree) || (!known_tree.empty() && !IsFullObjectId(known_tree)))
    return Status::InvalidArgument("checkout needs a full lowercase hex commit or tree id, got '" +
                                   commit_or_tree.substr(0, 80) + "'");
  Layout l;
  Status s = MakeLayout(workspace_dir, &l);
  if (!s.ok()) return s;
  std::error_code ec;
  fs::create_directories(l.ws, ec);
  if (ec) return Status::Internal("cannot create workspace " + l.ws + ": " + ec.message());

  WorkspaceGit git(repo, l);
  std::string tree = known_tree;  // issue 18: the resolve step's answer, one git start less
  if (tree.empty()) {
    GitResult r;
    s = git.Run(
        {"rev-parse", "--verify", "--quiet", "--end-of-options", commit_or_tree + "^{tree}"}, &r,
        /*allow_exit_1=*/true);
    if (!s.ok()) return s;
    if (r.exit_code == 1 || r.out.size() < 40)
      return Status::NotFound("no commit or tree " + commit_or_tree + " in domain repository");
    tree = r.out.substr(0, r.out.find('\n'));
  }

  FileLock lock(l.lock, LOCK_EX);
  if (!lock.held()) return Status::Internal(lock.error());
  std::string old_id, old_tree;
  ReadState(l.state, &old_id, &old_tree);
  ::unlink((l.index + ".lock").c_str());  // stale after a crash; we hold the workspace lock
  bool fast = !old_tree.empty() && fs::exists(l.index, ec);

  // Issue 15: a tree that expands beyond the limits (a "git bomb" pushed before the limits held,
  // or inserted by other means) is refused before any tracked file in the workspace is touched.
  // Issue 18: the check (git cat-file, read-only on the repository) runs while the workspace is
  // cleaned and its stat data refreshed (neither changes a tracked file), not before.
  auto limits = std::async(std::launch::async, [&repo, &tree, &commit_or_tree] {
    GitObjectSource objects(
        [&repo](GitCommand cmd, GitResult* res) { return repo.RunGit(std::move(cmd), res); });
    return TreeLimitChecker(repo.tree_limits(), &objects)
        .Check(tree, "tree of " + commit_or_tree.substr(0, 12), nullptr);
  });
  Status prepared = fast ? git.Prepare(/*refresh=*/true) : Status::Ok();
  s = limits.get();
  if (!s.ok()) return s;
  ::unlink(l.state.c_str());  // "update in progress" until rewritten below

  if (fast) {
    int64_t changed = 0;
    auto count_changed = [&] {
      GitResult diff;
      if (git.Run({"diff-tree", "-r", "-z", "--name-only", "--no-renames", "--end-of-options",
                   old_tree, tree},
                  &diff)
              .ok())
        changed = CountNul(diff.out);
    };
    s = prepared.ok() ? git.Finish(tree, old_tree != tree ? std::function<void()>(count_changed)
                                                          : std::function<void()>())
                      : prepared;
    if (s.ok()) stats->files_written = changed;
  }
  if (!fast || !s.ok()) {
    stats->full_reset = true;
    ::unlink(l.index.c_str());
    s = EmptyDirectory(l.ws);
    if (s.ok()) s = git.Sync(tree, /*refresh=*/false);
    if (!s.ok()) return NoteFullDisk(s, l.ws);
    GitResult files;
    if (git.Run({"ls-files", "-z"}, &files).ok()) stats->files_written = CountNul(files.out);
  }
  // A lost state file only costs a full reset of the workspace next time: no fsync.
  s = WriteFileAtomic(l.state, commit_or_tree + " " + tree + "\n", 0644, Durability::kAtomicOnly);
  stats->elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  return NoteFullDisk(s, l.ws);
}

}  // namespace kiln
