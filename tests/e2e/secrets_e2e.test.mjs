// Secrets end to end: a full run of the real `kiln serve` — docker-registry with htpasswd auth, a
// fake Kubernetes API server over TLS with a bearer token (tests/fake_k8s/), the local deploy
// target, domain tokens and an operator token — that exercises every tool (and its error paths),
// git push, /healthz, /readyz, /metrics, the operator API, `kiln apply`, `kiln check-config`,
// `kiln build`, and also the failures that handle credentials: a wrong Kubernetes token (401), a
// wrong registry password (a second registry entry), wrong client tokens. It collects every byte
// kiln emitted (its stdout/stderr log, every MCP HTTP response body and header, every tool
// result, build logs via build_log, /metrics, git's output, the CLI's output, the images it
// pushed, the Deployment objects it patched, the argv and environment of every process it
// started, and the files in its state directory) and asserts that no secret appears anywhere:
// the registry password (also base64 `user:pass` as in auth.json), the wrong registry password,
// the Kubernetes bearer tokens, the domain tokens, the operator token and the wrong tokens
// clients presented. A hit fails with the secret's name, the form and where it was found (the
// secret itself is masked in the message).
//
//   tests/e2e/run_e2e.sh build/app/kiln secrets_e2e.test.mjs
//   KILN_E2E_KEEP=1 keeps the temporary directory; KILN_SECRETS_DUMP=DIR writes every recorded
//   source there (one file each; unmasked: for post-mortems on a test machine only).
// Ports: registry 5171, kiln 18741, fake Kubernetes API 16470, local deploy 19178.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { promisify } from "node:util";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import crypto from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { writeFakeApiFiles, kubeconfig } from "./fake_k8s.mjs";

const execFileP = promisify(execFile);
const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
// run_e2e.sh cd's into tests/e2e before node runs: resolve a relative KILN against the
// directory it was given from (OLDPWD), then the repository root.
const KILN_GIVEN = (() => {
  const k = process.env.KILN ?? path.join(root, "build/app/kiln");
  for (const c of [path.resolve(k), path.resolve(process.env.OLDPWD ?? root, k), path.resolve(root, k)])
    if (fs.existsSync(c)) return c;
  throw new Error(`kiln binary not found: ${k}`);
})();
const REG_PORT = 5171;
const REG2_PORT = 5172;   // a second registry: kiln holds a wrong password for it
const PORT = 18741;
const K8S_PORT = 16470;
const LOCAL_PORT = 19178;
const startedAt = Date.now();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-secrets-e2e-"));
const regDir = path.join(dir, "registry");
const reg2Dir = path.join(dir, "registry2");
const stateDir = path.join(dir, "state");
const base = `http://127.0.0.1:${PORT}`;
// The binary under test, copied once: a rebuild of KILN_GIVEN during the run cannot swap it.
const KILN = path.join(dir, "kiln");
fs.copyFileSync(KILN_GIVEN, KILN);
fs.chmodSync(KILN, 0o755);
const rnd = () => crypto.randomBytes(24).toString("hex");
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const b64 = (s) => Buffer.from(s).toString("base64");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const domains = ["kube", "kbad", "loc", "breg", "bcf"];
const tokens = Object.fromEntries(domains.map((d) => [d, rnd()]));
const operatorToken = rnd();
const k8sToken = rnd();
const k8sWrongToken = rnd();          // in the second kubeconfig: the fake API answers 401
const wrongRegistryPassword = rnd();  // in the second registry entry's auth file
const wrongMcpToken = rnd();          // presented by a client, unknown to kiln
const wrongOperatorToken = rnd();
const wrongGitToken = rnd();
const canary = `kilnCanary${crypto.randomBytes(6).toString("hex")}`;  // not a secret: must be found
let registryPassword = null, registry2Password = null;
let kiln = null, fake = null, sampler = null;
const clients = {};
const buildIds = new Set();
const digests = new Set();
let cliDigest = null;
let locWork = null;   // the agent's working tree of loc/c1

// ------------------------------------------------------------------------------ the corpus
const corpus = [];   // {source, chunks: Buffer[]}
function collect(source, data = "") {
  const e = { source, chunks: [] };
  if (data !== null && data !== undefined) e.chunks.push(Buffer.isBuffer(data) ? data : Buffer.from(typeof data === "string" ? data : JSON.stringify(data)));
  corpus.push(e);
  return e;
}
const kilnLog = collect("kiln serve stdout/stderr");

/// A fetch that records every response's status line, headers and body (read from a clone while
/// the caller reads the original; SSE streams are appended as they arrive).
function recordingFetch(label) {
  return async (url, init = {}) => {
    const res = await fetch(url, init);
    const u = new URL(String(url));
    const e = collect(`${label}: ${init.method ?? "GET"} ${u.pathname} -> ${res.status}`,
      `HTTP ${res.status} ${res.statusText}\n${[...res.headers].map(([k, v]) => `${k}: ${v}`).join("\n")}\n\n`);
    if (res.body) {
      const reader = res.clone().body.getReader();
      (async () => {
        try { for (;;) { const { done, value } = await reader.read(); if (done) break; e.chunks.push(Buffer.from(value)); } } catch {}
      })();
    }
    return res;
  };
}
const http = recordingFetch("http");
async function httpText(p, init = {}) {
  const r = await http(`${base}${p}`, init);
  return { status: r.status, body: await r.text(), headers: r.headers };
}

