// Fault injection end to end: the real `kiln serve` (real bubblewrap, buildah, docker-registry
// with htpasswd auth, git smart HTTP) driven by the official MCP TypeScript SDK client, with
// real faults injected while agents work:
//   1. the registry of one domain answers 503 / refuses connections (a switchable proxy here);
//   2. a build hangs (layered command and Containerfile RUN step) past the domain's timeout_s;
//   3. the disk is full (state directory and a candidate workspace on small tmpfs mounts);
//   4. one domain's git repository is locked or corrupt;
//   5. the Kubernetes API server (tests/fake_k8s/) dies or answers 503 during a rollout.
// Each test checks the error names what failed, nothing is left corrupt, other domains keep
// working, kiln keeps answering reads, and the next request after the fault is removed works.
//
//   tests/e2e/run_e2e.sh build/app/kiln faults_e2e.test.mjs
// Ports: registry 5160 (+ proxy 5161), kiln 18730-18734, fake API server 16460. Runs as root
// (tmpfs mounts, bubblewrap, rootless buildah for the build user). ~3-4 min; every test has its
// own time limit (17 min together), so after() always runs and unmounts what was mounted.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { sh, pushCandidate } from "./agent_git.mjs";
import { writeFakeApiFiles, kubeconfig } from "./fake_k8s.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5160;
const PROXY_PORT = 5161;
const K8S_PORT = 16460;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-faults-e2e-"));
const regDir = path.join(dir, "registry");
const tokens = {};  // domain -> its agent's token
const operatorToken = crypto.randomBytes(24).toString("hex");
const k8sToken = crypto.randomBytes(24).toString("hex");  // kiln's service account at the fake API server
const kilns = [];
const mounts = [];
const results = [];  // every tool result's JSON, checked for the registry credential
let proxy, fake;
let busybox;  // sha256:... of kiln/busybox:1 in the registry

const rnd = () => crypto.randomBytes(24).toString("hex");
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const token = (domain) => (tokens[domain] ??= rnd());

// Polls fn() until it returns a truthy value; fails after `ms` naming `what`.
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

// Processes whose command line matches `pattern` (pgrep -f), as "pid args" lines.
function procs(pattern) {
  const r = spawnSync("pgrep", ["-af", pattern], { encoding: "utf8" });
  return r.stdout.split("\n").filter((l) => l.trim() !== "");
}

// Runs a command without blocking the event loop; {code, stdout, stderr}.
function run(cmd, args, opts = {}) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => { stdout += d; });
    p.stderr.on("data", (d) => { stderr += d; });
    p.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

// ------------------------------------------------------------------------------ kiln serve

class Kiln {
  constructor(name, port, config, { stateDir } = {}) {
    this.name = name;
    this.port = port;
    this.dir = path.join(dir, name);
    fs.mkdirSync(this.dir, { recursive: true });
    this.stateDir = stateDir ?? path.join(this.dir, "state");
    this.config = path.join(this.dir, "kiln.json");
    this.log = "";
    this.proc = null;
    fs.writeFileSync(this.config, JSON.stringify({
      ...config,
      server: { listen: `127.0.0.1:${port}`, state_dir: this.stateDir },
    }, null, 1));
    kilns.push(this);
  }
  get url() { return `http://127.0.0.1:${this.port}`; }
  running() { return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null; }
  // Asynchronous: the registry proxy of test 1 runs in this process.
  async checkConfig() {
    const r = await run(KILN, ["check-config", "--config", this.config]);
    assert.equal(r.code, 0, `check-config ${this.name}: ${r.stdout}${r.stderr}`);
  }
  async start() {
    assert.ok(!this.running());
    const p = spawn(KILN, ["serve", "--config", this.config, "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
    this.proc = p;
    this.exited = new Promise((r) => p.once("exit", (code, signal) => r({ code, signal })));
    p.stdout.on("data", (d) => { this.log += d; });
    p.stderr.on("data", (d) => { this.log += d; });
    await until(`kiln ${this.name} /healthz`, async () => {
      assert.ok(this.running(), `kiln ${this.name} exited during start-up: ${this.log}`);
      try { return (await fetch(`${this.url}/healthz`)).ok; } catch { return false; }
    }, 60_000, 100);
  }
  async stop(signal = "SIGTERM") {
    if (!this.running()) return this.proc ? this.exited : null;
    this.proc.kill(signal);
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 60_000);
    const r = await this.exited;
    clearTimeout(timer);
    return r;
  }
  async healthz() {
    try { return (await fetch(`${this.url}/healthz`)).status; } catch (e) { return String(e); }
  }
  async connect(domain) {
    const transport = new StreamableHTTPClientTransport(new URL(`${this.url}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token(domain)}` } },
    });
    const client = new Client({ name: `kiln-faults-e2e-${domain}`, version: "1.0.0" });
    await client.connect(transport);
    return client;
  }
  push(domain, branch, mutate) {
    return pushCandidate(this.dir, { port: this.port, domain, branch, token: token(domain), mutate: (w) => {
      fs.rmSync(path.join(w, "out"), { recursive: true, force: true });  // a stale build output
      editMain(w, `[]byte("ok\\n")`, `[]byte("ok ${domain}/${branch}\\n")`);  // a distinct binary per candidate
      if (mutate) mutate(w);
    } });
  }
}

