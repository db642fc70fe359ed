// Hostile tenant: two domains share one kiln and one registry; domain `evil` tries every attack
// of docs/security.md ("Sharing kiln between domains") through the real git endpoint, the
// official MCP SDK client and real buildah/bubblewrap, while domain `good` keeps working.
// Each test asserts the refusal and its message, that `good`'s candidate_status calls keep
// answering during the attack (their latencies are recorded, p50/p99 per attack, in
// $KILN_HOSTILE_JSON or build/hostile_latency.json; no timed assertion), and at the end that
// nothing was written or lost (`kiln state-check`) and `good` still builds.
//
//   tests/e2e/run_e2e.sh build/app/kiln hostile_e2e.test.mjs
// Ports: registry 5180, kiln 18760 (agents) and 18761 (metrics). Runs as root.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, execFileSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Worker } from "node:worker_threads";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { sh } from "./agent_git.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5180;
const PORT = 18760;
const METRICS_PORT = 18761;
const URL_ = `http://127.0.0.1:${PORT}`;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-hostile-e2e-"));
const regDir = path.join(dir, "registry");
const stateDir = path.join(dir, "state");
const rnd = () => crypto.randomBytes(24).toString("hex");
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tokens = { good: rnd(), evil: rnd(), lay: rnd() };
const operatorToken = rnd();
const SESSIONS_PER_DOMAIN = 16;
const GIT_SLOTS_PER_DOMAIN = 2;
const latencies = {};  // attack -> good's candidate_status latencies (ms)
const results = [];    // every tool result's JSON
let kiln, kilnLog = "";
let busybox;

// ------------------------------------------------------------------------------ helpers

function kilnPid() { return kiln.pid; }
function procStatus(pid, key) {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : 0;
}
const fdCount = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;

async function connect(domain, name = "hostile-e2e") {
  const transport = new StreamableHTTPClientTransport(new URL(`${URL_}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${tokens[domain]}` } },
  });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return client;
}

async function call(client, name, args, opts = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000, ...opts });
  const text = JSON.stringify(r);
  results.push(text);
  assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent, "text block = structured content");
  return { ...r.structuredContent, isError: r.isError };
}

// Runs `attack()` while good's agent polls candidate_status from a worker thread (its own event
// loop: the attacks' synchronous git calls do not delay it); every poll must answer.
async function during(label, attack, { candidate = "base" } = {}) {
  const w = new Worker(path.join(here, "status_poller.mjs"), { workerData: { url: `${URL_}/mcp`, token: tokens.good, candidate } });
  const messages = [];
  let wake = null;
  w.on("message", (m) => { messages.push(m); if (wake) wake(); });
  w.on("error", (e) => { messages.push({ failure: String(e), latencies: [] }); if (wake) wake(); });
  const next = async () => { while (!messages.length) await new Promise((r) => { wake = r; }); return messages.shift(); };
  const ready = await next();
  assert.ok(ready.ready, `status poller started: ${JSON.stringify(ready)}`);
  await sleep(100);  // a few calls before the attack: the baseline
  let out;
  try { out = await attack(); } finally { w.postMessage("stop"); }
  const { latencies: lat, failure } = await next();
  await w.terminate();
  assert.equal(failure, null, `good's status calls failed during ${label}: ${failure}`);
  assert.ok(lat.length > 0, `good's status calls answered during ${label}`);
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  latencies[label] = { calls: lat.length, p50_ms: +q(0.5).toFixed(2), p99_ms: +q(0.99).toFixed(2), max_ms: +lat[lat.length - 1].toFixed(2) };
  return out;
}

// A working copy with `files` (path -> content), committed; returns its directory.
function workdir(name, files) {
  const w = fs.mkdtempSync(path.join(dir, `w-${name}-`));
  for (const [f, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(w, f)), { recursive: true });
    fs.writeFileSync(path.join(w, f), content);
  }
  git(w, "init", "-q");
  git(w, "add", "-A");
  git(w, "commit", "-qm", name);
  return w;
}
const git = (w, ...a) => sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", ...a], { cwd: w });
const gitEnv = (domain) => ({ ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_COUNT: "1",
  GIT_CONFIG_KEY_0: "http.extraHeader", GIT_CONFIG_VALUE_0: `Authorization: Bearer ${tokens[domain]}` });
