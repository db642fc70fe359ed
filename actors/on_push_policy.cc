#include "actors/on_push_policy.h"

#include <algorithm>

#include "common/names.h"

namespace kiln {
namespace {

constexpr char kHeads[] = "refs/heads/";

bool IsHex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool IsZero(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; });
}

}  // namespace

std::vector<BuildRequest> PushBuilds(const std::vector<PushedRef>& refs, bool enabled) {
  std::vector<BuildRequest> out;
  if (!enabled) return out;
  for (const PushedRef& p : refs) {
    if (p.ref.rfind(kHeads, 0) != 0) continue;
    std::string branch = p.ref.substr(sizeof(kHeads) - 1);
    if (!ValidateName(branch, "candidate").ok()) continue;
    if ((p.commit.size() != 40 && p.commit.size() != 64) || !IsHex(p.commit) || IsZero(p.commit))
      continue;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const BuildRequest& r) { return r.candidate == branch; });
    if (same != out.end()) out.erase(same);  // named twice: the last value counts
    BuildRequest r;
    r.candidate = branch;
    r.commit = p.commit;
    r.wait = false;
    r.on_push = true;
    out.push_back(std::move(r));
  }
  return out;
}

bool JoinsPushBuild(const PushBuildFacts& build, const BuildRequest& req) {
  if (!build.latest || req.on_push || req.source_dir) return false;
  if (build.status == BuildStatus::kCancelled || build.status == BuildStatus::kInterrupted)
    return false;
  if (build.pushed_commit.empty()) return false;
  if (build.claimed && IsFinal(build.status)) return false;
  if (req.ref && *req.ref != build.candidate && *req.ref != kHeads + build.candidate) return false;
  if (req.commit) return build.pushed_commit.rfind(*req.commit, 0) == 0 && !req.commit->empty();
  return true;
}

}  // namespace kiln