function editMain(w, from, to) {
  const f = path.join(w, "cmd/epp/main.go");
  const src = fs.readFileSync(f, "utf8");
  assert.ok(src.includes(from), `main.go contains ${from}`);
  fs.writeFileSync(f, src.replace(from, to));
}

const CALL = { timeout: 300_000 };

// One MCP tool call; the result's structured content plus isError.
async function call(client, name, args, opts = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, { ...CALL, ...opts });
  results.push(JSON.stringify(r));
  assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent, "text block = structured content");
  return { ...r.structuredContent, isError: r.isError };
}

async function build(client, candidate, extra = {}) {
  return call(client, "build_candidate", { candidate, ...extra });
}

async function mustBuild(client, candidate) {
  const b = await build(client, candidate);
  assert.equal(b.status, "succeeded", JSON.stringify(b).slice(0, 3000));
  assert.match(b.image.digest, /^sha256:[0-9a-f]{64}$/);
  return b;
}

// Waits until the candidate's latest build is final; returns it.
async function settled(client, candidate, ms = 120_000) {
  return until(`${candidate} to finish`, async () => {
    const s = await call(client, "candidate_status", { candidate });
    const b = s.latest_build;
    return b && ["succeeded", "failed", "cancelled", "interrupted"].includes(b.status) ? b : null;
  }, ms, 250);
}

// Reads answer during and after a fault.
async function readsAnswer(client, candidate) {
  const st = await call(client, "candidate_status", { candidate });
  assert.equal(st.isError, false, JSON.stringify(st));
  assert.equal(st.candidate, candidate);
  const list = await call(client, "list_candidates", {});
  assert.equal(list.isError, false, JSON.stringify(list));
  assert.ok(list.candidates.some((c) => c.candidate === candidate), JSON.stringify(list));
  return st;
}

// A layered domain: `go build` in the sandbox, the binary added to kiln/busybox:1.
function layeredDomain(domain, { registry = "direct", host = `127.0.0.1:${REG_PORT}`, timeout = 120,
  command = ["go", "build", "-o", "out/app", "./cmd/epp"], deploy } = {}) {
  return {
    token_sha256: [sha(token(domain))],
    build: { mode: "layered", timeout_s: timeout, on_push: false, layered: {  // issue 18: faults are set between pushes and build calls
      base_image: `${host}/kiln/busybox@${busybox}`,
      command,
      env: { GOFLAGS: "-buildvcs=false" },
      caches: { GOCACHE: "go-build" },
      outputs: [{ from: "out/app", to: "/app" }],
      entrypoint: ["/app"],
    } },
    image: { registry, repository: `faults/${domain}` },
    ...(deploy ? { deploy } : {}),
  };
}

const registries = () => ({ direct: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } });

// The registry's view of a tag (with the credential from auth.json, as an operator would).
async function registryTag(repo, tag) {
  const auth = JSON.parse(fs.readFileSync(path.join(regDir, "auth.json"), "utf8")).auths[`127.0.0.1:${REG_PORT}`].auth;
  const r = await fetch(`http://127.0.0.1:${REG_PORT}/v2/${repo}/manifests/${tag}`, { method: "HEAD",
    headers: { Authorization: `Basic ${auth}`, Accept: "application/vnd.oci.image.manifest.v1+json" } });
  return { status: r.status, digest: r.headers.get("docker-content-digest") };
}

// ------------------------------------------------------------------------------ set-up

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  const out = sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  busybox = /^busybox=.*@(sha256:[0-9a-f]{64})$/m.exec(out)?.[1];
  assert.ok(busybox, `base_images.sh printed the busybox digest: ${out}`);
});

// The registry credential as the test's registry keeps it (password file, docker auth).
function registrySecrets() {
  const out = [];
  const pw = path.join(regDir, "password");
  if (fs.existsSync(pw)) out.push(fs.readFileSync(pw, "utf8").trim());
  const auth = path.join(regDir, "auth.json");
  if (fs.existsSync(auth)) out.push(JSON.parse(fs.readFileSync(auth, "utf8")).auths[`127.0.0.1:${REG_PORT}`].auth);
  return out.filter(Boolean);
}

// Cleans up everything, then reports what was wrong (a failed check never skips a clean-up).
after(async () => {
  const problems = [];
  for (const k of kilns) {
    const r = await k.stop();
    if (r && r.code !== 0) problems.push(`kiln ${k.name} exited with ${JSON.stringify(r)} on SIGTERM`);
  }
  if (fake && fake.exitCode === null && fake.signalCode === null) {
    fake.kill("SIGTERM");
    await fake.exited;
  }
  if (proxy) await proxy.close();
  const secrets = registrySecrets();
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch (e) { problems.push(`registry stop: ${e}`); }
  const left = procs(dir);
  for (const m of mounts.reverse()) {
    if (spawnSync("umount", [m]).status !== 0 && spawnSync("umount", ["-l", m]).status !== 0) problems.push(`cannot unmount ${m}`);
  }
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
  // No credential reaches an agent or a log.
  for (const secret of secrets) {
    for (const k of kilns) if (k.log.includes(secret)) problems.push(`the registry credential is in kiln ${k.name}'s log`);
    if (results.some((r) => r.includes(secret))) problems.push("the registry credential is in a tool result");
  }
  for (const t of [...Object.values(tokens), operatorToken, k8sToken])
    for (const k of kilns) if (k.log.includes(t)) problems.push(`a token is in kiln ${k.name}'s log`);
  if (left.length) problems.push(`processes of the test survive: ${left.join("; ")}`);
  assert.deepEqual(problems, []);
});

