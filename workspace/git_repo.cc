#include "workspace/git_repo.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "common/names.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHeadsPrefix = "refs/heads/";

// Config applied once, when the repository is created.
const std::vector<std::pair<std::string, std::string>>& RepoConfig() {
  static const std::vector<std::pair<std::string, std::string>> config = {
      {"receive.fsckObjects", "true"},
      {"transfer.fsckObjects", "true"},
      {"core.logAllRefUpdates", "false"},
      {"gc.auto", "0"},
      {"receive.autogc", "false"},
      {"uploadpack.allowReachableSHA1InWant", "false"},
      {"receive.denyNonFastForwards", "false"},
      {"receive.denyDeletes", "false"},
  };
  return config;
}

std::string TempSuffix() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::ostringstream s;
  s << ".tmp-" << ::getpid() << "-" << counter++ << "-" << std::hex << rd();
  return s.str();
}

std::string TrimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

bool IsFullHex(const std::string& s) { return s.size() == 40 || s.size() == 64; }

}  // namespace

Status GitRepo::Open(const std::string& path, std::unique_ptr<GitRepo>* out) {
  return Open(path, DefaultGitRunner(), out);
}

Status GitRepo::Open(const std::string& path, GitRunner* runner, std::unique_ptr<GitRepo>* out) {
  if (path.empty() || path[0] != '/')
    return Status::InvalidArgument("repository path must be absolute: '" + path + "'");
  std::string norm = fs::path(path).lexically_normal().string();
  while (norm.size() > 1 && norm.back() == '/') norm.pop_back();
  std::error_code ec;
  if (!fs::exists(fs::path(norm) / "HEAD", ec)) {
    Status s = Create(norm, runner);
    if (!s.ok()) return s;
  }
  std::unique_ptr<GitRepo> repo(new GitRepo(norm, runner));
  GitCommand cmd;
  cmd.args = {"rev-parse", "--is-bare-repository"};
  GitResult r;
  Status s = repo->RunGit(cmd, &r);
  if (!s.ok()) return s;
  if (r.exit_code != 0 || TrimNewline(r.out) != "true")
    return Status::FailedPrecondition("'" + norm + "' exists but is not a bare git repository");
  *out = std::move(repo);
  return Status::Ok();
}

Status GitRepo::Create(const std::string& path, GitRunner* runner) {
  fs::path target(path);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec)
    return Status::Internal("cannot create '" + target.parent_path().string() +
                            "': " + ec.message());
  std::string tmp =
      (target.parent_path() / ("." + target.filename().string() + TempSuffix())).string();

  GitRepo staging(tmp, runner);
  GitCommand init;
  init.args = {"-c",          "init.defaultBranch=main", "init", "--quiet", "--bare",
               "--template=", "--end-of-options",        tmp};
  init.home = tmp;
  GitResult r;
  Status s = runner->Run(init, &r);
  if (s.ok() && r.exit_code != 0) s = Status::Internal("git init failed: " + r.ErrorSummary());
  for (size_t i = 0; s.ok() && i < RepoConfig().size(); ++i) {
    GitCommand cfg;
    cfg.args = {"config", RepoConfig()[i].first, RepoConfig()[i].second};
    s = staging.RunChecked("git config", cfg, &r);
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    // Lost a race with another creator (target now non-empty): theirs is as good as ours.
    if (errno != EEXIST && errno != ENOTEMPTY)
      s = Status::Internal("cannot rename new repository into '" + path + "': " + strerror(errno));
  }
  fs::remove_all(tmp, ec);  // no-op after a successful rename
  return s;
}

Status GitRepo::RunGit(GitCommand cmd, GitResult* result) const {
  cmd.git_dir = path_;
  if (cmd.home.empty()) cmd.home = path_;
  return runner_->Run(cmd, result);
}

Status GitRepo::RunChecked(const std::string& what, GitCommand cmd, GitResult* result) const {
  Status s = RunGit(std::move(cmd), result);
  if (!s.ok()) return s;
  if (result->exit_code != 0) return Status::Internal(what + " failed: " + result->ErrorSummary());
  return Status::Ok();
}

Status GitRepo::Resolve(const std::optional<std::string>& ref,
                        const std::optional<std::string>& commit, const std::string& candidate,
                        ResolvedSource* out) const {
  if (commit.has_value()) {
    Status s = ValidateCommit(*commit);
    if (!s.ok()) return s;
    return ResolveCommit(*commit, out);
  }
  std::string branch = ref.has_value() ? *ref : candidate;
  Status s = ValidateRef(branch);
  if (!s.ok()) return s;
  if (branch.compare(0, 11, kHeadsPrefix) == 0) branch.erase(0, 11);
  if (branch == "HEAD") return Status::InvalidArgument("ref must be a branch, not HEAD");
  return ResolveBranch(branch, out);
}

