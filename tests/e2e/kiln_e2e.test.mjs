// End-to-end: the real `kiln serve` (real buildah, real docker-registry with htpasswd auth on
// 127.0.0.1) driven by the official MCP TypeScript SDK client, as an agent would.
//
//   KILN=build/app/kiln node --test tests/e2e/kiln_e2e.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { sh, gitPush as agentPush, pushCandidate } from "./agent_git.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = process.env.KILN ?? path.join(root, "build/app/kiln");
const REG_PORT = Number(process.env.KILN_E2E_REGISTRY_PORT ?? 5104);
const PORT = Number(process.env.KILN_E2E_PORT ?? 18714);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-e2e-"));
const regDir = path.join(dir, "registry");
const tokenA = crypto.randomBytes(24).toString("hex");
const tokenB = crypto.randomBytes(24).toString("hex");
const url = `http://127.0.0.1:${PORT}/mcp`;
let kiln;
let kilnLog = "";

const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");

function pushBranch(domain, branch, mutate) {
  return pushCandidate(dir, { port: PORT, domain, branch, token: domain === "epp" ? tokenA : tokenB, mutate });
}

// The agent's push: git smart HTTP to kiln with the domain token in a header (not in argv).
function gitPush(w, domain, branch, token = domain === "epp" ? tokenA : tokenB, extra = []) {
  return agentPush(w, { port: PORT, domain, branch, token, extra });
}

async function connect(token = tokenA) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "kiln-e2e", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

const long = { timeout: 600_000 };

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  const domain = (token, repo, extra = {}) => ({
    token_sha256: [sha(token)],
    build: { mode: "containerfile", timeout_s: 600, on_push: false },  // issue 18: this suite times progress and cache hits against build calls (onpush_e2e covers the default)
    image: { registry: "local", repository: repo },
    ...extra,
  });
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: path.join(dir, "state") },
    scheduler: { max_parallel_builds: 2 },
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: {
      epp: domain(tokenA, "e2e/epp", { tool_aliases: { build_epp: "build_candidate" } }),
      other: domain(tokenB, "e2e/other"),
    },
  }));
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) break; } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  pushBranch("epp", "good");
  pushBranch("epp", "bad", (w) => {
    const f = path.join(w, "internal/scorer/scorer.go");
    fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace(/s \+= w\.Adapter$/m, "s += w.AdapterPenalty"));
  });
  pushBranch("epp", "slow", (w) => {
    const f = path.join(w, "Containerfile");
    fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace("WORKDIR /src", "WORKDIR /src\nRUN sleep 120 # kiln-e2e-slow-marker"));
  });
});

after(async () => {
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await exited;
  }
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch {}
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
  assert.ok(!kilnLog.includes(tokenA) && !kilnLog.includes(tokenB), "tokens never reach the log");
});

test("connect, list tools with schemas and aliases", async () => {
  const { client } = await connect();
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ["build_candidate", "candidate_status", "build_log", "cancel_build", "list_candidates", "build_epp"])
    assert.ok(names.includes(n), `has ${n}`);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object");
    assert.ok(t.outputSchema, `${t.name} has outputSchema`);
    assert.ok(t.description.length > 10);
  }
  assert.equal(tools.find((t) => t.name === "candidate_status").annotations.readOnlyHint, true);
  await client.close();
});

test("build with progress while a concurrent status call answers; rebuild is a cache hit", async () => {
  const { client } = await connect();
  const progress = [];
  const build = client.callTool({ name: "build_candidate", arguments: { candidate: "good" } }, undefined,
    { ...long, onprogress: (p) => progress.push(p) });
  await new Promise((r) => setTimeout(r, 200));
  const st = await client.callTool({ name: "candidate_status", arguments: { candidate: "good" } });
  assert.ok(["resolving", "queued", "building", "pushing", "succeeded"].includes(st.structuredContent.state));
  const res = await build;
  const b = res.structuredContent;
  assert.equal(b.status, "succeeded", JSON.stringify(b));
  assert.equal(res.isError, false);
  assert.match(b.image.digest, /^sha256:[0-9a-f]{64}$/);
  assert.match(b.commit, /^[0-9a-f]{40}$/);
  assert.deepEqual(JSON.parse(res.content[0].text), b);
  assert.ok(progress.length >= 2, `progress notifications: ${progress.length}`);
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
  const again = await client.callTool({ name: "build_epp", arguments: { candidate: "good" } }, undefined, long);
  assert.equal(again.structuredContent.cache_hit, true);
  assert.equal(again.structuredContent.image.digest, b.image.digest);
  await client.close();
});