// ------------------------------------------------------------------------------ 1. registry

// An HTTP proxy in front of the real registry, switchable between "pass" (forward), "503"
// (every request answered 503 Service Unavailable) and "refuse" (not listening: connection
// refused). Counts the requests it saw in each mode.
function startProxy(port, target) {
  let mode = "pass";
  const sockets = new Set();
  const seen = { pass: 0, 503: 0 };
  const server = http.createServer((req, res) => {
    seen[mode] = (seen[mode] ?? 0) + 1;
    if (mode === "503") {
      req.resume();
      res.writeHead(503, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ errors: [{ code: "UNAVAILABLE", message: "injected by the test" }] }));
      return;
    }
    const up = http.request({ host: "127.0.0.1", port: target, method: req.method, path: req.url, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  server.on("connection", (s) => { sockets.add(s); s.on("close", () => sockets.delete(s)); });
  const listen = () => new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => { server.off("error", reject); resolve(); });
  });
  const stop = () => new Promise((resolve) => {
    server.close(() => resolve());
    for (const s of sockets) s.destroy();
  });
  return {
    seen,
    get mode() { return mode; },
    async set(m) {
      if (m === "refuse" && mode !== "refuse") await stop();
      if (m !== "refuse" && mode === "refuse") await listen();
      mode = m;
    },
    async close() { if (mode !== "refuse") await stop(); mode = "refuse"; },
    listen,
  };
}

test("registry down for one domain: its build fails clearly after bounded retries, the other domain builds, the next build after recovery succeeds", { timeout: 180_000 }, async (t) => {
  proxy = startProxy(PROXY_PORT, REG_PORT);
  await proxy.listen();
  // The proxied registry entry has its own auth file: the same credential, keyed by its host.
  const auth = JSON.parse(fs.readFileSync(path.join(regDir, "auth.json"), "utf8"));
  const proxyAuth = path.join(regDir, "auth-proxy.json");
  fs.writeFileSync(proxyAuth, JSON.stringify({ auths: { [`127.0.0.1:${PROXY_PORT}`]: auth.auths[`127.0.0.1:${REG_PORT}`] } }), { mode: 0o600 });
  const timeout = 120;
  const k = new Kiln("registry", 18730, {
    scheduler: { max_parallel_builds: 2 },
    registries: { ...registries(), proxied: { url: `http://127.0.0.1:${PROXY_PORT}`, auth_file: proxyAuth } },
    domains: {
      ra: layeredDomain("ra", { registry: "proxied", host: `127.0.0.1:${PROXY_PORT}`, timeout }),
      rb: layeredDomain("rb", { timeout }),
    },
  });
  await k.checkConfig();
  await k.start();
  for (const c of ["c1", "c2", "c3"]) { k.push("ra", c); k.push("rb", c); }
  const a = await k.connect("ra");
  const b = await k.connect("rb");
  const a1 = await mustBuild(a, "c1");

  for (const fault of ["503", "refuse"]) {
    await proxy.set(fault);
    const before503 = proxy.seen["503"];
    const t0 = Date.now();
    // A's build and B's builds at the same time.
    const [af, b1] = await Promise.all([build(a, "c2"), build(b, fault === "503" ? "c1" : "c2")]);
    const took = Date.now() - t0;
    t.diagnostic(`registry ${fault}: ra's build failed after ${took} ms (total_ms ${af.timings?.total_ms}, push_ms ${af.timings?.push_ms})`);
    assert.equal(af.status, "failed", JSON.stringify(af));
    assert.equal(af.isError, true);
    assert.equal(af.image, null);
    assert.match(af.error, new RegExp(`registry 127\\.0\\.0\\.1:${PROXY_PORT}`), "the error names the registry");
    assert.match(af.error, fault === "503" ? /\b503\b/ : /unreachable|refused/i, af.error);
    assert.ok(took < timeout * 1000, `the failed build ended within the build timeout (${took} ms)`);
    if (fault === "503") assert.ok(proxy.seen["503"] - before503 >= 2, `kiln retried (${proxy.seen["503"] - before503} requests answered 503)`);
    assert.equal(b1.status, "succeeded", `rb builds during ra's registry outage: ${JSON.stringify(b1)}`);
    // Nothing half-pushed: the tag of the failed build does not exist.
    assert.equal((await registryTag("faults/ra", "c2")).status, 404);
    // Reads keep answering, also for the failing domain.
    const st = await readsAnswer(a, "c2");
    assert.equal(st.latest_build.status, "failed");
    assert.equal(st.latest_build.build_id, af.build_id);
    const log = await call(a, "build_log", { build_id: af.build_id });
    assert.equal(log.isError, false);
    assert.equal(log.complete, true);
    assert.match(log.text, /kiln: layer sha256:/, "the build itself ran; only the push failed");
    assert.equal((await readsAnswer(a, "c1")).latest_successful_build.build_id, a1.build_id, "c1's build is untouched");
  }

  // The registry is back: failures were not cached, the same tree builds and is pushed.
  await proxy.set("pass");
  const a2 = await mustBuild(a, "c2");
  assert.equal(a2.cache_hit, false);
  assert.notEqual(a2.image.digest, a1.image.digest);
  assert.equal((await registryTag("faults/ra", "c2")).digest, a2.image.digest);
  await mustBuild(a, "c3");
  await mustBuild(b, "c3");
  await a.close();
  await b.close();
  assert.equal((await k.stop()).code, 0);
  // The credential kiln pushed with never reached a tool result or kiln's log.
  for (const secret of registrySecrets()) {
    assert.ok(!k.log.includes(secret), "the registry credential is not in kiln's log");
    assert.ok(!results.some((r) => r.includes(secret)), "the registry credential is not in any tool result");
  }
});

