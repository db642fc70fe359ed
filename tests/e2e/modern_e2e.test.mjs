// End-to-end for MCP 2026-07-28 (issue 17): the real `kiln serve` (real buildah, a real
// docker-registry) driven by the official TypeScript SDK v2 client (@modelcontextprotocol/client,
// pinned to 2026-07-28: no initialize, no session) and by @modelcontextprotocol/ext-tasks for
// builds as tasks. Covers discover, tools/list, a build with progress, a compile error,
// concurrent status calls, a build task polled to completion, a cancelled task, a task polled
// across kill -9 and a restart of kiln, a wrong token, another domain's task id, a deploy as a
// task (to the fake Kubernetes API server, polled to completion and again after the restart),
// and a request whose stream is closed mid-build (the build keeps running by default, and is
// cancelled in a domain with build.cancel_on_disconnect when no one else waits for it).
//
//   KILN=build/app/kiln node --test tests/e2e/modern_e2e.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";
import { sh, pushCandidate } from "./agent_git.mjs";
import { writeFakeApiFiles, kubeconfig } from "./fake_k8s.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = process.env.KILN ?? path.join(root, "build/app/kiln");
const REG_PORT = 5198;
const K8S_PORT = 16459;  // the fake Kubernetes API server (deploy tasks)
const k8sToken = crypto.randomBytes(24).toString("hex");
let fake;
let deployTaskId;  // a completed deploy task, polled again after the restart
const PORT = 18798;  // and 18799: the metrics listener
const VERSION = "2026-07-28";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-modern-e2e-"));
const regDir = path.join(dir, "registry");
const tokenA = crypto.randomBytes(24).toString("hex");
const tokenB = crypto.randomBytes(24).toString("hex");
const url = `http://127.0.0.1:${PORT}/mcp`;
let kiln;
let kilnLog = "";

const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const long = { timeout: 600_000, resetTimeoutOnProgress: true };

async function startKiln() {
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  kiln.exited = new Promise((r) => kiln.once("exit", r));
  for (let i = 0; i < 300; i++) {
    try { if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) return; } catch {}
    await sleep(100);
  }
  throw new Error(`kiln did not come up:\n${kilnLog.slice(-3000)}`);
}

async function connect(token = tokenA) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "kiln-modern-e2e", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: VERSION } } });
  await client.connect(transport);
  openClients.push(client);
  return client;
}
const openClients = [];  // closed in after(), also when a test failed halfway

const clientInfo = { name: "kiln-modern-e2e-raw", version: "1.0.0" };
const clientCapabilities = { extensions: { "io.modelcontextprotocol/tasks": {} } };