// git push; {code, stderr}.
function push(w, domain, refspecs, extra = []) {
  const r = spawnSync("git", ["push", "-f", ...extra, `${URL_}/git/${domain}.git`, ...refspecs],
    { cwd: w, env: gitEnv(domain), encoding: "utf8" });
  return { code: r.status, stderr: r.stderr };
}
function mustPush(w, domain, branch) {
  const r = push(w, domain, [`HEAD:refs/heads/${branch}`]);
  assert.equal(r.code, 0, `push ${domain}/${branch}: ${r.stderr}`);
}
function remoteBranches(domain) {
  const r = spawnSync("git", ["ls-remote", "--heads", `${URL_}/git/${domain}.git`], { env: gitEnv(domain), encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.split("\n").filter(Boolean).map((l) => l.split("\t")[1].replace("refs/heads/", ""));
}

// A raw HTTP/1.1 request on its own socket; resolves with {status, head, bytesSent, socket}
// once the response head arrives (the body, if any, is written as far as the server reads it).
function rawRequest({ method = "POST", path: p, headers = {}, bodyBytes = 0, chunk = 1 << 20 }) {
  return new Promise((resolve, reject) => {
    const s = net.connect(PORT, "127.0.0.1");
    let head = "", sent = 0, done = false;
    const finish = (v) => { if (!done) { done = true; resolve(v); } };
    s.on("error", (e) => finish({ status: 0, error: String(e), bytesSent: sent, socket: s }));
    s.on("close", () => finish({ status: 0, head, bytesSent: sent, socket: s }));
    s.on("data", (d) => {
      head += d.toString("latin1");
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(head);
      if (m && head.includes("\r\n\r\n")) finish({ status: Number(m[1]), head, bytesSent: sent, socket: s });
    });
    s.on("connect", () => {
      const h = { Host: `127.0.0.1:${PORT}`, "Content-Length": String(bodyBytes), ...headers };
      s.write(`${method} ${p} HTTP/1.1\r\n${Object.entries(h).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`);
      const buf = Buffer.alloc(chunk, 0x41);
      const pump = () => {
        while (!done && sent < bodyBytes) {
          const n = Math.min(chunk, bodyBytes - sent);
          sent += n;
          if (!s.write(n === chunk ? buf : buf.subarray(0, n))) return s.once("drain", pump);
        }
      };
      pump();
    });
  });
}

function stateCheck() {
  const r = spawnSync(KILN, ["state-check", "--state-dir", stateDir], { encoding: "utf8", maxBuffer: 64 << 20 });
  assert.equal(r.status, 0, `state-check: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout);
}

// ------------------------------------------------------------------------------ set-up

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  const out = sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  busybox = /^busybox=.*@(sha256:[0-9a-f]{64})$/m.exec(out)?.[1];
  assert.ok(busybox, `base_images.sh printed the busybox digest: ${out}`);
  const domain = (name, extra = {}) => ({
    token_sha256: [sha(tokens[name])],
    max_parallel_builds: 1,
    build: { mode: "containerfile", timeout_s: 300 },
    image: { registry: "local", repository: `hostile/${name}` },
    push: { max_tree_bytes: 64 << 20, max_files: 2000, max_file_bytes: 16 << 20, max_refs_per_push: 8 },
    ...extra,
  });
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, metrics_listen: `127.0.0.1:${METRICS_PORT}`, state_dir: stateDir,
      max_sessions_per_domain: SESSIONS_PER_DOMAIN, git_slots_per_domain: GIT_SLOTS_PER_DOMAIN, max_connections: 256 },
    scheduler: { max_parallel_builds: 2 },
    operator_token_sha256: [sha(operatorToken)],
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: {
      good: domain("good"),
      evil: domain("evil", { build: { mode: "containerfile", timeout_s: 120 } }),
      lay: {
        token_sha256: [sha(tokens.lay)],
        build: { mode: "layered", timeout_s: 120, layered: {
          base_image: `127.0.0.1:${REG_PORT}/kiln/busybox@${busybox}`,
          command: ["sh", "-c", "echo kiln-uid=$(id -u); exit 3"], outputs: [{ from: "out/app", to: "/app" }] } },
        image: { registry: "local", repository: "hostile/lay" },
      },
    },
  }));
  const cc = spawnSync(KILN, ["check-config", "--config", path.join(dir, "kiln.json")], { encoding: "utf8" });
  assert.equal(cc.status, 0, `check-config: ${cc.stdout}${cc.stderr}`);
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  for (let i = 0; ; i++) {
    try { if ((await fetch(`${URL_}/healthz`)).ok) break; } catch {}
    assert.ok(i < 300 && kiln.exitCode === null, `kiln serve did not start: ${kilnLog}`);
    await sleep(100);
  }
  // good's candidate `base`: an image holding good's secret code.
  const w = workdir("good-base", {
    Containerfile: "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nCOPY secret.txt /secret.txt\n",
    "secret.txt": "GOOD-DOMAIN-SECRET-CODE\n",
  });
  mustPush(w, "good", "base");
  const c = await connect("good");
  const b = await call(c, "build_candidate", { candidate: "base" });
  assert.equal(b.status, "succeeded", JSON.stringify(b));
  await c.close();
});

after(async () => {
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await exited;
  }
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch {}
  const outFile = process.env.KILN_HOSTILE_JSON ?? path.join(root, "build/hostile_latency.json");
  try { fs.writeFileSync(outFile, JSON.stringify(latencies, null, 1)); } catch {}
  console.log("good's candidate_status latency during each attack:", JSON.stringify(latencies, null, 1));
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
  for (const t of [...Object.values(tokens), operatorToken]) assert.ok(!kilnLog.includes(t), "no token in kiln's log");
  for (const r of results) assert.ok(!r.includes(stateDir) && !r.includes(dir), `no host path in a tool result: ${r.slice(0, 500)}`);
});

// ------------------------------------------------------------------------------ attacks

test("another domain's image as a base: refused before anything is fetched, naming the image and the rule", async () => {
  const goodRef = `127.0.0.1:${REG_PORT}/hostile/good`;
  const evil = await connect("evil");
  await during("cross-domain base image", async () => {
    const cases = {
      from: `FROM ${goodRef}:base\nRUN cat /secret.txt\n`,
      arg: `ARG B=${goodRef}:base\nFROM \${B}\nRUN cat /secret.txt\n`,
      copyfrom: `ARG KILN_REGISTRY\nFROM \${KILN_REGISTRY}/kiln/busybox:1\nCOPY --from=${goodRef}:base /secret.txt /s\nRUN cat /s\n`,
      mount: `ARG KILN_REGISTRY\nFROM \${KILN_REGISTRY}/kiln/busybox:1\nRUN --mount=type=bind,from=${goodRef}:base,target=/g cat /g/secret.txt\n`,
    };
    for (const [name, containerfile] of Object.entries(cases)) {
      const w = workdir(`evil-${name}`, { Containerfile: containerfile, "x.txt": "x\n" });
      mustPush(w, "evil", name);
      const b = await call(evil, "build_candidate", { candidate: name });
      assert.equal(b.isError, true, `${name}: ${JSON.stringify(b)}`);
      assert.equal(b.status, "failed", `${name}: ${JSON.stringify(b)}`);
      const text = JSON.stringify(b);
      assert.match(text, /hostile\/good/, `${name}: the refusal names the image: ${text}`);
      assert.match(text, /not allowed/, `${name}: the refusal names the rule: ${text}`);
      assert.ok(!text.includes("GOOD-DOMAIN-SECRET-CODE"), `${name}: good's code leaked: ${text}`);
      const log = await call(evil, "build_log", { build_id: b.build_id });
      assert.ok(!log.text.includes("GOOD-DOMAIN-SECRET-CODE"), `${name}: good's code in evil's log`);
    }
  });
  // evil's own image and kiln's base images stay allowed.
  const w = workdir("evil-own", { Containerfile: "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN echo own-ok\n" });
  mustPush(w, "evil", "own");
  const b = await call(evil, "build_candidate", { candidate: "own" });
  assert.equal(b.status, "succeeded", JSON.stringify(b));
  await evil.close();
});