// ------------------------------------------------------------------------------ 2. hang

test("a hanging build times out: failed with a timeout error, no process survives, the slot is freed", { timeout: 240_000 }, async (t) => {
  const HANG = "kiln-faults-hang";
  const k = new Kiln("hang", 18731, {
    scheduler: { max_parallel_builds: 1 },
    registries: registries(),
    domains: {
      // The candidate's own build.sh is the compile command: a candidate can make it hang.
      hl: layeredDomain("hl", { timeout: 5, command: ["/bin/sh", "./build.sh"] }),
      hc: { token_sha256: [sha(token("hc"))], build: { mode: "containerfile", timeout_s: 45, on_push: false },
            image: { registry: "direct", repository: "faults/hc" } },
      ho: layeredDomain("ho"),
    },
  });
  await k.checkConfig();
  await k.start();
  const script = (body) => (w) => fs.writeFileSync(path.join(w, "build.sh"), `#!/bin/sh\n${body}\n`);
  // Hangs in a process tree, one process ignoring SIGTERM.
  k.push("hl", "hang", script(`sh -c 'trap "" TERM; while :; do sleep 1; done # ${HANG}-loop' &\nexec sleep 3601 # ${HANG}`));
  k.push("hl", "ok", script("exec go build -o out/app ./cmd/epp"));
  k.push("ho", "c1");
  const containerfile = (run) => (w) => fs.writeFileSync(path.join(w, "Containerfile"),
    `ARG KILN_REGISTRY\nFROM \${KILN_REGISTRY}/kiln/busybox:1\n${run}\n`);
  k.push("hc", "hang", containerfile(`RUN sleep 3602 # ${HANG}-run`));
  k.push("hc", "ok", containerfile("RUN echo ok > /ok"));
  const hl = await k.connect("hl");
  const ho = await k.connect("ho");
  const hc = await k.connect("hc");
  const survivors = () => [...procs(HANG), ...procs(`sleep 360[12]`), ...procs(`bwrap.*${k.stateDir}`),
    ...procs(`buildah.*${k.stateDir}`)];

  // Layered: the command hangs in the sandbox.
  const started = await build(hl, "hang", { wait: false });
  assert.match(started.build_id, /^b-[0-9a-f]{16}$/);
  await until("the hanging command to run", () => procs(`sleep 3601`).length > 0, 60_000);
  // Another domain's build queues behind it (one slot).
  const queued = await build(ho, "c1", { wait: false });
  const st = await call(ho, "candidate_status", { candidate: "c1" });
  if (!["resolving", "queued"].includes(st.state)) {  // only once the hung build has ended (a slow machine)
    const h = (await call(hl, "candidate_status", { candidate: "hang" })).latest_build;
    assert.notEqual(h.status, "running", `ho/c1 ran beside the hung build with one slot: ${JSON.stringify(st)}`);
  }
  const hung = await settled(hl, "hang", 120_000);
  t.diagnostic(`layered hang: ended ${hung.status} after ${hung.timings?.total_ms} ms: ${hung.error}`);
  assert.equal(hung.build_id, started.build_id);
  assert.equal(hung.status, "failed", JSON.stringify(hung));
  assert.match(hung.error, /timed out after 5 s/);
  assert.equal(hung.image, null);
  await until("no process of the hung build", () => survivors().length === 0 || null, 10_000)
    .catch(() => assert.deepEqual(survivors(), [], "no process of the hung build survives"));
  // The slot came back: the queued build of the other domain ran and succeeded.
  const done = await settled(ho, "c1", 180_000);
  assert.equal(done.build_id, queued.build_id);
  assert.equal(done.status, "succeeded", JSON.stringify(done));
  // The same domain builds a good candidate.
  await mustBuild(hl, "ok");
  await readsAnswer(hl, "hang");

  // Containerfile: a RUN step hangs under rootless buildah.
  const cfStarted = await build(hc, "hang", { wait: false });
  await until("the hanging RUN step to run", () => procs("sleep 3602").length > 0, 120_000);
  const cf = await settled(hc, "hang", 120_000);
  assert.equal(cf.build_id, cfStarted.build_id);
  t.diagnostic(`containerfile hang: ended ${cf.status} after ${cf.timings?.total_ms} ms: ${cf.error}`);
  assert.equal(cf.status, "failed", JSON.stringify(cf).slice(0, 3000));
  assert.match(cf.error, /timed out after 45 s/);
  assert.match(cf.log_tail, /sleep 3602/, "the log shows the step that hung");
  await until("no process of the hung containerfile build", () => survivors().length === 0 || null, 10_000)
    .catch(() => assert.deepEqual(survivors(), [], "no process of the hung build survives"));
  // No working container is left in the candidate's rootless buildah store.
  const containers = path.join(k.stateDir, "domains/hc/candidates/hang/storage/rootless/root/overlay-containers/containers.json");
  assert.ok(fs.existsSync(path.dirname(path.dirname(containers))), "the candidate has a rootless store");
  assert.deepEqual(fs.existsSync(containers) ? JSON.parse(fs.readFileSync(containers, "utf8")).map((c) => c.id) : [], []);
  const ok = await mustBuild(hc, "ok");
  assert.equal(ok.cache_hit, false);
  for (const c of [hl, ho, hc]) await c.close();
  assert.equal((await k.stop()).code, 0);
  assert.deepEqual(survivors(), []);
});