// One raw 2026-07-28 request (the wire format, with every header a compliant client sends).
async function raw(method, params = {}, { token = tokenA, headers = {}, tasks = true } = {}) {
  const body = {
    jsonrpc: "2.0", id: crypto.randomInt(1, 1e9), method,
    params: { ...params, _meta: { "io.modelcontextprotocol/protocolVersion": VERSION,
      "io.modelcontextprotocol/clientInfo": clientInfo,
      "io.modelcontextprotocol/clientCapabilities": tasks ? clientCapabilities : {}, ...(params._meta ?? {}) } },
  };
  const name = params.name ?? params.taskId;
  const res = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "application/json",
      "MCP-Protocol-Version": VERSION, "Mcp-Method": method, ...(name ? { "Mcp-Name": name } : {}), ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

// ext-tasks' raw dispatch for 2026-07-28 task wire shapes: the framed {method, params} as one
// JSON-RPC request; answers the JSON-RPC response.
const dispatched = [];  // [request, response] pairs, for failure messages
let nextId = 1;
async function rawDispatch(framed) {
  const request = { jsonrpc: "2.0", id: nextId++, ...framed };
  const p = request.params ?? {};
  const name = p.name ?? p.taskId;
  const res = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${tokenA}`, "Content-Type": "application/json", Accept: "application/json",
      "MCP-Protocol-Version": VERSION, "Mcp-Method": request.method, ...(name ? { "Mcp-Name": name } : {}) },
    body: JSON.stringify(request),
  });
  const response = await res.json();
  dispatched.push([request, response]);
  return response;
}

async function pollTask(taskId, until = (t) => t.status !== "working", limit = 6000) {
  let last;
  for (let i = 0; i < limit; i++) {
    const r = await raw("tasks/get", { taskId });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    last = r.body.result;
    if (until(last)) return last;
    await sleep(last.pollIntervalMs ? Math.min(last.pollIntervalMs, 200) : 200);
  }
  throw new Error(`task never reached the state: ${JSON.stringify(last)}`);
}

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  // Deploy tasks: domain epp deploys to a fake Kubernetes API server (tests/fake_k8s/).
  writeFakeApiFiles(dir, [k8sToken]);
  fake = spawn("python3", [path.join(root, "tests/fake_k8s/fake_apiserver.py"), "--port", String(K8S_PORT),
    "--cert", path.join(dir, "api.crt"), "--key", path.join(dir, "api.key"), "--tokens", path.join(dir, "tokens.json"),
    "--step-ms", "100"], { stdio: ["ignore", "inherit", "inherit"] });
  const curl = (...a) => sh("curl", ["-sf", "--cacert", path.join(dir, "ca.crt"), ...a]);
  for (let i = 0; i < 100; i++) {
    try { curl(`https://127.0.0.1:${K8S_PORT}/_fake/stats`); break; } catch { await sleep(100); }
  }
  const deployment = {
    apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "epp", namespace: "loop", labels: { app: "epp" } },
    spec: { replicas: 1, progressDeadlineSeconds: 30, selector: { matchLabels: { app: "epp" } },
      template: { metadata: { labels: { app: "epp" } },
        spec: { containers: [{ name: "app", image: `127.0.0.1:${REG_PORT}/seed/epp@sha256:${"1".repeat(64)}` }] } } },
  };
  curl("-X", "POST", "-H", "Content-Type: application/json", "--data", JSON.stringify({ deployments: [deployment] }),
    `https://127.0.0.1:${K8S_PORT}/_fake/state`);
  fs.writeFileSync(path.join(dir, "kubeconfig"), kubeconfig(dir, K8S_PORT, k8sToken), { mode: 0o600 });
  const k8s = { type: "kubernetes", kubernetes: { namespace: "loop", deployment: "epp", container: "app",
    kubeconfig: path.join(dir, "kubeconfig"), rollout_timeout_s: 60 } };
  const domain = (token, repo, extra = {}) => ({
    token_sha256: [sha(token)],
    build: { mode: "containerfile", timeout_s: 600, on_push: false },  // issue 18: progress, tasks and cancel are timed against build calls
    image: { registry: "local", repository: repo },
    ...extra,
  });
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, metrics_listen: `127.0.0.1:${PORT + 1}`, state_dir: path.join(dir, "state") },
    scheduler: { max_parallel_builds: 2 },
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: { epp: domain(tokenA, "modern/epp", { deploy: k8s }),
      // build.cancel_on_disconnect: a closed stream cancels a build no one else waits for
      other: domain(tokenB, "modern/other", {
        build: { mode: "containerfile", timeout_s: 600, on_push: false, cancel_on_disconnect: true } }) },
  }));
  await startKiln();
  const push = (branch, mutate) => pushCandidate(dir, { port: PORT, domain: "epp", branch, token: tokenA, mutate });
  push("good");
  push("good2", (w) => fs.appendFileSync(path.join(w, "README.md"), "\nsecond candidate\n"));
  push("bad", (w) => {
    const f = path.join(w, "internal/scorer/scorer.go");
    fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace(/s \+= w\.Adapter$/m, "s += w.AdapterPenalty"));
  });
  const slow = (b) => (w) => {
    const f = path.join(w, "Containerfile");
    fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace("WORKDIR /src", `WORKDIR /src\nRUN sleep 60 # ${b}`));
  };
  pushCandidate(dir, { port: PORT, domain: "other", branch: "slowx", token: tokenB, mutate: slow("slowx") });
  for (const b of ["slow", "slow2", "slow3", "slow4", "slow5"]) {
    push(b, (w) => {
      const f = path.join(w, "Containerfile");
      fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace("WORKDIR /src", `WORKDIR /src\nRUN sleep 60 # ${b}`));
    });
  }
});

after(async () => {
  // A client left mid-request by a failed test may hold timers or hang in close(): never let
  // it hang the run (the exit keeps the exit code the test runner set).
  setTimeout(() => process.exit(), 60_000).unref();
  await Promise.race([Promise.all(openClients.map((c) => c.close().catch(() => {}))), sleep(3000)]);
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    kiln.kill("SIGTERM");
    await kiln.exited;
  }
  if (fake && fake.exitCode === null) fake.kill("SIGTERM");
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch {}
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
  assert.ok(!kilnLog.includes(tokenA) && !kilnLog.includes(tokenB), "tokens never reach the log");
  setTimeout(() => process.exit(), 2000).unref();
});