test("invalid UTF-8 in build output: every call is answered, the text is valid, no fd leaks", async () => {
  const evil = await connect("evil");
  const fds0 = fdCount(kilnPid());
  await during("invalid utf-8 output", async () => {
    const w = workdir("evil-utf8", {
      Containerfile: "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN printf 'bad \\377\\376 bytes \\300\\257 \\355\\240\\200 end\\n'; exit 1\n",
    });
    mustPush(w, "evil", "utf8");
    for (let i = 0; i < 3; i++) {
      const b = await call(evil, "build_candidate", { candidate: "utf8" });
      assert.equal(b.isError, true, JSON.stringify(b));
      assert.match(JSON.stringify(b.log_tail ?? ""), /bad .* bytes/);
      const log = await call(evil, "build_log", { build_id: b.build_id });
      assert.match(log.text, /bad \uFFFD/, "invalid bytes replaced by U+FFFD");
      assert.ok(!log.text.includes("\u00ff"), "no latin-1 reinterpretation");
    }
    const st = await call(evil, "candidate_status", { candidate: "utf8" });
    assert.equal(st.isError, false);
  });
  await evil.close();
  await sleep(500);
  assert.ok(fdCount(kilnPid()) <= fds0 + 8, `kiln's fds grew from ${fds0} to ${fdCount(kilnPid())}`);
});