// ------------------------------------------------------------------------------ 3. disk full

function mountTmpfs(where, size) {
  fs.mkdirSync(where, { recursive: true });
  sh("mount", ["-t", "tmpfs", "-o", `size=${size},mode=0700`, "tmpfs", where]);
  mounts.push(where);
}

// Fills the file system holding `where` with one file until ENOSPC, leaving `leave` bytes
// free; returns the file's path.
function fill(where, leave = 0) {
  const f = path.join(where, "filler");
  const fd = fs.openSync(f, "w");
  try {
    for (const size of [1 << 20, 4096, 1]) {
      const buf = Buffer.alloc(size, 0x5a);
      for (;;) {
        try { fs.writeSync(fd, buf); } catch (e) { if (e.code === "ENOSPC") break; throw e; }
      }
    }
    if (leave) fs.ftruncateSync(fd, fs.fstatSync(fd).size - leave);
  } finally { fs.closeSync(fd); }
  return f;
}

const NO_SPACE = /no space left on device/i;

test("disk full (state directory, workspace): clear errors, reads answer, recovery, state reloads after a restart", { timeout: 180_000 }, async (t) => {
  // The whole state directory on a small file system, and domain dw's candidate workspaces
  // on a smaller one of their own.
  const stateDir = path.join(dir, "disk", "state");
  mountTmpfs(stateDir, "64m");
  const wsDir = path.join(stateDir, "domains/dw/candidates");
  mountTmpfs(wsDir, "24m");
  const k = new Kiln("disk", 18732, {
    scheduler: { max_parallel_builds: 2 },
    registries: registries(),
    domains: { ds: layeredDomain("ds"), dw: layeredDomain("dw"), dv: layeredDomain("dv") },
  }, { stateDir });
  await k.checkConfig();
  await k.start();
  k.push("ds", "c1");
  k.push("ds", "c2");
  k.push("dw", "c1");
  k.push("dv", "c1");
  const ds = await k.connect("ds");
  const b1 = await mustBuild(ds, "c1");

  // 1. The state directory's file system is full: journal, repositories, workspaces, caches.
  let filler = fill(stateDir);
  const full = await build(ds, "c2");
  t.diagnostic(`state directory full: ${full.status}: ${full.error}`);
  assert.equal(full.status, "failed", JSON.stringify(full));
  assert.equal(full.isError, true);
  assert.match(full.error, NO_SPACE);
  // Build until the journal itself has hit ENOSPC (its last page may still have had room).
  await until("the journal to fail for lack of space", async () => {
    const again = await build(ds, "c2");
    assert.equal(again.status, "failed", JSON.stringify(again));
    assert.match(again.error, NO_SPACE);
    return /state journal: cannot record/.test(k.log);
  }, 120_000, 0);
  assert.ok(k.running(), "kiln keeps running");
  assert.equal(await k.healthz(), 200);
  const st = await readsAnswer(ds, "c1");
  assert.equal(st.latest_successful_build.build_id, b1.build_id);
  assert.equal(st.latest_successful_build.image.digest, b1.image.digest);
  assert.equal((await readsAnswer(ds, "c2")).latest_build.status, "failed");
  // A git push fails too, with git's own reason, and leaves the repository intact.
  assert.throws(() => k.push("ds", "c3"), (e) => NO_SPACE.test(String(e.stderr)));
  fs.rmSync(filler);
  const b2 = await mustBuild(ds, "c2");
  k.push("ds", "c3");
  const b3 = await mustBuild(ds, "c3");
  sh("git", ["-C", path.join(stateDir, "domains/ds/repo.git"), "fsck", "--no-dangling"]);

  // 2. Only domain dw's workspace file system is full: dw fails, dv builds at the same time.
  const dw = await k.connect("dw");
  const dv = await k.connect("dv");
  filler = fill(wsDir);
  const [wf, v1] = await Promise.all([build(dw, "c1"), build(dv, "c1")]);
  t.diagnostic(`workspace full: ${wf.status}: ${wf.error}`);
  assert.equal(wf.status, "failed", JSON.stringify(wf));
  assert.match(wf.error, NO_SPACE);
  assert.equal(v1.status, "succeeded", JSON.stringify(v1));
  await readsAnswer(dw, "c1");
  fs.rmSync(filler);
  // Room for the checkout, not for the binary the compile writes: the compiler's own message.
  filler = fill(wsDir, 2 << 20);
  const wc = await build(dw, "c1");
  t.diagnostic(`workspace full during the compile: ${wc.status}: ${wc.error}`);
  assert.equal(wc.status, "failed", JSON.stringify(wc));
  assert.match(`${wc.error}\n${wc.log_tail}`, NO_SPACE);
  fs.rmSync(filler);
  const w1 = await mustBuild(dw, "c1");

  // 3. Restart: what was acknowledged before and after the fault is loaded again.
  const expect = [[ds, "ds", "c1", b1], [ds, "ds", "c2", b2], [ds, "ds", "c3", b3], [dw, "dw", "c1", w1], [dv, "dv", "c1", v1]];
  const before = [];
  for (const [client, , c] of expect) before.push(await call(client, "candidate_status", { candidate: c }));
  for (const c of [ds, dw, dv]) await c.close();
  assert.equal((await k.stop()).code, 0, "kiln exits 0 on SIGTERM");
  const mark = k.log.length;
  await k.start();
  const clients = { ds: await k.connect("ds"), dw: await k.connect("dw"), dv: await k.connect("dv") };
  for (const [i, [, domain, c, b]] of expect.entries()) {
    const s = await call(clients[domain], "candidate_status", { candidate: c });
    assert.equal(s.latest_successful_build.build_id, b.build_id, `${domain}/${c} after the restart`);
    assert.equal(s.latest_successful_build.image.digest, b.image.digest);
    assert.equal(s.latest_build.build_id, before[i].latest_build.build_id);
    assert.equal(s.latest_build.status, before[i].latest_build.status);
  }
  const restartLog = k.log.slice(mark);
  assert.match(restartLog, /state: \d+ build\(s\)/);
  assert.doesNotMatch(restartLog, /corrupt|torn|error/i, "the journal loads cleanly");
  const again = await build(clients.ds, "c2");
  assert.equal(again.cache_hit, true, "the build-key cache survived the fault and the restart");
  assert.equal(again.image.digest, b2.image.digest);
  for (const c of Object.values(clients)) await c.close();
  assert.equal((await k.stop()).code, 0);
});

