// The agent's side of workspace sync, shared by the end-to-end tests: a candidate is a copy of
// examples/epp committed on a branch and pushed to kiln over git smart HTTP, with the domain
// token in a header (never in argv or the URL).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");

export const sh = (cmd, args, opts = {}) =>
  execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts }).toString();

/// git push -f HEAD to refs/heads/<branch> of http://127.0.0.1:<port>/git/<domain>.git.
export function gitPush(w, { port, domain, branch, token, extra = [] }) {
  return sh("git", ["push", "-q", "-f", ...extra, `http://127.0.0.1:${port}/git/${domain}.git`, `HEAD:refs/heads/${branch}`], {
    cwd: w,
    env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader",
      GIT_CONFIG_VALUE_0: `Authorization: Bearer ${token}` },
  });
}

/// Copies examples/epp into a new directory under `dir`, lets `mutate(w)` edit it, commits and
/// pushes it as <branch>. Returns the commit.
export function pushCandidate(dir, { port, domain, branch, token, mutate }) {
  const w = fs.mkdtempSync(path.join(dir, `w-${domain}-${branch}-`));
  fs.cpSync(path.join(root, "examples/epp"), w, { recursive: true });
  if (mutate) mutate(w);
  const git = (...a) => sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", ...a], { cwd: w });
  git("init", "-q");
  git("add", "-A");
  git("commit", "-qm", `candidate ${branch}`);
  gitPush(w, { port, domain, branch, token });
  return sh("git", ["rev-parse", "HEAD"], { cwd: w }).trim();
}