test("v2 client: discover (modern era, no session) and tools/list", async () => {
  const client = await connect();
  assert.equal(client.getProtocolEra(), "modern");
  const d = await raw("server/discover");
  assert.equal(d.status, 200);
  assert.equal(d.body.result.resultType, "complete");
  assert.ok(d.body.result.supportedVersions.includes(VERSION));
  assert.deepEqual(d.body.result.capabilities.extensions["io.modelcontextprotocol/tasks"], {});
  assert.equal(d.body.result._meta["io.modelcontextprotocol/serverInfo"].name, "kiln");
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ["build_candidate", "candidate_status", "build_log", "cancel_build", "list_candidates"])
    assert.ok(names.includes(n), `has ${n}`);
  const again = await raw("tools/list");
  assert.deepEqual(again.body.result.tools.map((t) => t.name), names, "deterministic order");
  assert.equal(again.body.result.cacheScope, "private");
  assert.ok(again.body.result.ttlMs > 0);
  await client.close();
});

test("v2 client: build with progress, concurrent status calls; compile error is isError", async () => {
  const client = await connect();
  const progress = [];
  const build = client.callTool({ name: "build_candidate", arguments: { candidate: "good" } },
    { ...long, onprogress: (p) => progress.push(p) });
  await sleep(300);
  const statuses = await Promise.all(Array.from({ length: 16 }, () =>
    client.callTool({ name: "candidate_status", arguments: { candidate: "good" } })));
  for (const s of statuses) assert.equal(s.structuredContent.candidate, "good");
  const res = await build;
  assert.equal(res.structuredContent.status, "succeeded", JSON.stringify(res.structuredContent));
  assert.match(res.structuredContent.image.digest, /^sha256:[0-9a-f]{64}$/);
  assert.ok(progress.length >= 2, `progress notifications: ${progress.length}`);
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);

  const bad = await client.callTool({ name: "build_candidate", arguments: { candidate: "bad" } }, long);
  assert.equal(bad.isError, true);
  assert.equal(bad.structuredContent.status, "failed");
  assert.ok(bad.structuredContent.diagnostics.some((d) => /AdapterPenalty/.test(d.message)));
  await client.close();
});

test("ext-tasks: a build is a task polled to completion", async () => {
  const client = await connect();
  const session = createTaskSessionFromClient(client, {
    endpointId: "kiln-modern-e2e",
    rawDispatch,
    v2RequestFraming: { protocolVersion: VERSION, clientInfo, clientCapabilities: {} },
  });
  try {
    let execution;
    try {
      execution = await session.callTool("build_candidate", { candidate: "good2" });
    } catch (e) {
      throw new Error(`${e.message}: ${e.cause?.message ?? ""}\n${JSON.stringify(dispatched.slice(-2))}`);
    }
    const { outcome } = await execution.settle();
    const result = resultFromTaskOutcome(outcome);
    assert.equal(result.structuredContent.status, "succeeded", JSON.stringify(result));
    assert.equal(result.isError, false);
  } finally {
    await session.close();
    await client.close();
  }
});

test("ext-tasks: the SDK cancels a build task; a handed-off task resumes after kill -9 and a restart", async () => {
  const client = await connect();
  const framing = { protocolVersion: VERSION, clientInfo, clientCapabilities: {} };
  let session = createTaskSessionFromClient(client, { endpointId: "kiln-modern-e2e", rawDispatch, v2RequestFraming: framing });
  try {
    // Cancel through the SDK (tasks/cancel): the task ends cancelled, and so does the build.
    const exec = await session.callTool("build_candidate", { candidate: "slow4" });
    assert.equal(exec.kind, "task");
    await pollTask(exec.handle.taskId, (t) => /building/.test(t.statusMessage) || t.status !== "working");
    await exec.cancel();
    const { outcome } = await exec.settle();
    assert.equal(outcome.status, "cancelled", JSON.stringify(outcome));
    const st = await raw("tools/call", { name: "candidate_status", arguments: { candidate: "slow4" } });
    assert.equal(st.body.result.structuredContent.latest_build.status, "cancelled",
      JSON.stringify(st.body.result.structuredContent));

    // Hand a running task off (its reference persisted), kill kiln, restart, resume it.
    const exec2 = await session.callTool("build_candidate", { candidate: "slow5" });
    assert.equal(exec2.kind, "task");
    await pollTask(exec2.handle.taskId, (t) => /building/.test(t.statusMessage) || t.status !== "working");
    let reference;
    await exec2.handoff((r) => { reference = JSON.parse(JSON.stringify(r)); });
    assert.equal(reference.taskId, exec2.handle.taskId);
    await session.close();
    kiln.kill("SIGKILL");
    await kiln.exited;
    await startKiln();
    // A new client and task session, as a restarted agent would have.
    session = createTaskSessionFromClient(await connect(), { endpointId: "kiln-modern-e2e", rawDispatch,
      v2RequestFraming: framing });
    const resumed = await session.resumeTask(reference);
    const settled = await resumed.settle();
    // The build was interrupted by the kill: a completed task whose result is an error.
    assert.equal(settled.outcome.status, "completed", JSON.stringify(settled.outcome));
    const result = resultFromTaskOutcome(settled.outcome);
    assert.equal(result.isError, true);
    assert.equal(result.structuredContent.status, "interrupted", JSON.stringify(result));
  } finally {
    await session.close();
    await client.close();
  }
});