// ------------------------------------------------------------------------------ 4. git

test("git repository locked or corrupt in one domain: clear errors for that domain only, it works again once repaired", { timeout: 180_000 }, async () => {
  const k = new Kiln("git", 18733, {
    scheduler: { max_parallel_builds: 2 },
    registries: registries(),
    domains: { ga: layeredDomain("ga"), gx: layeredDomain("gx") },
  });
  await k.checkConfig();
  await k.start();
  const repo = path.join(k.stateDir, "domains/ga/repo.git");
  const ref = (branch) => sh("git", ["-C", repo, "rev-parse", "--verify", "--quiet", `refs/heads/${branch}`]).trim();
  const tryPush = (domain, branch, mutate) => {
    try { return { commit: k.push(domain, branch, mutate) }; } catch (e) { return { error: String(e.stderr ?? e) }; }
  };
  const v2 = (w) => fs.appendFileSync(path.join(w, "go.mod"), "\n// v2\n");
  // A branch deletion from an empty local repository, as an agent would prune a candidate.
  const scratch = fs.mkdtempSync(path.join(k.dir, "delete-"));
  sh("git", ["init", "-q"], { cwd: scratch });
  const tryDelete = (domain, branch) => {
    try {
      sh("git", ["push", "-q", `http://127.0.0.1:${k.port}/git/${domain}.git`, `:refs/heads/${branch}`], { cwd: scratch,
        env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader",
          GIT_CONFIG_VALUE_0: `Authorization: Bearer ${token(domain)}` } });
      return {};
    } catch (e) { return { error: String(e.stderr ?? e) }; }
  };
  const c1 = k.push("ga", "c1");
  k.push("gx", "c1");
  const ga = await k.connect("ga");
  const gx = await k.connect("gx");
  const a1 = await mustBuild(ga, "c1");
  assert.equal(a1.commit, c1);

  // 1. A stale ref lock (a git process died while updating refs/heads/c1).
  const lock = path.join(repo, "refs/heads/c1.lock");
  fs.writeFileSync(lock, "");
  const locked = tryPush("ga", "c1", v2);
  assert.match(locked.error ?? "", /cannot lock ref 'refs\/heads\/c1'/, JSON.stringify(locked));
  assert.equal(ref("c1"), c1, "the branch did not move");
  assert.ok(tryPush("gx", "c2").commit, "the other domain pushes meanwhile");
  const [al, xl] = await Promise.all([build(ga, "c1"), build(gx, "c2")]);
  assert.equal(al.status, "succeeded", JSON.stringify(al));
  assert.equal(al.commit, c1, "the build sees the branch as it was");
  assert.equal(al.image.digest, a1.image.digest);
  assert.equal(xl.status, "succeeded", JSON.stringify(xl));
  fs.rmSync(lock);
  const c1b = k.push("ga", "c1", v2);
  const a2 = await mustBuild(ga, "c1");
  assert.equal(a2.commit, c1b);

  // 2. A stale packed-refs.lock: deleting a branch fails; pushing and building still work.
  const c3 = k.push("ga", "c3");
  fs.writeFileSync(path.join(repo, "packed-refs.lock"), "");
  const del = tryDelete("ga", "c3");
  assert.match(del.error ?? "", /packed-refs|cannot lock/, JSON.stringify(del));
  assert.equal(ref("c3"), c3, "the branch is still there");
  assert.ok(tryPush("ga", "c4").commit, "pushing a branch does not need packed-refs");
  assert.deepEqual(tryDelete("gx", "c2"), {}, "the other domain deletes a branch meanwhile");
  fs.rmSync(path.join(repo, "packed-refs.lock"));
  assert.deepEqual(tryDelete("ga", "c3"), {});

  // 3. A corrupt HEAD: the repository is unusable for ga only.
  const head = path.join(repo, "HEAD");
  const headText = fs.readFileSync(head);
  fs.writeFileSync(head, "garbage\n");
  assert.ok(tryPush("ga", "c5").error, "pushing to a corrupt repository fails");
  const [ah, xh] = await Promise.all([build(ga, "c1"), (async () => { k.push("gx", "c3"); return build(gx, "c3"); })()]);
  assert.equal(ah.status, "failed", JSON.stringify(ah));
  assert.equal(ah.isError, true);
  assert.match(ah.error, /not a git repository/);
  assert.equal(xh.status, "succeeded", JSON.stringify(xh));
  assert.equal((await readsAnswer(ga, "c1")).latest_successful_build.build_id, a2.build_id);
  fs.writeFileSync(head, headText);
  assert.ok(tryPush("ga", "c5").commit);
  assert.equal((await build(ga, "c1")).status, "succeeded");

  // 4. A corrupt object (a blob only candidate c6 has): its checkout fails, nothing else does.
  k.push("ga", "c6", (w) => fs.writeFileSync(path.join(w, "internal/scorer/extra.go"), "package scorer\n\nconst Extra = 6\n"));
  const blob = sh("git", ["-C", repo, "rev-parse", "c6:internal/scorer/extra.go"]).trim();
  const obj = path.join(repo, "objects", blob.slice(0, 2), blob.slice(2));
  assert.ok(fs.existsSync(obj), "the blob is a loose object");
  const saved = fs.readFileSync(obj);
  fs.chmodSync(obj, 0o644);
  fs.writeFileSync(obj, "corrupt");
  const [ao, ok5, xo] = await Promise.all([build(ga, "c6"), build(ga, "c5"), build(gx, "c1")]);
  assert.equal(ao.status, "failed", JSON.stringify(ao));
  assert.match(ao.error, /checkout of [0-9a-f]{12} failed/);
  assert.match(ao.error, /inflate|corrupt|unable to read|bad object/);
  assert.equal(ok5.status, "succeeded", `ga's intact candidates build: ${JSON.stringify(ok5)}`);
  assert.equal(xo.status, "succeeded", JSON.stringify(xo));
  fs.writeFileSync(obj, saved);
  const a6 = await mustBuild(ga, "c6");
  assert.equal(a6.cache_hit, false);
  await ga.close();
  await gx.close();
  assert.equal((await k.stop()).code, 0);
});