test("8 unauthenticated 60 MB bodies: refused from the headers, RSS stays bounded", async () => {
  const pid = kilnPid();
  const rss0 = procStatus(pid, "VmRSS");
  const res = await during("unauthenticated 60 MB bodies", () => Promise.all(Array.from({ length: 8 }, (_, i) => rawRequest({
    path: i % 2 ? "/git/good.git/git-receive-pack" : "/mcp",
    headers: { "Content-Type": i % 2 ? "application/x-git-receive-pack-request" : "application/json" },
    bodyBytes: 60 << 20,
  }))));
  for (const r of res) {
    assert.equal(r.status, 401, `refused with 401: ${JSON.stringify({ head: r.head, error: r.error })}`);
    assert.match(r.head, /WWW-Authenticate: Bearer/i);
    assert.ok(r.bytesSent < 60 << 20, `kiln answered before reading the whole body (${r.bytesSent} bytes sent)`);
    r.socket.destroy();
  }
  const hwm = procStatus(pid, "VmHWM");
  const rss = procStatus(pid, "VmRSS");
  console.log(`kiln RSS before ${rss0 >> 20} MiB, after ${rss >> 20} MiB, peak ${hwm >> 20} MiB`);
  assert.ok(hwm < 300 << 20, `kiln's peak RSS ${hwm >> 20} MiB < 300 MiB`);
  assert.ok(rss - rss0 < 64 << 20, `kiln's RSS grew by ${(rss - rss0) >> 20} MiB`);
  // A wrong domain's path with a valid token is refused before the body too (404, no existence leak).
  const r = await rawRequest({ path: "/git/good.git/git-receive-pack", bodyBytes: 60 << 20,
    headers: { Authorization: `Bearer ${tokens.evil}`, "Content-Type": "application/x-git-receive-pack-request" } });
  assert.equal(r.status, 404, r.head);
  assert.ok(r.bytesSent < 60 << 20);
  r.socket.destroy();
});