test("compile error comes back as isError with diagnostics", async () => {
  const { client } = await connect();
  const res = await client.callTool({ name: "build_candidate", arguments: { candidate: "bad" } }, undefined, long);
  assert.equal(res.isError, true);
  const b = res.structuredContent;
  assert.equal(b.status, "failed");
  const d = b.diagnostics.find((x) => x.file === "internal/scorer/scorer.go");
  assert.ok(d, JSON.stringify(b.diagnostics));
  assert.equal(d.line, 20);
  assert.equal(d.severity, "error");
  assert.match(d.message, /AdapterPenalty/);
  const log = await client.callTool({ name: "build_log", arguments: { build_id: b.build_id } });
  assert.equal(log.structuredContent.complete, true);
  assert.match(log.structuredContent.text, /AdapterPenalty/);
  await client.close();
});

test("wait:false returns at once, then poll; cancel via AbortSignal cancels the build", async () => {
  const { client } = await connect();
  const r = await client.callTool({ name: "build_candidate", arguments: { candidate: "slow", wait: false } });
  const id = r.structuredContent.build_id;
  assert.match(id, /^b-[0-9a-f]{16}$/);
  assert.notEqual(r.structuredContent.status, "succeeded");
  // Poll until the slow RUN step runs.
  for (let i = 0; i < 600; i++) {
    const s = await client.callTool({ name: "candidate_status", arguments: { candidate: "slow" } });
    if (s.structuredContent.state === "building") break;
    await new Promise((res) => setTimeout(res, 100));
  }
  // A second, waiting call for the same candidate (no push since) joins the first build;
  // aborting it cancels that build.
  const ac = new AbortController();
  const waiting = client.callTool({ name: "build_candidate", arguments: { candidate: "slow" } }, undefined,
    { ...long, signal: ac.signal });
  await new Promise((res) => setTimeout(res, 1500));
  ac.abort("agent gave up");
  await assert.rejects(waiting);
  let state;
  for (let i = 0; i < 50; i++) {
    const s = await client.callTool({ name: "candidate_status", arguments: { candidate: "slow" } });
    state = s.structuredContent.latest_build.status;
    if (state === "cancelled") break;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(state, "cancelled");
  const first = await client.callTool({ name: "build_log", arguments: { build_id: id } });
  assert.equal(first.isError, false);
  // Cancellation kills the build's whole process tree within a second or so.
  let left = "";
  for (let i = 0; i < 30; i++) {
    left = sh("ps", ["-eo", "pid,ppid,pgid,sid,etimes,args"]).split("\n").filter((l) => l.includes("sleep 120") && !l.includes("ps -eo")).join("\n");
    if (!left) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(left, "", "the slow RUN step's process is gone");
  await client.close();
});

test("16 concurrent calls in one session and across sessions", async () => {
  const sessions = await Promise.all([connect(), connect(), connect(), connect()]);
  const calls = [];
  for (const { client } of sessions)
    for (let i = 0; i < 16; i++)
      calls.push(client.callTool({ name: i % 2 ? "candidate_status" : "list_candidates",
        arguments: i % 2 ? { candidate: "good" } : {} }));
  const results = await Promise.all(calls);
  assert.equal(results.length, 64);
  for (const r of results) assert.equal(r.isError, false);
  for (const { client } of sessions) await client.close();
});

test("wrong token is 401; another domain's build id is not found; unknown session is 404", async () => {
  const bad = await fetch(url, { method: "POST", headers: { Authorization: "Bearer nope", "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }) });
  assert.equal(bad.status, 401);
  assert.match(bad.headers.get("www-authenticate") ?? "", /Bearer/);
  const { client } = await connect();
  const st = await client.callTool({ name: "candidate_status", arguments: { candidate: "good" } });
  const id = st.structuredContent.latest_build.build_id;
  const other = await connect(tokenB);
  const foreign = await other.client.callTool({ name: "build_log", arguments: { build_id: id } });
  assert.equal(foreign.isError, true);
  assert.match(foreign.structuredContent.error, /not found/);
  const list = await other.client.callTool({ name: "list_candidates", arguments: {} });
  assert.equal(list.structuredContent.candidates.length, 0);
  const unknown = await fetch(url, { method: "POST", headers: { Authorization: `Bearer ${tokenA}`, "Content-Type": "application/json",
    Accept: "application/json, text/event-stream", "MCP-Session-Id": "00000000000000000000000000000000", "MCP-Protocol-Version": "2025-11-25" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }) });
  assert.equal(unknown.status, 404);
  const badArg = await client.callTool({ name: "build_candidate", arguments: { candidate: "../../etc" } });
  assert.equal(badArg.isError, true);
  await client.close();
  await other.client.close();
});

// Both revisions kiln serves on /mcp: the session scenarios (2025-11-25) and the stateless ones
// (2026-07-28, issue 17); run_conformance.sh lists them, docs/testing.md says which do not apply.
for (const spec of ["2025-11-25", "2026-07-28"]) {
  test(`official MCP conformance scenarios pass for ${spec} (through a header-adding proxy)`, { timeout: 900_000 }, () => {
    const out = execFileSync(path.join(here, "run_conformance.sh"), [`http://127.0.0.1:${PORT}`], {
      env: { ...process.env, KILN_TOKEN: tokenA, KILN_CONFORMANCE_SPEC: spec },
      stdio: ["ignore", "pipe", "pipe"],
    }).toString();
    assert.match(out, /all \d+ scenarios passed/);
    assert.ok(!out.includes(tokenA), "the token is not printed");
  });
}

test("workspace sync: force-push rewinds a branch and builds the new tree; a no-op commit is a cache hit", async () => {
  const { client } = await connect();
  const w = fs.mkdtempSync(path.join(dir, "w-sync-"));
  fs.cpSync(path.join(root, "examples/epp"), w, { recursive: true });
  const git = (...a) => sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", ...a], { cwd: w });
  git("init", "-q");
  git("add", "-A");
  git("commit", "-qm", "v1");
  const v1 = git("rev-parse", "HEAD").trim();
  const f = path.join(w, "internal/scorer/scorer.go");
  fs.appendFileSync(f, "\n// v2\n");
  git("commit", "-qam", "v2");
  gitPush(w, "epp", "sync");
  const b2 = (await client.callTool({ name: "build_candidate", arguments: { candidate: "sync" } }, undefined, long)).structuredContent;
  assert.equal(b2.status, "succeeded", JSON.stringify(b2));
  assert.equal(b2.commit, git("rev-parse", "HEAD").trim());
  git("reset", "-q", "--hard", v1);          // rewind
  gitPush(w, "epp", "sync");
  const b1 = (await client.callTool({ name: "build_candidate", arguments: { candidate: "sync" } }, undefined, long)).structuredContent;
  assert.equal(b1.status, "succeeded");
  assert.equal(b1.commit, v1);
  assert.notEqual(b1.image.digest, b2.image.digest);
  git("commit", "-q", "--allow-empty", "-m", "no-op");
  gitPush(w, "epp", "sync");
  const b3 = (await client.callTool({ name: "build_candidate", arguments: { candidate: "sync" } }, undefined, long)).structuredContent;
  assert.equal(b3.cache_hit, true);
  assert.equal(b3.commit, git("rev-parse", "HEAD").trim());
  // Another domain's token cannot push here, and a tag is refused with git's own message.
  assert.throws(() => gitPush(w, "epp", "sync", tokenB));
  git("tag", "v1");
  assert.throws(() => sh("git", ["push", `http://127.0.0.1:${PORT}/git/epp.git`, "refs/tags/v1"], { cwd: w,
    env: { ...process.env, GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader", GIT_CONFIG_VALUE_0: `Authorization: Bearer ${tokenA}` } }),
    /refs\/heads/);
  await client.close();
});