/// Runs a command, records its stdout and stderr, never throws.
async function runCapture(label, cmd, args, opts = {}) {
  const r = await execFileP(cmd, args, { maxBuffer: 256 << 20, ...opts }).then(
    (x) => ({ code: 0, stdout: x.stdout, stderr: x.stderr }),
    (e) => ({ code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? String(e) }));
  collect(`${label} (exit ${r.code}): stdout`, r.stdout);
  collect(`${label} (exit ${r.code}): stderr`, r.stderr);
  return r;
}

async function connect(domain, token = tokens[domain]) {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    fetch: recordingFetch(`mcp ${domain}`),
  });
  const client = new Client({ name: `kiln-secrets-e2e-${domain}`, version: "1.0.0" });
  await client.connect(transport);
  return client;
}
const long = { timeout: 600_000, resetTimeoutOnProgress: true };

/// Calls a tool; records the whole result (text blocks and structuredContent) and progress.
async function call(domain, name, args, opts = {}) {
  const progress = [];
  let r;
  try {
    r = await clients[domain].callTool({ name, arguments: args }, undefined, { ...long, ...opts, onprogress: (p) => progress.push(p) });
  } catch (e) {
    collect(`tool ${domain}/${name} threw`, `${e?.name}: ${e?.message} ${JSON.stringify(e?.data ?? null)}`);
    throw e;
  }
  collect(`tool ${domain}/${name} ${JSON.stringify(args)} result`, JSON.stringify(r));
  if (progress.length) collect(`tool ${domain}/${name} progress`, JSON.stringify(progress));
  const sc = r.structuredContent ?? {};
  if (typeof sc.build_id === "string") buildIds.add(sc.build_id);
  for (const b of [sc, sc.latest_build, sc.latest_successful_build]) if (b?.image?.digest) digests.add(b.image.digest);
  return { ...sc, isError: r.isError === true };
}

