// End to end (issue 18, build on push): the real `kiln serve` (rootless buildah, docker-registry
// with htpasswd auth, git over smart HTTP) driven by the official MCP TypeScript SDK client.
//   1. A push starts the candidate's build at once; a following build_candidate joins it (same
//      build id, joined: true, started_on_push: true), with or without the commit. A pushed
//      branch that is not a candidate name starts nothing.
//   2. A second push supersedes the first push's build (cancelled, "superseded"); the agent's
//      build_candidate joins the newer one.
//   3. One push of three branches: their builds keep to the domain's build slots (one builds,
//      the others wait queued).
//   4. A domain with build.on_push false builds nothing until build_candidate is called.
// No timed assertion: the build a push starts is visible to any call made after the push returned
// (kiln tells the domain before it finishes the push's response).
//
//   tests/e2e/run_e2e.sh build/app/kiln onpush_e2e.test.mjs
// Ports: registry 5213, kiln 18813. ~3 min.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { sh, gitPush, pushCandidate } from "./agent_git.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5213;
const PORT = 18813;
const HANG = "kiln-onpush-e2e-hang";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-onpush-e2e-"));
const regDir = path.join(dir, "registry");
const tokens = { on: rnd(), off: rnd() };
let kiln;
let kilnLog = "";

function rnd() { return crypto.randomBytes(24).toString("hex"); }
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const long = { timeout: 600_000 };

async function until(what, fn, ms = 60_000, step = 200) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await sleep(step);
  }
  assert.fail(`timed out after ${ms} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

const procs = (pattern) => spawnSync("pgrep", ["-af", pattern], { encoding: "utf8" }).stdout
  .split("\n").filter((l) => l.trim() !== "");

async function connect(domain) {
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${tokens[domain]}` } },
  });
  const client = new Client({ name: "kiln-onpush-e2e", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, long);
  return { ...res.structuredContent, isError: res.isError };
}

const containerfile = (run) => (w) => fs.writeFileSync(path.join(w, "Containerfile"),
  `ARG KILN_REGISTRY\nFROM \${KILN_REGISTRY}/kiln/busybox:1\n${run}\n`);
const push = (d, branch, run) =>
  pushCandidate(dir, { port: PORT, domain: d, branch, token: tokens[d], mutate: containerfile(run) });

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  const domain = (d, build = {}) => ({
    token_sha256: [sha(tokens[d])],
    max_parallel_builds: 1,
    build: { mode: "containerfile", timeout_s: 600, ...build },
    image: { registry: "local", repository: `onpush/${d}` },
  });
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: path.join(dir, "state") },
    scheduler: { max_parallel_builds: 2 },
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: { on: domain("on"), off: domain("off", { on_push: false }) },
  }));
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  await until("kiln /healthz", async () => {
    assert.equal(kiln.exitCode, null, `kiln exited: ${kilnLog}`);
    try { return (await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok; } catch { return false; }
  }, 60_000, 100);
});

after(async () => {
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await exited;
  }
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch {}
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
});

test("a push starts the build; build_candidate joins it", long, async (t) => {
  const client = await connect("on");
  const commit = push("on", "c1", "RUN echo fine > /fine");
  // Asked right after the push returned: the push's build already exists.
  const st = await call(client, "candidate_status", { candidate: "c1" });
  assert.equal(st.isError, false, JSON.stringify(st));
  assert.equal(st.latest_build.started_on_push, true, JSON.stringify(st.latest_build));
  assert.equal(st.latest_build.joined, false);
  const pushed = st.latest_build.build_id;
  assert.match(pushed, /^b-[0-9a-f]{16}$/);

  const b = await call(client, "build_candidate", { candidate: "c1" });
  assert.equal(b.status, "succeeded", JSON.stringify(b).slice(0, 2000));
  assert.equal(b.build_id, pushed, "build_candidate joined the push's build");
  assert.equal(b.joined, true);
  assert.equal(b.started_on_push, true);
  assert.equal(b.commit, commit);
  assert.equal(typeof b.timings.waited_ms, "number");
  assert.ok(b.timings.waited_ms >= 0);
  t.diagnostic(`waited ${b.timings.waited_ms} ms of a ${b.timings.total_ms} ms build`);
  // The push's build stood for the call after the push; asking again is a new request (as
  // without build on push): a cache hit of the same image.
  const again = await call(client, "build_candidate", { candidate: "c1", commit: commit.slice(0, 12) });
  assert.equal(again.status, "succeeded", JSON.stringify(again).slice(0, 1000));
  assert.notEqual(again.build_id, pushed);
  assert.equal(again.joined, false);
  assert.equal(again.started_on_push, false);
  assert.equal(again.cache_hit, true);
  assert.equal(again.image.digest, b.image.digest);
  // A push build is joined with the pushed commit given (abbreviated) too.
  const commit3 = push("on", "c3", "RUN echo three > /three");
  const pushed3 = (await call(client, "candidate_status", { candidate: "c3" })).latest_build.build_id;
  const b3 = await call(client, "build_candidate", { candidate: "c3", commit: commit3.slice(0, 12) });
  assert.equal(b3.build_id, pushed3, JSON.stringify(b3).slice(0, 1000));
  assert.equal(b3.joined, true);
  assert.equal(b3.status, "succeeded");
  // A branch that is not a candidate name is accepted by git but starts no build.
  const tw = fs.mkdtempSync(path.join(dir, "w-team-"));
  containerfile("RUN echo team > /team")(tw);
  sh("git", ["init", "-q"], { cwd: tw });
  sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", "add", "-A"], { cwd: tw });
  sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", "team"], { cwd: tw });
  gitPush(tw, { port: PORT, domain: "on", branch: "team/x", token: tokens.on });
  const list = await call(client, "list_candidates", {});
  assert.deepEqual(list.candidates.map((c) => c.candidate).sort(), ["c1", "c3"], JSON.stringify(list));
  await client.close();
});