test("raw tasks: a deploy is a task polled to completion; another domain's deploy task is not found", async () => {
  // "good" was built by an earlier test: its latest successful build is deployed.
  const created = await raw("tools/call", { name: "deploy_candidate", arguments: { candidate: "good" } });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const r = created.body.result;
  assert.equal(r.resultType, "task", JSON.stringify(r));
  assert.equal(r.status, "working");
  assert.equal(r.statusMessage, "phase: deploying");
  assert.ok(r.pollIntervalMs > 0 && r.ttlMs > 0);
  const foreign = await raw("tasks/get", { taskId: r.taskId }, { token: tokenB });
  assert.equal(foreign.body.error.code, -32602);
  const t = await pollTask(r.taskId);
  assert.equal(t.status, "completed", JSON.stringify(t));
  assert.equal(t.result.isError, false, JSON.stringify(t.result));
  assert.equal(t.result.structuredContent.status, "rolled_out");
  assert.equal(t.statusMessage, "deploy rolled out");
  deployTaskId = r.taskId;
  // The deployed build is what candidate_status reports.
  const s = await raw("tools/call", { name: "candidate_status", arguments: { candidate: "good" } });
  assert.equal(s.body.result.structuredContent.deployed_build.deploy_id, t.result.structuredContent.deploy_id);
});

test("raw tasks: a compile error is a completed task with isError; wait:false stays a plain result", async () => {
  const created = await raw("tools/call", { name: "build_candidate", arguments: { candidate: "bad" } });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const r = created.body.result;
  // A rebuild of an unchanged failed candidate may be final at once (then a plain result).
  if (r.resultType === "task") {
    assert.ok(["working", "completed"].includes(r.status));
    assert.match(r.createdAt, /^\d{4}-\d\d-\d\dT/);
    const t = await pollTask(r.taskId);
    assert.equal(t.status, "completed");
    assert.equal(t.result.isError, true);
    assert.equal(t.result.structuredContent.status, "failed");
  } else {
    assert.equal(r.resultType, "complete");
    assert.equal(r.isError, true);
  }
  const plain = await raw("tools/call", { name: "build_candidate", arguments: { candidate: "bad", wait: false } });
  assert.equal(plain.body.result.resultType, "complete");
  assert.match(plain.body.result.structuredContent.build_id, /^b-/);
});

test("raw tasks: tasks/cancel cancels the build; another domain's task id is not found", async () => {
  const created = await raw("tools/call", { name: "build_candidate", arguments: { candidate: "slow" } });
  const r = created.body.result;
  assert.equal(r.resultType, "task", JSON.stringify(r));
  assert.equal(r.status, "working");
  assert.ok(r.pollIntervalMs > 0);
  const foreign = await raw("tasks/get", { taskId: r.taskId }, { token: tokenB });
  assert.equal(foreign.status, 200);
  assert.equal(foreign.body.error.code, -32602);
  assert.match(foreign.body.error.message, /not found/i);
  const t0 = await pollTask(r.taskId, (t) => /building/.test(t.statusMessage) || t.status !== "working");
  assert.equal(t0.status, "working");
  const c = await raw("tasks/cancel", { taskId: r.taskId });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(c.body.result.resultType, "complete");
  const t = await pollTask(r.taskId);
  assert.equal(t.status, "cancelled", JSON.stringify(t));
});

test("raw tasks: a task polled across kill -9 and a restart of kiln", async () => {
  const created = await raw("tools/call", { name: "build_candidate", arguments: { candidate: "slow2" } });
  const r = created.body.result;
  assert.equal(r.resultType, "task", JSON.stringify(r));
  await pollTask(r.taskId, (t) => /building/.test(t.statusMessage) || t.status !== "working");
  kiln.kill("SIGKILL");
  await kiln.exited;
  await startKiln();
  const t = await pollTask(r.taskId);
  // The killed build was interrupted: a completed task whose result is an error.
  assert.equal(t.status, "completed", JSON.stringify(t));
  assert.equal(t.result.isError, true);
  assert.equal(t.result.structuredContent.status, "interrupted");
  assert.equal(t.taskId, r.taskId);
  // The deploy task of an earlier test resolves from the journal after the restart.
  assert.ok(deployTaskId, "the deploy task test ran first");
  const d = await pollTask(deployTaskId);
  assert.equal(d.status, "completed", JSON.stringify(d));
  assert.equal(d.result.structuredContent.status, "rolled_out");
});