test("git bomb and ref flood: refused at push time through git's own channel, nothing written", async () => {
  const evil = await connect("evil");
  const before = remoteBranches("evil");
  await during("git bomb push", async () => {
    // One 4 MiB blob named 40 times (160 MiB checked out) in a repository of a few KB.
    const w = workdir("evil-bomb", { "README": "bomb\n" });
    const blob = execFileSync("git", ["hash-object", "-w", "--stdin"], { cwd: w, input: Buffer.alloc(4 << 20, 0x30) }).toString().trim();
    const entries = Array.from({ length: 40 }, (_, i) => `100644 blob ${blob}\tf${i}`).join("\n") + "\n";
    const tree = execFileSync("git", ["mktree"], { cwd: w, input: entries }).toString().trim();
    const commit = execFileSync("git", ["-c", "user.name=a", "-c", "user.email=a@x", "commit-tree", tree, "-m", "bomb"], { cwd: w }).toString().trim();
    const r = push(w, "evil", [`${commit}:refs/heads/bomb`]);
    assert.notEqual(r.code, 0, "bomb push refused");
    assert.match(r.stderr, /remote: .*(limit|max_tree_bytes)/i, `git shows kiln's reason: ${r.stderr}`);
    // A nested exponential bomb: 10 levels of 10 entries = 10^10 files of one small blob.
    const small = execFileSync("git", ["hash-object", "-w", "--stdin"], { cwd: w, input: "x" }).toString().trim();
    let t = execFileSync("git", ["mktree"], { cwd: w, input: Array.from({ length: 10 }, (_, i) => `100644 blob ${small}\tf${i}`).join("\n") + "\n" }).toString().trim();
    for (let level = 0; level < 10; level++)
      t = execFileSync("git", ["mktree"], { cwd: w, input: Array.from({ length: 10 }, (_, i) => `040000 tree ${t}\td${i}`).join("\n") + "\n" }).toString().trim();
    const c2 = execFileSync("git", ["-c", "user.name=a", "-c", "user.email=a@x", "commit-tree", t, "-m", "nested"], { cwd: w }).toString().trim();
    const r2 = push(w, "evil", [`${c2}:refs/heads/nested`]);
    assert.notEqual(r2.code, 0, "nested bomb refused");
    assert.match(r2.stderr, /remote: .*(limit|max_files|max_tree_bytes)/i, r2.stderr);
    // Too many refs in one push.
    const flood = Array.from({ length: 20 }, (_, i) => `HEAD:refs/heads/flood${i}`);
    const r3 = push(w, "evil", flood);
    assert.notEqual(r3.code, 0, "ref flood refused");
    assert.match(r3.stderr, /remote: .*(refs|max_refs_per_push)/i, r3.stderr);
  });
  assert.deepEqual(remoteBranches("evil").sort(), before.sort(), "no ref was created");
  const st = await call(evil, "candidate_status", { candidate: "bomb" });
  assert.ok(st.isError || st.state === "idle" || st.latest_build == null, JSON.stringify(st));
  await evil.close();
});

test("sessions and git slots are per domain: evil fills its own, good is unaffected", async () => {
  const clients = [];
  await during("session flood", async () => {
    // evil opens far more sessions than its cap: each new one is refused or evicts evil's own.
    for (let i = 0; i < SESSIONS_PER_DOMAIN * 3; i++) {
      try { clients.push(await connect("evil", `flood-${i}`)); } catch (e) {
        assert.match(String(e), /session|limit|503|429/i, String(e));
      }
    }
    // good still opens sessions and calls tools.
    for (let i = 0; i < 4; i++) {
      const g = await connect("good", `good-${i}`);
      const st = await call(g, "candidate_status", { candidate: "base" });
      assert.equal(st.isError, false);
      await g.close();
    }
  });
  for (const c of clients) { try { await c.close(); } catch {} }
  // git slots: evil holds more slow receive-pack requests than its slots (bodies trickling in).
  const held = [];
  await during("git slot flood", async () => {
    const statuses = [];
    for (let i = 0; i < GIT_SLOTS_PER_DOMAIN + 4; i++) {
      const s = net.connect(PORT, "127.0.0.1");
      held.push(s);
      s.on("error", () => {});
      s.write(`GET /git/evil.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tokens.evil}\r\n\r\n`);
      s.on("data", (d) => { const m = /^HTTP\/1\.1 (\d+)/.exec(d.toString()); if (m) statuses.push(Number(m[1])); });
    }
    await sleep(500);
    // good's clone works while evil's requests are in flight.
    const w = fs.mkdtempSync(path.join(dir, "clone-good-"));
    const r = spawnSync("git", ["clone", "-q", `${URL_}/git/good.git`, w], { env: gitEnv("good"), encoding: "utf8" });
    assert.equal(r.status, 0, `good's clone: ${r.stderr}`);
  });
  for (const s of held) s.destroy();
});

