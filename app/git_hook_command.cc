#include "app/git_hook_command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <utility>

#include "workspace/git_runner.h"

namespace kiln {
namespace {

struct Flag {
  const char* name;
  int64_t TreeLimits::*field;
};
const Flag kFlags[] = {
    {"--max-tree-bytes", &TreeLimits::max_tree_bytes},
    {"--max-files", &TreeLimits::max_files},
    {"--max-file-bytes", &TreeLimits::max_file_bytes},
    {"--max-refs-per-push", &TreeLimits::max_refs_per_push},
};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

bool ParseGitHookFlags(const std::vector<std::string>& flags, TreeLimits* out, std::string* error) {
  *out = TreeLimits();
  for (const std::string& f : flags) {
    size_t eq = f.find('=');
    const Flag* match = nullptr;
    for (const Flag& k : kFlags)
      if (f.compare(0, eq, k.name) == 0 && eq == std::string(k.name).size()) match = &k;
    if (!match || eq == std::string::npos) {
      *error = "unknown flag '" + f + "'";
      return false;
    }
    const std::string v = f.substr(eq + 1);
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(v) <= 0) {
      *error = std::string(match->name) + " needs a positive integer, got '" + v + "'";
      return false;
    }
    out->*(match->field) = std::stoll(v);
  }
  return true;
}

std::vector<std::string> GitHookFlags(const TreeLimits& limits) {
  std::vector<std::string> out;
  for (const Flag& k : kFlags)
    out.push_back(std::string(k.name) + "=" + std::to_string(limits.*(k.field)));
  return out;
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::string();
  return std::string(buf, static_cast<size_t>(n));
}

int GitHookCommand(const std::vector<std::string>& args, std::istream& in, std::ostream& err) {
  if (args.empty() || args[0] != "pre-receive") {
    err << "kiln git-hook: usage: kiln git-hook pre-receive [--max-tree-bytes=N] [--max-files=N] "
           "[--max-file-bytes=N] [--max-refs-per-push=N] (internal: run by kiln's git hook)\n";
    return 2;
  }
  TreeLimits limits;
  std::string error;
  if (!ParseGitHookFlags(std::vector<std::string>(args.begin() + 1, args.end()), &limits, &error)) {
    err << "kiln git-hook: " << error << "\n";
    return 2;
  }
  std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<RefUpdate> updates;
  Status s = ParseRefUpdates(input, &updates);
  if (s.ok()) {
    std::error_code ec;
    std::string git_dir = Env("GIT_DIR");
    git_dir = std::filesystem::absolute(git_dir.empty() ? "." : git_dir, ec).string();
    // GitRunner starts git with a clean environment: pass on what git told the hook about
    // where this push's (quarantined) objects are.
    std::vector<std::pair<std::string, std::string>> env;
    for (const char* name :
         {"GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_QUARANTINE_PATH"}) {
      std::string v = Env(name);
      if (!v.empty()) env.emplace_back(name, v);
    }
    GitObjectSource objects([&](GitCommand cmd, GitResult* r) {
      cmd.git_dir = git_dir;
      cmd.home = git_dir;
      cmd.env.insert(cmd.env.end(), env.begin(), env.end());
      return DefaultGitRunner()->Run(cmd, r);
    });
    s = CheckPush(updates, limits, &objects);
  }
  if (s.ok()) return 0;
  switch (s.code()) {
    case Status::Code::kResourceExhausted:
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
      err << "kiln: refused: " << s.message() << "\n";
      break;
    default:  // git failed: say so without host details; the push can simply be retried
      err << "kiln: refused: the pushed trees could not be checked (" << Status::CodeName(s.code())
          << "); push again\n";
  }
  return 1;
}

}  // namespace kiln