// ------------------------------------------------------------------------------ 5. kubernetes

const k8sDir = path.join(dir, "k8s");

function startFake() {
  const p = spawn("python3", [path.join(root, "tests/fake_k8s/fake_apiserver.py"), "--port", String(K8S_PORT),
    "--cert", path.join(k8sDir, "api.crt"), "--key", path.join(k8sDir, "api.key"), "--tokens", path.join(k8sDir, "tokens.json"),
    "--step-ms", "400"], { stdio: ["ignore", "inherit", "inherit"] });
  p.exited = new Promise((r) => p.once("exit", r));
  return p;
}

// The fake's control endpoints (no auth; TLS with the test CA).
async function fakeCall(method, p, body) {
  const r = await run("curl", ["-sS", "--fail-with-body", "--max-time", "30", "--cacert", path.join(k8sDir, "ca.crt"), "-X", method,
    ...(body ? ["-H", "Content-Type: application/json", "--data", JSON.stringify(body)] : []),
    `https://127.0.0.1:${K8S_PORT}${p}`]);
  if (r.code !== 0) throw new Error(`fake API server ${method} ${p}: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout);
}

// Starts the fake API server with Deployment loop/app (3 replicas, settled) running `image`.
async function fakeUp(image) {
  fake = startFake();
  await until("the fake API server", async () => { try { return await fakeCall("GET", "/_fake/stats"); } catch { return null; } }, 30_000, 100);
  await fakeCall("POST", "/_fake/state", { deployments: [{
    apiVersion: "apps/v1", kind: "Deployment",
    metadata: { name: "app", namespace: "loop", labels: { app: "app" } },
    spec: { replicas: 3, progressDeadlineSeconds: 60, selector: { matchLabels: { app: "app" } },
      template: { metadata: { labels: { app: "app" } }, spec: { containers: [{ name: "app", image }] } } },
  }] });
}

const deployedImage = async () => (await fakeCall("GET", "/_fake/deployments/loop/app")).spec.template.spec.containers[0].image;

// `kiln apply` as the loop engine runs it (operator token in KILN_TOKEN).
async function apply(k, domain) {
  const r = await run(KILN, ["apply", "--server", k.url, "--domain", domain, "--timeout", "180"],
    { env: { ...process.env, KILN_TOKEN: operatorToken } });
  let json = null;
  try { json = JSON.parse(r.stdout); } catch {}
  return { ...r, json };
}

test("Kubernetes API down or failing during a rollout: the deploy fails naming the API, kiln keeps serving, kiln apply deploys once it is back", { timeout: 240_000 }, async (t) => {
  fs.mkdirSync(k8sDir);
  // A test CA, the API server's certificate, kiln's service account (the Role of k8s/manifests).
  writeFakeApiFiles(k8sDir, [k8sToken], "kiln-faults-ca");
  fs.writeFileSync(path.join(k8sDir, "kubeconfig"), kubeconfig(k8sDir, K8S_PORT, k8sToken), { mode: 0o600 });
  await fakeUp(`127.0.0.1:${REG_PORT}/seed/app@sha256:${"1".repeat(64)}`);
  const k = new Kiln("k8s", 18734, {
    scheduler: { max_parallel_builds: 2 },
    operator_token_sha256: [sha(operatorToken)],
    registries: registries(),
    domains: {
      ka: layeredDomain("ka", { deploy: { type: "kubernetes", kubernetes: { namespace: "loop", deployment: "app", container: "app",
        kubeconfig: path.join(k8sDir, "kubeconfig"), rollout_timeout_s: 20 } } }),
      kx: layeredDomain("kx"),
    },
  });
  await k.checkConfig();
  await k.start();
  for (const c of ["c1", "c2", "c3"]) k.push("ka", c);
  for (const c of ["c1", "c2"]) k.push("kx", c);
  const ka = await k.connect("ka");
  const kx = await k.connect("kx");
  const b1 = await mustBuild(ka, "c1");
  const d1 = await call(ka, "deploy_candidate", { candidate: "c1" });
  assert.equal(d1.status, "rolled_out", JSON.stringify(d1));
  assert.equal(await deployedImage(), b1.image.ref);
  const b2 = await mustBuild(ka, "c2");

  // Deploys `candidate` and injects `fault` as soon as kiln has patched the Deployment.
  async function deployWithFault(candidate, fault) {
    const progress = [];
    let injected = null;
    const d = await call(ka, "deploy_candidate", { candidate }, { onprogress: (p) => {
      progress.push(p.message ?? "");
      if (!injected && /^patched/.test(p.message ?? "")) injected = fault();
    } });
    assert.ok(injected, `the fault was injected after the patch: ${progress.join(" | ")}`);
    await injected;
    return { d, progress };
  }

  // 1. The API server dies in the middle of the rollout (SIGKILL: connections reset, then refused).
  const { d: d2, progress } = await deployWithFault("c2", () => { fake.kill("SIGKILL"); return fake.exited; });
  t.diagnostic(`API server killed mid-rollout: ${d2.status} ${d2.reason}: ${d2.message}`);
  assert.equal(d2.status, "failed", JSON.stringify(d2));
  assert.equal(d2.isError, true);
  assert.equal(d2.reason, "Unavailable", JSON.stringify(d2));
  // Issue 16: named in the agent's terms; the API server's address stays in kiln's log.
  assert.match(d2.message, /the Kubernetes API is unreachable/, d2.message);
  assert.doesNotMatch(d2.message, new RegExp(`https://|127\\.0\\.0\\.1:${K8S_PORT}`), "no API server address");
  assert.doesNotMatch(d2.message, /TLS|certificate|cluster CA/, "an API server going away is not a TLS problem");
  assert.equal(d2.build_id, b2.build_id);
  assert.ok(progress.length >= 1);
  // kiln keeps serving: reads, builds of another domain, and apply fails clearly (exit 1).
  assert.equal(await k.healthz(), 200);
  assert.equal((await readsAnswer(ka, "c2")).deployed_build, null);
  assert.equal((await readsAnswer(ka, "c1")).deployed_build.build_id, b1.build_id, "the last rolled-out deploy is still c1's");
  await mustBuild(kx, "c1");
  const down = await apply(k, "ka");
  assert.equal(down.code, 1, down.stderr);
  assert.match(down.stderr, /unreachable|connection failed/);
  // The API server is back (its store restored from before kiln's patch): apply rolls c2 out.
  await fakeUp(b1.image.ref);
  const up = await apply(k, "ka");
  assert.equal(up.code, 0, `${up.stdout}${up.stderr}`);
  assert.equal(up.json.status, "rolled_out");
  assert.equal(up.json.build_id, b2.build_id);
  assert.equal(up.json.changed, true);
  assert.equal(await deployedImage(), b2.image.ref);
  assert.match(b2.image.ref, new RegExp(`@${b2.image.digest}$`));
  assert.equal((await call(ka, "candidate_status", { candidate: "c2" })).deployed_build.build_id, b2.build_id);

  // 2. The API server answers 503 to everything in the middle of the rollout.
  const b3 = await mustBuild(ka, "c3");
  const { d: d3 } = await deployWithFault("c3", () => fakeCall("POST", "/_fake/errors?count=1000000&code=503"));
  t.diagnostic(`API server 503 mid-rollout: ${d3.status} ${d3.reason}: ${d3.message}`);
  assert.equal(d3.status, "failed", JSON.stringify(d3));
  assert.equal(d3.reason, "Unavailable");
  assert.match(d3.message, /the Kubernetes API is failing \(HTTP 503\)/, d3.message);
  await readsAnswer(ka, "c3");
  await mustBuild(kx, "c2");
  await fakeCall("POST", "/_fake/errors?count=0");
  const up3 = await apply(k, "ka");
  assert.equal(up3.code, 0, `${up3.stdout}${up3.stderr}`);
  assert.equal(up3.json.build_id, b3.build_id);
  assert.equal(await deployedImage(), b3.image.ref);
  await ka.close();
  await kx.close();
  assert.equal((await k.stop()).code, 0);
});