function git(w, args, token) {
  const env = { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_AUTHOR_NAME: "agent", GIT_AUTHOR_EMAIL: "a@x",
    GIT_COMMITTER_NAME: "agent", GIT_COMMITTER_EMAIL: "a@x" };
  if (token) Object.assign(env, { GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader", GIT_CONFIG_VALUE_0: `Authorization: Bearer ${token}` });
  return runCapture(`git ${args[0]}`, "git", args, { cwd: w, env });
}

/// A copy of examples/epp (without its prebuilt out/), edited by `mutate`, pushed as <branch>.
async function pushBranch(domain, branch, mutate) {
  const w = fs.mkdtempSync(path.join(dir, `w-${domain}-${branch}-`));
  const epp = path.join(root, "examples/epp");
  fs.cpSync(epp, w, { recursive: true, filter: (s) => !s.startsWith(path.join(epp, "out")) });
  if (mutate) mutate(w);
  await git(w, ["init", "-q"]);
  await git(w, ["add", "-A"]);
  await git(w, ["commit", "-qm", `candidate ${branch}`]);
  const r = await git(w, ["push", "-f", `${base}/git/${domain}.git`, `HEAD:refs/heads/${branch}`], tokens[domain]);
  assert.equal(r.code, 0, `git push ${domain}/${branch}: ${r.stderr}`);
  return w;
}
function edit(w, file, from, to) {
  const f = path.join(w, file);
  const src = fs.readFileSync(f, "utf8");
  assert.ok(src.includes(from), `${file} contains ${from}`);
  fs.writeFileSync(f, src.replace(from, to));
}

async function apply(label, domain, extra = [], token = operatorToken) {
  const env = { ...process.env, KILN_TOKEN: token };
  if (token === null) delete env.KILN_TOKEN;
  return runCapture(`kiln apply ${label}`, KILN, ["apply", "--server", base, "--domain", domain, "--timeout", "300", ...extra], { env });
}

async function fakeGet(p) {
  const r = await execFileP("curl", ["-sf", "--cacert", path.join(dir, "ca.crt"), `https://127.0.0.1:${K8S_PORT}${p}`]);
  return r.stdout;
}

/// Every ~150 ms: argv and environment of kiln and every process below it (git, buildah,
/// bubblewrap, the compiler, deployed candidates), each distinct one recorded once.
function startSampler(pid) {
  const seen = new Set();
  const entry = collect("argv and environment of kiln's processes");
  const tick = () => {
    const parent = new Map();
    for (const p of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(p)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${p}/stat`, "utf8");
        parent.set(Number(p), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
      } catch {}
    }
    for (const p of parent.keys()) {
      let q = p, mine = false;
      for (let i = 0; i < 64 && q > 1; i++) { if (q === pid) { mine = true; break; } q = parent.get(q); }
      if (!mine) continue;
      try {
        const text = `pid ${p}\nargv: ${fs.readFileSync(`/proc/${p}/cmdline`).toString("latin1").replaceAll("\0", " ")}\n` +
          `env: ${fs.readFileSync(`/proc/${p}/environ`).toString("latin1").replaceAll("\0", "\n     ")}\n`;
        const key = text.replace(/^pid \d+\n/, "");
        if (!seen.has(key)) { seen.add(key); entry.chunks.push(Buffer.from(text)); }
      } catch {}
    }
  };
  const t = setInterval(tick, 150);
  return { stop: () => { clearInterval(t); tick(); }, count: () => seen.size };
}

/// Regular files under `d` (recursively), with their bytes; symlinks are not followed.
function* walkFiles(d, maxBytes = 64 << 20) {
  let ents = [];
  try { ents = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
  for (const e of ents) {
    const p = path.join(d, e.name);
    if (e.isDirectory()) yield* walkFiles(p, maxBytes);
    else if (e.isFile()) {
      try { if (fs.statSync(p).size <= maxBytes) yield [p, fs.readFileSync(p)]; } catch {}
    }
  }
}

// ------------------------------------------------------------------------------ set-up
const T = { timeout: 900_000 };   // bounded: no step may hang the suite

before(async () => {
  const reg = await execFileP(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  assert.match(reg.stdout, /url=http:\/\/127\.0\.0\.1:5171/);
  registryPassword = fs.readFileSync(path.join(regDir, "password"), "utf8").trim();
  const bases = await execFileP(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`,
    "--authfile", path.join(regDir, "auth.json")], { maxBuffer: 64 << 20 });
  const busybox = bases.stdout.match(/^busybox=[^@\s]+@(sha256:[0-9a-f]{64})$/m)?.[1];
  assert.ok(busybox, bases.stdout);
  // The second registry entry: another registry (with the base image), a wrong password.
  // (A second entry with the same URL would share the first one's credential: kiln caches its
  // registry clients by URL.)
  await execFileP(path.join(root, "scripts/registry.sh"), ["start", "--dir", reg2Dir, "--port", String(REG2_PORT)]);
  registry2Password = fs.readFileSync(path.join(reg2Dir, "password"), "utf8").trim();
  await execFileP("skopeo", ["copy", "-q", "--src-authfile", path.join(regDir, "auth.json"), "--dest-authfile", path.join(reg2Dir, "auth.json"),
    "--src-tls-verify=false", "--dest-tls-verify=false", `docker://127.0.0.1:${REG_PORT}/kiln/busybox:1`, `docker://127.0.0.1:${REG2_PORT}/kiln/busybox:1`]);
  fs.writeFileSync(path.join(dir, "wrong-auth.json"),
    JSON.stringify({ auths: { [`127.0.0.1:${REG2_PORT}`]: { auth: b64(`kiln:${wrongRegistryPassword}`) } } }), { mode: 0o600 });

  // The fake Kubernetes API server: a test CA, a server certificate for IP 127.0.0.1, a token.
  writeFakeApiFiles(dir, [k8sToken]);
  fake = spawn("python3", [path.join(root, "tests/fake_k8s/fake_apiserver.py"), "--port", String(K8S_PORT),
    "--cert", path.join(dir, "api.crt"), "--key", path.join(dir, "api.key"), "--tokens", path.join(dir, "tokens.json"),
    "--step-ms", "100"], { stdio: ["ignore", "ignore", "inherit"] });
  let up = false;
  for (let i = 0; i < 200 && !up; i++) {
    try { await fakeGet("/_fake/stats"); up = true; } catch { await sleep(100); }
  }
  assert.ok(up, "the fake API server answers");
  const deployment = (name) => ({
    apiVersion: "apps/v1", kind: "Deployment",
    metadata: { name, namespace: "loop", labels: { app: name } },
    spec: { replicas: 1, progressDeadlineSeconds: 60, selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } },
        spec: { containers: [{ name: "app", image: `127.0.0.1:${REG_PORT}/seed/${name}@sha256:${"1".repeat(64)}` }] } } },
  });
  await execFileP("curl", ["-sf", "--cacert", path.join(dir, "ca.crt"), "-X", "POST", "-H", "Content-Type: application/json",
    "--data", JSON.stringify({ deployments: [deployment("kube"), deployment("kbad")] }), `https://127.0.0.1:${K8S_PORT}/_fake/state`]);
  fs.writeFileSync(path.join(dir, "kubeconfig"), kubeconfig(dir, K8S_PORT, k8sToken), { mode: 0o600 });
  fs.writeFileSync(path.join(dir, "kubeconfig-wrong"), kubeconfig(dir, K8S_PORT, k8sWrongToken), { mode: 0o600 });

  const layered = { mode: "layered", timeout_s: 600, on_push: false, layered: {  // issue 18: cancel and error paths are timed against build calls
    base_image: `127.0.0.1:${REG_PORT}/kiln/busybox@${busybox}`,
    command: ["go", "build", "-o", "out/app", "./cmd/epp"],
    env: { CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" },
    caches: { GOCACHE: "go-build" },
    outputs: [{ from: "out/app", to: "/app" }], entrypoint: ["/app"] } };
  const k8s = (name, kc) => ({ type: "kubernetes", kubernetes: { namespace: "loop", deployment: name, container: "app",
    kubeconfig: path.join(dir, kc), rollout_timeout_s: 60 } });
  const dom = (d, build, registry, deploy, extra = {}) => ({ token_sha256: [sha(tokens[d])], build,
    image: { registry, repository: `sec/${d}` }, deploy, ...extra });
  const config = {
    log_level: "debug",
    server: { listen: `127.0.0.1:${PORT}`, state_dir: stateDir },
    operator_token_sha256: [sha(operatorToken)],
    scheduler: { max_parallel_builds: 2 },
    registries: {
      local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") },
      wrongpw: { url: `http://127.0.0.1:${REG2_PORT}`, auth_file: path.join(dir, "wrong-auth.json") },
    },
    domains: {
      kube: dom("kube", layered, "local", k8s("kube", "kubeconfig")),
      kbad: dom("kbad", layered, "local", k8s("kbad", "kubeconfig-wrong")),
      loc: dom("loc", layered, "local", { type: "local", local: { port: LOCAL_PORT, health_path: "/healthz" } },
        { tool_aliases: { build_loc: "build_candidate" } }),
      breg: dom("breg", { ...layered, layered: { ...layered.layered, base_image: `127.0.0.1:${REG2_PORT}/kiln/busybox@${busybox}` } },
        "wrongpw", { type: "none" }),
      bcf: dom("bcf", { mode: "containerfile", timeout_s: 600, on_push: false }, "wrongpw", { type: "none" }),
    },
  };
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify(config, null, 2));
  // check-config: the full config (the layered domain on the wrong password cannot resolve its
  // base: exit 1), the config without it (exit 0), a broken one (every problem listed).
  const full = await runCapture("kiln check-config (full)", KILN, ["check-config", "--config", path.join(dir, "kiln.json")]);
  assert.equal(full.code, 1, full.stdout + full.stderr);
  assert.match(full.stderr, /domains\.breg\.build\.layered\.base_image: cannot be resolved: .*(401|credential)/);
  const good = structuredClone(config);
  delete good.domains.breg;
  fs.writeFileSync(path.join(dir, "kiln-good.json"), JSON.stringify(good, null, 2));
  const ok = await runCapture("kiln check-config (good)", KILN, ["check-config", "--config", path.join(dir, "kiln-good.json")]);
  assert.equal(ok.code, 0, ok.stdout + ok.stderr);
  assert.match(ok.stdout, /config OK: 4 domains, 2 registries/);
  const broken = structuredClone(good);
  broken.scheduler.max_paralel_builds = 3;
  broken.domains.kube.deploy.kubernetes.kubeconfig = path.join(dir, "no-such-kubeconfig");
  broken.registries.wrongpw.url = `http://kiln:${wrongRegistryPassword}@127.0.0.1:${REG2_PORT}`;
  fs.writeFileSync(path.join(dir, "kiln-broken.json"), JSON.stringify(broken, null, 2));
  const bad = await runCapture("kiln check-config (broken)", KILN, ["check-config", "--config", path.join(dir, "kiln-broken.json")]);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /scheduler\.max_paralel_builds/);
  assert.match(bad.stderr, /registries\.wrongpw\.url/);
  fs.writeFileSync(path.join(dir, "loc.token"), tokens.loc, { mode: 0o600 });
  const ht = await runCapture("kiln hash-token", "sh", ["-c", `"$0" hash-token < "$1"`, KILN, path.join(dir, "loc.token")]);
  assert.equal(ht.stdout.trim(), sha(tokens.loc));

  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "10"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => kilnLog.chunks.push(Buffer.from(d)));
  kiln.stderr.on("data", (d) => kilnLog.chunks.push(Buffer.from(d)));
  sampler = startSampler(kiln.pid);
  let healthy = false;
  for (let i = 0; i < 600 && !healthy; i++) {
    try { healthy = (await fetch(`${base}/healthz`)).ok; } catch {}
    if (!healthy) await sleep(100);
  }
  assert.ok(healthy, `kiln serve did not come up: ${Buffer.concat(kilnLog.chunks).toString()}`);
  for (const d of domains) clients[d] = await connect(d);
}, T);