test("a second push supersedes the first push's build", long, async () => {
  const client = await connect("on");
  push("on", "c2", `RUN sleep 3603 # ${HANG}-c2`);
  const first = (await call(client, "candidate_status", { candidate: "c2" })).latest_build;
  assert.equal(first.started_on_push, true, JSON.stringify(first));
  const commit = push("on", "c2", "RUN echo second > /second");
  const second = (await call(client, "candidate_status", { candidate: "c2" })).latest_build;
  assert.equal(second.started_on_push, true, JSON.stringify(second));
  assert.notEqual(second.build_id, first.build_id, "the newer push started a new build");
  const b = await call(client, "build_candidate", { candidate: "c2" });
  assert.equal(b.status, "succeeded", JSON.stringify(b).slice(0, 2000));
  assert.equal(b.build_id, second.build_id);
  assert.equal(b.joined, true);
  assert.equal(b.commit, commit);
  // The first one ended as superseded.
  const old = await call(client, "cancel_build", { build_id: first.build_id });
  assert.equal(old.status, "cancelled", JSON.stringify(old));
  assert.equal(old.note, "build had already finished");
  const log = await call(client, "build_log", { build_id: first.build_id });
  assert.match(log.text, /superseded by build /);
  await until("the superseded build's process to end", () => procs(`${HANG}-c2`).length === 0, 60_000);
  await client.close();
});

test("one push of several branches keeps to the domain's build slots", long, async (t) => {
  const client = await connect("on");
  // Three branches with different trees (no deduplication), pushed in one `git push`.
  const w = fs.mkdtempSync(path.join(dir, "w-multi-"));
  const git = (...a) => sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", ...a], { cwd: w });
  git("init", "-q");
  const specs = [];
  for (const n of ["h1", "h2", "h3"]) {
    git("checkout", "-q", "--orphan", n);
    containerfile(`RUN sleep 3603 # ${HANG}-${n}`)(w);
    git("add", "-A");
    git("commit", "-qm", n);
    specs.push(`${n}:refs/heads/${n}`);
  }
  sh("git", ["push", "-q", `http://127.0.0.1:${PORT}/git/on.git`, ...specs], {
    cwd: w,
    env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader",
      GIT_CONFIG_VALUE_0: `Authorization: Bearer ${tokens.on}` },
  });
  const ids = {};
  for (const n of ["h1", "h2", "h3"]) {
    const lb = (await call(client, "candidate_status", { candidate: n })).latest_build;
    assert.equal(lb?.started_on_push, true, `${n}: ${JSON.stringify(lb)}`);
    ids[n] = lb.build_id;
  }
  // Domain "on" holds one slot (max_parallel_builds 1) although the scheduler has two.
  const phases = await until("one pushed build building, two queued", async () => {
    const p = [];
    for (const n of ["h1", "h2", "h3"]) p.push((await call(client, "candidate_status", { candidate: n })).latest_build?.phase);
    return p.filter((x) => x === "building").length === 1 && p.filter((x) => x === "queued").length === 2 ? p : null;
  }, 240_000, 250);
  t.diagnostic(`phases: ${phases.join(", ")}`);
  for (const n of ["h3", "h2", "h1"])
    assert.equal((await call(client, "cancel_build", { build_id: ids[n] })).isError, false);
  await until("the pushed builds to end", () => procs(`${HANG}-h`).length === 0, 60_000);
  await client.close();
});

test("build.on_push false: nothing is built until build_candidate", long, async () => {
  const client = await connect("off");
  const commit = push("off", "c1", "RUN echo off > /off");
  const st = await call(client, "candidate_status", { candidate: "c1" });
  assert.equal(st.state, "unknown", JSON.stringify(st));
  assert.equal(st.latest_build, null);
  const b = await call(client, "build_candidate", { candidate: "c1" });
  assert.equal(b.status, "succeeded", JSON.stringify(b).slice(0, 2000));
  assert.equal(b.started_on_push, false);
  assert.equal(b.joined, false);
  assert.equal(b.commit, commit);
  assert.equal(typeof b.timings.waited_ms, "number");
  await client.close();
});