test("protocol errors: wrong token, header mismatch, unknown method, GET", async () => {
  const wrong = await fetch(url, { method: "POST", headers: { Authorization: "Bearer nope", "Content-Type": "application/json",
    Accept: "application/json", "MCP-Protocol-Version": VERSION, "Mcp-Method": "tools/list" }, body: "{}" });
  assert.equal(wrong.status, 401);
  assert.match(wrong.headers.get("www-authenticate") ?? "", /Bearer/);
  const mismatch = await raw("tools/list", {}, { headers: { "Mcp-Method": "tools/call" } });
  assert.equal(mismatch.status, 400);
  assert.equal(mismatch.body.error.code, -32020);
  const unsupported = await raw("tools/list", {}, { headers: { "MCP-Protocol-Version": "2025-11-25" } });
  assert.equal(unsupported.status, 400);
  assert.equal(unsupported.body.error.code, -32020);
  const unknown = await raw("resources/list");
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error.code, -32601);
  const get = await fetch(url, { headers: { Authorization: `Bearer ${tokenA}`, "MCP-Protocol-Version": VERSION } });
  assert.equal(get.status, 405);
});

test("closing a request's stream mid-build frees its slot; the build keeps running", async () => {
  const inflight = async () => {
    const m = await (await fetch(`http://127.0.0.1:${PORT + 1}/metrics`)).text();  // the metrics listener
    const line = m.split("\n").find((l) => l.startsWith("kiln_mcp_inflight_calls"));
    return line ? Number(line.split(" ").pop()) : NaN;
  };
  const client = await connect();
  const before = await inflight();
  const ac = new AbortController();
  const call = client.callTool({ name: "build_candidate", arguments: { candidate: "slow3" } }, { ...long, signal: ac.signal });
  let state;
  for (let i = 0; i < 600; i++) {
    const s = await client.callTool({ name: "candidate_status", arguments: { candidate: "slow3" } });
    state = s.structuredContent.state;
    if (state === "building") break;
    await sleep(100);
  }
  assert.equal(state, "building");
  assert.equal(await inflight(), before + 1);
  ac.abort("agent gave up");
  await assert.rejects(call);
  let after = NaN;
  for (let i = 0; i < 100; i++) {
    after = await inflight();
    if (after === before) break;
    await sleep(50);
  }
  assert.equal(after, before, "the closed request's slot is free");
  const s = await client.callTool({ name: "candidate_status", arguments: { candidate: "slow3" } });
  assert.ok(["building", "pushing", "succeeded"].includes(s.structuredContent.state), "the build keeps running");
  // A later identical call joins it (same build id), here without waiting.
  const join = await client.callTool({ name: "build_candidate", arguments: { candidate: "slow3", wait: false } });
  assert.equal(join.structuredContent.build_id, s.structuredContent.latest_build.build_id);
  await client.callTool({ name: "cancel_build", arguments: { build_id: join.structuredContent.build_id } });
  await client.close();
});

test("cancel_on_disconnect: closing the only request's stream mid-build cancels its build", async () => {
  const client = await connect(tokenB);  // domain "other" sets build.cancel_on_disconnect
  const ac = new AbortController();
  const call = client.callTool({ name: "build_candidate", arguments: { candidate: "slowx" } }, { ...long, signal: ac.signal });
  let s;
  for (let i = 0; i < 600; i++) {
    s = await client.callTool({ name: "candidate_status", arguments: { candidate: "slowx" } });
    if (s.structuredContent.state === "building") break;
    await sleep(100);
  }
  assert.equal(s.structuredContent.state, "building");
  const id = s.structuredContent.latest_build.build_id;
  ac.abort("agent gave up");
  await assert.rejects(call);
  let status;
  for (let i = 0; i < 300; i++) {
    const st = await client.callTool({ name: "candidate_status", arguments: { candidate: "slowx" } });
    status = st.structuredContent.latest_build;
    if (status.build_id === id && status.status === "cancelled") break;
    await sleep(100);
  }
  assert.equal(status.build_id, id);
  assert.equal(status.status, "cancelled", JSON.stringify(status));
  await client.close();
});