Status GitRepo::ResolveBranch(const std::string& branch, ResolvedSource* out) const {
  bool found = false;
  Status s = PeelCommit(kHeadsPrefix + branch, out, &found);
  if (!s.ok()) return s;
  if (!found)
    return Status::NotFound("branch '" + branch +
                            "' not found in domain repository; push it first: git push <kiln>/git/"
                            "<domain>.git HEAD:refs/heads/" +
                            branch);
  return Status::Ok();
}

// Issue 18: the commit and its tree from ONE git start (`cat-file --batch` prints the commit
// object, whose first line names its tree), read together so a concurrent push cannot pair a
// commit with another commit's tree. `rev` is a full ref or a full hex id (no newline).
Status GitRepo::PeelCommit(const std::string& rev, ResolvedSource* out, bool* found) const {
  *found = false;
  GitCommand cmd;
  cmd.args = {"cat-file", "--batch"};
  cmd.stdin_data = rev + "^{commit}\n";
  GitResult r;
  Status s = RunChecked("git cat-file", cmd, &r);
  if (!s.ok()) return s;
  // "<oid> commit <size>\n<body>" where the body starts "tree <oid>\n"; else "<rev> missing".
  const size_t eol = r.out.find('\n');
  const std::string head = r.out.substr(0, eol);
  const size_t sp = head.find(' ');
  if (eol == std::string::npos || sp == std::string::npos || head.compare(sp, 8, " commit ") != 0 ||
      !IsFullHex(head.substr(0, sp)))
    return Status::Ok();  // missing (or not a commit): not found
  const size_t tree_end = r.out.find('\n', eol + 1);
  const std::string tree_line =
      tree_end == std::string::npos ? "" : r.out.substr(eol + 1, tree_end - eol - 1);
  if (tree_line.compare(0, 5, "tree ") != 0 || !IsFullHex(tree_line.substr(5)))
    return Status::Internal("git cat-file: commit " + head.substr(0, sp) + " names no tree");
  out->commit = head.substr(0, sp);
  out->tree = tree_line.substr(5);
  *found = true;
  return Status::Ok();
}

Status GitRepo::ResolveCommit(const std::string& commit, ResolvedSource* out) const {
  GitResult r;
  if (IsFullHex(commit)) {
    // A full-length hex id is always an object id to git, never a ref name.
    bool found = false;
    Status s = PeelCommit(commit, out, &found);
    if (!s.ok()) return s;
    if (!found) return Status::NotFound("commit " + commit + " not found in domain repository");
    return Status::Ok();
  }
  // Abbreviated: list the objects with that prefix (objects only, never refs), keep commits.
  GitCommand list;
  list.args = {"rev-parse", "--disambiguate=" + commit};
  Status s = RunChecked("git rev-parse --disambiguate", list, &r);
  if (!s.ok()) return s;
  std::vector<std::string> candidates = SplitLines(r.out);
  std::vector<std::string> commits;
  if (!candidates.empty()) {
    GitCommand types;
    types.args = {"cat-file", "--batch-check=%(objectname) %(objecttype)"};
    for (const auto& c : candidates) types.stdin_data += c + "\n";
    s = RunChecked("git cat-file", types, &r);
    if (!s.ok()) return s;
    for (const auto& line : SplitLines(r.out)) {
      size_t sp = line.find(' ');
      if (sp != std::string::npos && line.substr(sp + 1) == "commit")
        commits.push_back(line.substr(0, sp));
    }
  }
  if (commits.empty()) return Status::NotFound("no commit " + commit + " in domain repository");
  if (commits.size() > 1)
    return Status::NotFound("abbreviated commit " + commit + " is ambiguous (" +
                            std::to_string(commits.size()) +
                            " commits match); give more hex digits");
  out->commit = commits[0];
  return FillTree(out);
}

Status GitRepo::FillTree(ResolvedSource* out) const {
  GitCommand cmd;
  cmd.args = {"rev-parse", "--verify", "--end-of-options", out->commit + "^{tree}"};
  GitResult r;
  Status s = RunChecked("git rev-parse", cmd, &r);
  if (!s.ok()) return s;
  out->tree = TrimNewline(r.out);
  return Status::Ok();
}

Status GitRepo::ListBranches(std::vector<std::pair<std::string, std::string>>* out) const {
  GitCommand cmd;
  cmd.args = {"for-each-ref", "--format=%(refname) %(objectname)", kHeadsPrefix};
  GitResult r;
  Status s = RunChecked("git for-each-ref", cmd, &r);
  if (!s.ok()) return s;
  out->clear();
  // Ref names cannot contain spaces (git check-ref-format), so "name sha" splits cleanly.
  for (const auto& line : SplitLines(r.out)) {
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos || line.compare(0, 11, kHeadsPrefix) != 0) continue;
    out->emplace_back(line.substr(11, sp - 11), line.substr(sp + 1));
  }
  return Status::Ok();
}

}  // namespace kiln