test("hung builds of one domain cannot hold every build slot", async () => {
  const evil = await connect("evil");
  const w = workdir("evil-hang", { Containerfile: "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN sleep 600\n" });
  for (const c of ["hang1", "hang2", "hang3"]) mustPush(w, "evil", c);
  const hung = [];
  for (const c of ["hang1", "hang2", "hang3"]) hung.push((await call(evil, "build_candidate", { candidate: c, wait: false })).build_id);
  await sleep(1000);
  const good = await connect("good");
  await during("hung builds", async () => {
    const gw = workdir("good-next", { Containerfile: "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN echo next > /next\n" });
    mustPush(gw, "good", "next");
    const b = await call(good, "build_candidate", { candidate: "next" });
    assert.equal(b.status, "succeeded", `good builds while evil's builds hang: ${JSON.stringify(b)}`);
  });
  // evil runs at most its max_parallel_builds (1): the others wait in the queue.
  const statuses = await Promise.all(["hang1", "hang2", "hang3"].map((c) => call(evil, "candidate_status", { candidate: c })));
  const running = statuses.filter((s) => ["building", "resolving", "pushing"].includes(s.state)).length;
  assert.ok(running <= 1, `evil runs at most 1 build: ${JSON.stringify(statuses.map((s) => s.state))}`);
  for (const id of hung) await call(evil, "cancel_build", { build_id: id });
  await good.close();
  await evil.close();
});

test("/metrics: not on the agents' port without the operator token; no other domain's name there", async () => {
  const m0 = await fetch(`${URL_}/metrics`);
  assert.equal(m0.status, 401);
  const m1 = await fetch(`${URL_}/metrics`, { headers: { Authorization: `Bearer ${tokens.evil}` } });
  assert.equal(m1.status, 403);
  const m2 = await fetch(`${URL_}/metrics`, { headers: { Authorization: `Bearer ${operatorToken}` } });
  assert.equal(m2.status, 200);
  const m3 = await fetch(`http://127.0.0.1:${METRICS_PORT}/metrics`);
  assert.equal(m3.status, 200);
  assert.match(await m3.text(), /domain="good"/);
  // Nothing evil reaches on the agents' port names `good`.
  for (const p of ["/healthz", "/readyz", "/v1/domains", "/mcp", "/git/nope.git/info/refs?service=git-upload-pack"]) {
    const r = await fetch(`${URL_}${p}`, { headers: { Authorization: `Bearer ${tokens.evil}` } });
    assert.ok(!(await r.text()).includes("good"), `${p} names another domain`);
  }
  const evil = await connect("evil");
  const list = await call(evil, "list_candidates", {});
  assert.ok(!JSON.stringify(list).includes("good"), JSON.stringify(list));
  const other = await call(evil, "candidate_status", { candidate: "base" });
  assert.ok(!JSON.stringify(other).includes("hostile/good"), JSON.stringify(other));
  await evil.close();
});

test("layered builds do not run as root", async () => {
  // The `lay` domain's command prints its uid and fails: the build log shows it.
  const w = workdir("lay", { README: "x\n" });
  mustPush(w, "lay", "c1");
  const lay = await connect("lay");
  const b = await call(lay, "build_candidate", { candidate: "c1" });
  assert.equal(b.isError, true, JSON.stringify(b));
  const log = await call(lay, "build_log", { build_id: b.build_id });
  const m = /kiln-uid=(\d+)/.exec(log.text);
  assert.ok(m, `the command ran and printed its uid: ${log.text.slice(-2000)}`);
  const uid = spawnSync("id", ["-u", "kiln-build"], { encoding: "utf8" }).stdout.trim();
  assert.notEqual(m[1], "0", "the layered command does not run as root");
  assert.equal(m[1], uid, "it runs as the build user");
  await lay.close();
});

test("after every attack: the state is consistent and good still builds", async () => {
  stateCheck();
  const good = await connect("good");
  const w = workdir("good-final", { Containerfile: "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN echo final > /final\n" });
  mustPush(w, "good", "final");
  const b = await call(good, "build_candidate", { candidate: "final" });
  assert.equal(b.status, "succeeded", JSON.stringify(b));
  await good.close();
});