after(async () => {
  for (const c of Object.values(clients)) { try { await c.close(); } catch {} }
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await Promise.race([exited, sleep(60_000)]);
    if (kiln.exitCode === null && kiln.signalCode === null) kiln.kill("SIGKILL");
  }
  sampler?.stop();
  if (fake && fake.exitCode === null) fake.kill("SIGTERM");
  for (const d of [regDir, reg2Dir]) { try { await execFileP(path.join(root, "scripts/registry.sh"), ["stop", "--dir", d]); } catch {} }
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`);
  else fs.rmSync(dir, { recursive: true, force: true });
}, T);

// ------------------------------------------------------------------------------ the run
test("HTTP endpoints and their error answers", T, async () => {
  assert.equal((await httpText("/healthz")).status, 200);
  const ready = await httpText("/readyz");
  assert.ok([200, 503].includes(ready.status), ready.body);
  const m = await httpText("/metrics", { headers: { Authorization: `Bearer ${operatorToken}` } });
  assert.equal(m.status, 200);
  const mcpPost = (token, body = { jsonrpc: "2.0", id: 1, method: "ping" }) => httpText("/mcp", { method: "POST",
    headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify(body) });
  assert.equal((await mcpPost(wrongMcpToken)).status, 401);
  assert.equal((await mcpPost(null)).status, 401);
  assert.ok([401, 403].includes((await mcpPost(operatorToken)).status), "the operator token is not a domain token");
  const noSession = await httpText("/mcp", { method: "POST", headers: { Authorization: `Bearer ${tokens.loc}`, "Content-Type": "application/json",
    Accept: "application/json, text/event-stream", "MCP-Session-Id": "0".repeat(32), "MCP-Protocol-Version": "2025-11-25" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }) });
  assert.equal(noSession.status, 404);
  const garbage = await httpText("/mcp", { method: "POST", headers: { Authorization: `Bearer ${tokens.loc}`, "Content-Type": "application/json",
    Accept: "application/json, text/event-stream" }, body: `{"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": [nope` });
  assert.ok(garbage.status >= 400, `malformed JSON: ${garbage.status}`);
  const v1 = (p, token, init = {}) => httpText(p, { ...init, headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...(init.headers ?? {}) } });
  assert.equal((await v1("/v1/domains/kube", operatorToken)).status, 200);
  assert.equal((await v1("/v1/domains/kube", tokens.kube)).status, 403);
  assert.equal((await v1("/v1/domains/kube", wrongOperatorToken)).status, 401);
  assert.equal((await v1("/v1/domains/kube", null)).status, 401);
  assert.equal((await v1("/v1/domains/nope", operatorToken)).status, 404);
  assert.equal((await v1("/v1/domains/kube", operatorToken, { method: "DELETE" })).status, 405);
  assert.equal((await v1("/v1/domains/kube/apply", operatorToken, { method: "POST", body: "[1, 2]" })).status, 400);
  assert.ok((await httpText("/nope")).status >= 400);
  const refs = (token) => httpText("/git/loc.git/info/refs?service=git-upload-pack", token ? { headers: { Authorization: `Bearer ${token}` } } : {});
  assert.equal((await refs(tokens.loc)).status, 200);
  assert.equal((await refs(wrongGitToken)).status, 401);
  assert.equal((await refs(tokens.kube)).status, 404, "another domain's token: not found");
});

test("git: pushes, a clone, and refused pushes", T, async () => {
  locWork = await pushBranch("loc", "c1");
  await pushBranch("loc", "c2", (w) => edit(w, "cmd/epp/main.go", `[]byte("ok\\n")`, `[]byte("ok v2\\n")`));
  await pushBranch("loc", "bad", (w) => edit(w, "internal/scorer/scorer.go", "s += w.Adapter\n", `s += w.Adapter\n\t_ = ${canary}\n`));
  await pushBranch("loc", "crash", (w) => edit(w, "cmd/epp/main.go", `port := os.Getenv("PORT")`,
    `log.Fatal("boom: refusing to start")\n\tport := os.Getenv("PORT")`));
  await pushBranch("kube", "c1");
  await pushBranch("kbad", "c1");
  await pushBranch("breg", "c1");
  const w = await pushBranch("bcf", "c1");
  const clone = await git(dir, ["clone", "-q", `${base}/git/loc.git`, path.join(dir, "clone-loc")], tokens.loc);
  assert.equal(clone.code, 0, clone.stderr);
  const wrong = await git(w, ["push", "-f", `${base}/git/bcf.git`, "HEAD:refs/heads/c9"], wrongGitToken);
  assert.notEqual(wrong.code, 0);
  const other = await git(w, ["push", "-f", `${base}/git/bcf.git`, "HEAD:refs/heads/c9"], tokens.kube);
  assert.notEqual(other.code, 0);
  const asOperator = await git(w, ["push", "-f", `${base}/git/bcf.git`, "HEAD:refs/heads/c9"], operatorToken);
  assert.notEqual(asOperator.code, 0);
  await git(w, ["tag", "v1"]);
  const tag = await git(w, ["push", `${base}/git/bcf.git`, "refs/tags/v1"], tokens.bcf);
  assert.notEqual(tag.code, 0);
  assert.match(tag.stderr, /only branches/);
});

test("kiln apply with nothing built exits 2", T, async () => {
  const r = await apply("nothing built", "kube");
  assert.equal(r.code, 2, r.stderr);
});

test("every tool, with its error paths (local target)", T, async () => {
  for (const d of domains) {
    const { tools } = await clients[d].listTools();
    collect(`tools/list ${d}`, JSON.stringify(tools));
    if (d === "loc") assert.ok(tools.some((t) => t.name === "build_loc"));
  }
  // Bad arguments.
  for (const args of [{ candidate: "../../etc" }, {}, { candidate: "c1", wait: "yes" }, { candidate: "c1", bogus: 1 },
    { candidate: "c1", commit: "zz" }, { candidate: "c1", ref: "refs/tags/x..y" }])
    assert.equal((await call("loc", "build_candidate", args)).isError, true, JSON.stringify(args));
  assert.equal((await call("loc", "build_log", { build_id: "b-0000000000000000", limit: 0 })).isError, true);
  assert.equal((await call("loc", "deploy_candidate", { candidate: "c1", wait: 3 })).isError, true);
  // Unknown candidate, unknown build, unknown tool.
  assert.equal((await call("loc", "build_candidate", { candidate: "nosuch" })).isError, true);
  const unknownSt = await call("loc", "candidate_status", { candidate: "nosuch2" });
  assert.ok(unknownSt.isError || unknownSt.state === "idle", JSON.stringify(unknownSt));
  assert.equal((await call("loc", "deploy_candidate", { candidate: "nosuch" })).isError, true);
  assert.equal((await call("loc", "build_log", { build_id: "b-0000000000000000" })).isError, true);
  assert.equal((await call("loc", "cancel_build", { build_id: "b-0000000000000000" })).isError, true);
  await assert.rejects(call("loc", "no_such_tool", {}));
  // A build with progress, through the alias; a cache hit; a compile error.
  const b1 = await call("loc", "build_loc", { candidate: "c1" });
  assert.equal(b1.status, "succeeded", JSON.stringify(b1));
  const again = await call("loc", "build_candidate", { candidate: "c1" });
  assert.equal(again.cache_hit, true);
  const bad = await call("loc", "build_candidate", { candidate: "bad" });
  assert.equal(bad.status, "failed");
  assert.ok(bad.diagnostics.some((x) => x.file === "internal/scorer/scorer.go" && x.message.includes(canary)), JSON.stringify(bad.diagnostics));
  assert.equal((await call("loc", "deploy_candidate", { candidate: "bad", build_id: bad.build_id })).isError, true, "a failed build cannot be deployed");
  // cancel_build of a running build and of a finished one; wait:false and polling.
  const c2 = await call("loc", "build_candidate", { candidate: "c2", wait: false });
  const cancelled = await call("loc", "cancel_build", { build_id: c2.build_id });
  assert.equal(cancelled.status, "cancelled", JSON.stringify(cancelled));
  const finished = await call("loc", "cancel_build", { build_id: b1.build_id });
  assert.equal(finished.status, "succeeded");
  assert.ok(finished.note);
  const c2b = await call("loc", "build_candidate", { candidate: "c2", wait: false });
  let st;
  for (let i = 0; i < 1200; i++) {
    st = await call("loc", "candidate_status", { candidate: "c2" });
    if (st.latest_build?.build_id === c2b.build_id && ["succeeded", "failed", "cancelled"].includes(st.latest_build.status)) break;
    await sleep(100);
  }
  assert.equal(st.latest_build.status, "succeeded", JSON.stringify(st).slice(0, 1000));
  // Deploys: rolled out; a candidate that refuses to start fails and the previous one keeps serving.
  const d1 = await call("loc", "deploy_candidate", { candidate: "c2" });
  assert.equal(d1.status, "rolled_out", JSON.stringify(d1));
  const crash = await call("loc", "build_candidate", { candidate: "crash" });
  assert.equal(crash.status, "succeeded");
  const d2 = await call("loc", "deploy_candidate", { candidate: "crash" });
  assert.equal(d2.status, "failed", JSON.stringify(d2));
  assert.equal(d2.isError, true);
  const served = await http(`http://127.0.0.1:${LOCAL_PORT}/healthz`);
  assert.equal(await served.text(), "ok v2\n");
  const inProgress = await call("loc", "deploy_candidate", { candidate: "c1", wait: false });
  assert.ok(["in_progress", "rolled_out", "failed"].includes(inProgress.status), JSON.stringify(inProgress));
  await call("loc", "list_candidates", {});
  for (const c of ["c1", "c2", "bad", "crash"]) await call("loc", "candidate_status", { candidate: c });
  // Another domain's build id is not found.
  assert.equal((await call("kube", "build_log", { build_id: b1.build_id })).isError, true);
});

test("kubernetes target: rollout with the token, a 401 with the wrong token", T, async () => {
  const b = await call("kube", "build_candidate", { candidate: "c1" });
  assert.equal(b.status, "succeeded", JSON.stringify(b));
  const d = await call("kube", "deploy_candidate", { candidate: "c1" });
  assert.equal(d.status, "rolled_out", JSON.stringify(d));
  const a = await apply("kube", "kube");
  assert.equal(a.code, 0, a.stderr);
  const viaFile = path.join(dir, "operator-token");
  fs.writeFileSync(viaFile, operatorToken, { mode: 0o600 });
  const a2 = await apply("kube --token-file", "kube", ["--token-file", viaFile], null);
  assert.equal(a2.code, 0, a2.stderr);
  collect("fake API: Deployment loop/kube as kiln patched it", await fakeGet("/_fake/deployments/loop/kube"));

  const bb = await call("kbad", "build_candidate", { candidate: "c1" });
  assert.equal(bb.status, "succeeded", JSON.stringify(bb));
  const bd = await call("kbad", "deploy_candidate", { candidate: "c1" });
  assert.equal(bd.status, "failed", JSON.stringify(bd));
  assert.equal(bd.reason, "Unauthorized", JSON.stringify(bd));
  const ba = await apply("kbad (401)", "kbad");
  assert.equal(ba.code, 1, ba.stderr);
  collect("fake API: Deployment loop/kbad", await fakeGet("/_fake/deployments/loop/kbad"));
});

test("registry: a wrong password in the second registry entry fails the build clearly", T, async () => {
  const b = await call("breg", "build_candidate", { candidate: "c1" });
  assert.equal(b.status, "failed", JSON.stringify(b));
  assert.match(b.error ?? "", /credential|401|unauthori/i);
  const c = await call("bcf", "build_candidate", { candidate: "c1" });
  assert.equal(c.status, "failed", JSON.stringify(c));
  assert.match(`${c.error} ${c.log_tail}`, /credential|401|unauthori|authentication required/i);
  // The same through `kiln build` (one build, no server; does not journal).
  const src = locWork;
  const cli = await runCapture("kiln build breg", KILN, ["build", "--config", path.join(dir, "kiln.json"), "--domain", "breg",
    "--candidate", "cli", "--source", src]);
  assert.equal(cli.code, 1, cli.stdout + cli.stderr);
  const ok = await runCapture("kiln build loc", KILN, ["build", "--config", path.join(dir, "kiln.json"), "--domain", "loc",
    "--candidate", "cli", "--source", src]);
  assert.equal(ok.code, 0, ok.stdout + ok.stderr);
  cliDigest = JSON.parse(ok.stdout).image.digest;
});

test("kiln apply: error paths", T, async () => {
  assert.equal((await apply("wrong operator token", "kube", [], wrongOperatorToken)).code, 1);
  assert.equal((await apply("domain token", "kube", [], tokens.kube)).code, 1);
  assert.equal((await apply("unknown domain", "nope")).code, 1);
  assert.equal((await apply("unknown candidate", "kube", ["--candidate", "nosuch"])).code !== 0, true);
  const wrongFile = path.join(dir, "wrong-operator-token");
  fs.writeFileSync(wrongFile, wrongOperatorToken, { mode: 0o600 });
  assert.equal((await apply("wrong --token-file", "kube", ["--token-file", wrongFile], null)).code, 1);
  assert.equal((await apply("local", "loc", ["--candidate", "c2"])).code, 0);
});

test("no secret appears in anything kiln emitted", T, async () => {
  // The rest of what kiln shows: every build's log, statuses, metrics, the operator API.
  for (const d of domains) {
    const l = await call(d, "list_candidates", {});
    for (const c of l.candidates ?? []) await call(d, "candidate_status", { candidate: c.candidate });
  }
  const owner = new Map();
  for (const d of domains) {
    for (const id of buildIds) {
      if (owner.has(id)) continue;
      let offset = 0;
      for (let i = 0; i < 100; i++) {
        const r = await call(d, "build_log", { build_id: id, offset, limit: 1_048_576 });
        if (r.isError) break;
        owner.set(id, d);
        if (r.complete || r.next_offset === offset) break;
        offset = r.next_offset;
      }
    }
  }
  assert.equal(owner.size, buildIds.size, "every build's log was read");
  await httpText("/metrics", { headers: { Authorization: `Bearer ${operatorToken}` } });
  await httpText("/readyz");
  for (const d of domains) await httpText(`/v1/domains/${d}`, { headers: { Authorization: `Bearer ${operatorToken}` } });
  // The images kiln pushed: manifest, config and the uncompressed layers.
  let images = 0;
  for (const dg of [...digests, cliDigest]) {
    for (const d of ["kube", "kbad", "loc"]) {
      const out = path.join(dir, `img-${d}-${dg.slice(7, 19)}`);
      const r = await execFileP("skopeo", ["copy", "-q", "--authfile", path.join(regDir, "auth.json"), "--src-tls-verify=false",
        `docker://127.0.0.1:${REG_PORT}/sec/${d}@${dg}`, `dir:${out}`]).catch(() => null);
      if (!r) continue;
      for (const [f, data] of walkFiles(out)) {
        let bytes = data;
        if (data[0] === 0x1f && data[1] === 0x8b) { try { bytes = zlib.gunzipSync(data); } catch {} }
        collect(`image sec/${d}@${dg.slice(0, 19)}: ${path.basename(f)}`, bytes);
      }
      fs.rmSync(out, { recursive: true, force: true });
      images++;
      break;
    }
  }
  assert.equal(images, digests.size + 1, "every pushed image was read back");
  // Stop kiln (SIGTERM): its last log lines, the processes it left, the state it wrote.
  for (const c of Object.values(clients)) await c.close();
  const exited = new Promise((r) => kiln.once("exit", (code, signal) => r({ code, signal })));
  kiln.kill("SIGTERM");
  const ex = await exited;
  assert.equal(ex.code, 0, `kiln exit: ${JSON.stringify(ex)}`);
  sampler.stop();
  await runCapture("kiln state-check", KILN, ["state-check", "--state-dir", stateDir, "--builds"]);
  // ---- the secrets, in every form kiln could print them
  const secrets = [
    ["registry password", registryPassword, [`kiln:${registryPassword}`]],
    ["second registry's real password (kiln never had it)", registry2Password, [`kiln:${registry2Password}`]],
    ["wrong registry password (second registry entry)", wrongRegistryPassword, [`kiln:${wrongRegistryPassword}`]],
    ["Kubernetes bearer token", k8sToken, []],
    ["wrong Kubernetes bearer token (second kubeconfig)", k8sWrongToken, []],
    ["operator token", operatorToken, []],
    ["wrong operator token (presented to kiln)", wrongOperatorToken, []],
    ["wrong MCP token (presented to kiln)", wrongMcpToken, []],
    ["wrong git token (presented to kiln)", wrongGitToken, []],
    ...domains.map((d) => [`domain token of ${d}`, tokens[d], []]),
  ];
  const forms = [];
  for (const [name, value, userPass] of secrets) {
    assert.ok(value && value.length >= 32, `${name} is a real secret`);
    forms.push([name, "as is", value], [name, "first 16 characters", value.slice(0, 16)], [name, "base64", b64(value)]);
    for (const up of userPass) forms.push([name, "base64 user:pass (as in auth.json)", b64(up)], [name, "user:pass", up]);
  }
  assert.ok(fs.readFileSync(path.join(regDir, "auth.json"), "utf8").includes(b64(`kiln:${registryPassword}`)), "the auth.json form is the one searched for");
  // Context printed with a hit never shows a secret: every form masked, long hex runs too.
  const byLength = [...forms].sort((x, y) => y[2].length - x[2].length);
  const mask = (str) => byLength.reduce((t, [name, , needle]) => t.replaceAll(needle, `<${name}>`), str)
    .replace(/[0-9a-f]{20,}/g, "<hex>").replace(/[^\x20-\x7e]/g, ".");
  const scan = (entries) => {
    const hits = [];
    for (const e of entries)
      for (const [name, form, needle] of forms) {
        const at = e.bytes.indexOf(needle);
        if (at < 0) continue;
        const ctx = mask(e.bytes.subarray(Math.max(0, at - 80), Math.min(e.bytes.length, at + needle.length + 80)).toString("latin1"));
        hits.push(`${name} (${form}) in [${e.source}] at byte ${at}: ...${ctx}...`);
      }
    return hits;
  };
  // Files too many to keep: scanned as they are read. The state directory kiln wrote, and files
  // anyone created in the temporary directory during the run (our own directory aside): kiln
  // must not leave a credential in a temporary file either.
  const streamHits = [];
  let stateFiles = 0, tmpFiles = 0, tmpBytes = 0;
  for (const [f, data] of walkFiles(stateDir)) {
    streamHits.push(...scan([{ source: `state dir file ${path.relative(dir, f)}`, bytes: data }]));
    stateFiles++;
  }
  const walkNew = function* (d, depth) {
    let ents = [];
    try { ents = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
    for (const e of ents) {
      const p = path.join(d, e.name);
      if (p === dir) continue;
      let st;
      try { st = fs.lstatSync(p); } catch { continue; }
      if (st.mtimeMs < startedAt - 1000 && !e.isDirectory()) continue;
      if (e.isDirectory() && depth < 3) yield* walkNew(p, depth + 1);
      else if (e.isFile() && st.size <= (4 << 20)) { try { yield [p, fs.readFileSync(p)]; } catch {} }
    }
  };
  for (const [f, data] of walkNew(os.tmpdir(), 0)) {
    if ((tmpBytes += data.length) > (256 << 20)) break;
    streamHits.push(...scan([{ source: `temporary file ${f}`, bytes: data }]));
    tmpFiles++;
  }

  // ---- the corpus must be large and hold what kiln really said (so a leak would be seen)
  const all = corpus.map((e) => ({ source: e.source, bytes: Buffer.concat(e.chunks) }));
  const size = all.reduce((s, e) => s + e.bytes.length, 0);
  const text = (pred) => Buffer.concat(all.filter((e) => pred(e.source)).map((e) => e.bytes)).toString("latin1");
  const log = text((s) => s === "kiln serve stdout/stderr");
  const results = text((s) => s.startsWith("tool "));
  const mcpWire = text((s) => s.startsWith("mcp "));
  const cli = text((s) => s.startsWith("kiln ") || s.startsWith("git "));
  console.log(`corpus: ${all.length} sources, ${(size / 1048576).toFixed(1)} MiB (kiln log ${log.length} B, tool results ${results.length} B, ` +
    `MCP wire ${mcpWire.length} B, CLI/git ${cli.length} B, ${sampler.count()} process argv/env, ${stateFiles} state files, ${tmpFiles} temp files)`);
  assert.ok(all.length > 150, `corpus sources: ${all.length}`);
  assert.ok(log.length > 5000 && results.length > 20000 && mcpWire.length > 20000 && cli.length > 1000, "each channel was recorded");
  assert.ok(sampler.count() > 5, "kiln's child processes were sampled");
  assert.ok(stateFiles > 20, "the state directory was read");
  for (const need of [`127.0.0.1:${REG_PORT}`, "Unauthorized", canary, ...digests])
    assert.ok(results.includes(need), `tool results mention ${need}`);
  assert.ok(cli.includes(cliDigest), "kiln build's output was recorded");
  for (const dg of digests) assert.ok(mcpWire.includes(dg), `the MCP wire shows ${dg}`);
  assert.ok(log.includes(`127.0.0.1:${REG_PORT}`) || log.includes("sec/"), "kiln's log names the registry or repositories");
  assert.match(log, /build b-[0-9a-f]{16} domain=loc candidate=bad -> failed/);
  assert.match(results, /rejected|credential/i, "the registry credential failure is in a tool result");
  assert.match(text((s) => s.startsWith("kiln apply kbad")), /401|Unauthorized/);
  assert.match(text((s) => s.startsWith("argv and environment")), /argv: .*(bwrap|git)/);

  // The scanner finds what is there: a planted copy, and (not secret) the canary kiln echoed.
  const planted = scan([{ source: "self-test", bytes: Buffer.from(`x ${b64(`kiln:${registryPassword}`)} y ${tokens.loc.slice(0, 16)}.`) }]);
  assert.ok(planted.some((h) => h.startsWith("registry password (base64 user:pass")) &&
    planted.some((h) => h.startsWith("domain token of loc (first 16")) && planted.every((h) => !h.includes(registryPassword)),
    `the scanner finds planted secrets and masks them: ${planted.length}`);
  assert.ok(all.some((e) => e.source.startsWith("tool loc/build_log") && e.bytes.includes(canary)), "build_log text is scanned");
  if (process.env.KILN_SECRETS_DUMP) {   // for post-mortems: every recorded source, one file each
    fs.mkdirSync(process.env.KILN_SECRETS_DUMP, { recursive: true });
    all.forEach((e, i) => fs.writeFileSync(path.join(process.env.KILN_SECRETS_DUMP,
      `${String(i).padStart(4, "0")}-${e.source.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 120)}`), e.bytes));
  }
  const hits = [...scan(all), ...streamHits];
  assert.deepEqual(hits, [], `SECRET LEAKED (${hits.length} hit(s)):\n  ${hits.join("\n  ")}`);
});
