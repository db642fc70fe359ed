// Issue 19, every wait bounded: a registry that accepts connections and never answers must not
// hold a build past the domain's build.timeout_s. The real `kiln serve` (layered mode, real
// bubblewrap, a real docker-registry with htpasswd auth) builds domains "slow" and "cold", whose
// registry is a tiny HTTP server here in front of the real one: it reads every request and
// forwards it, except that requests for the repositories `stalled/*` (the pushes of "slow") and,
// once `stallAll` is set, every request (the base-image fetch of "cold", whose base store is
// empty) are read and never answered. Meanwhile domain "fine" (the real registry) builds and both
// domains' status calls keep answering. Each stalled build fails as `infrastructure` within its
// timeout — a stalled push took ~90 s before pushes counted against the build's deadline — and
// nothing of it is left running.
//
//   tests/e2e/run_e2e.sh build/app/kiln $PWD/tests/integration/stalled_registry.test.mjs
// Ports: registry 5230, silent server 5231, kiln 18830. Runs as root (bubblewrap, registry).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const sdk = path.join(root, "tests/e2e/node_modules/@modelcontextprotocol/sdk/dist/esm");
const { Client } = await import(pathToFileURL(path.join(sdk, "client/index.js")).href);
const { StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(sdk, "client/streamableHttp.js")).href);
const { pushCandidate } = await import(pathToFileURL(path.join(root, "tests/e2e/agent_git.mjs")).href);

const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5230;
const SILENT_PORT = 5231;
const PORT = 18830;
const TIMEOUT_S = 20;  // build.timeout_s of domain "slow"
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-stalled-registry-"));
const regDir = path.join(dir, "registry");
const rnd = () => crypto.randomBytes(24).toString("hex");
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tokens = { slow: rnd(), cold: rnd(), fine: rnd() };
let kiln, kilnLog = "", silent, silentSockets = new Set();
let stallAll = false;
const stalled = [];  // "METHOD path" of every request held unanswered

function startSilent() {
  silent = http.createServer((req, res) => {
    if (stallAll || req.url.startsWith("/v2/stalled/")) {
      stalled.push(`${req.method} ${req.url.split("?")[0]}`);
      req.resume();  // read it all, answer nothing
      return;
    }
    const up = http.request({ host: "127.0.0.1", port: REG_PORT, method: req.method, path: req.url,
      headers: { ...req.headers, host: `127.0.0.1:${REG_PORT}` } }, (r) => {
      const headers = { ...r.headers };
      if (headers.location) headers.location = headers.location.replace(`127.0.0.1:${REG_PORT}`, `127.0.0.1:${SILENT_PORT}`);
      res.writeHead(r.statusCode, headers);
      r.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  silent.on("connection", (sock) => { silentSockets.add(sock); sock.on("close", () => silentSockets.delete(sock)); });
  return new Promise((r) => silent.listen(SILENT_PORT, "127.0.0.1", r));
}

async function connect(domain) {
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${tokens[domain]}` } },
  });
  const client = new Client({ name: `stalled-registry-${domain}`, version: "1.0.0" });
  await client.connect(transport);
  return client;
}
async function call(client, name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 });
  return { sc: r.structuredContent ?? {}, isError: r.isError === true };
}
function push(domain, branch, tag) {
  return pushCandidate(dir, { port: PORT, domain, branch, token: tokens[domain], mutate: (w) => {
    fs.rmSync(path.join(w, "out"), { recursive: true, force: true });
    const f = path.join(w, "cmd/epp/main.go");
    const src = fs.readFileSync(f, "utf8");
    assert.ok(src.includes('[]byte("ok\\n")'));
    fs.writeFileSync(f, src.replace('[]byte("ok\\n")', `[]byte("ok ${tag}\\n")`));
  } });
}
// Processes whose command line names this test's directory (build sandboxes, compilers, git).
/// Processes of this test's directory other than kiln itself and the registry (a stalled
/// build's buildah, git or sandbox must not outlive it).
function leftovers() {
  const r = spawnSync("pgrep", ["-af", dir], { encoding: "utf8" });
  return r.stdout.split("\n").filter((l) => l.trim() && !l.includes("pgrep") &&
    !(kiln && l.startsWith(`${kiln.pid} `)) && !/^\d+ docker-registry serve /.test(l));
}

before(async () => {
  const reg = spawnSync(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)], { encoding: "utf8" });
  assert.equal(reg.status, 0, reg.stderr);
  const bases = spawnSync(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`,
    "--authfile", path.join(regDir, "auth.json")], { encoding: "utf8" });
  assert.equal(bases.status, 0, bases.stderr);
  const busybox = bases.stdout.match(/^busybox=[^@\s]+@(sha256:[0-9a-f]{64})$/m)?.[1];
  assert.ok(busybox, bases.stdout);
  await startSilent();
  const layered = {
    base_image: `127.0.0.1:${REG_PORT}/kiln/busybox@${busybox}`,
    command: ["go", "build", "-o", "out/app", "./cmd/epp"],
    env: { CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" },
    caches: { GOCACHE: "go-build" },
    outputs: [{ from: "out/app", to: "/app" }], entrypoint: ["/app"],
  };
  const domain = (name, registry, timeout, repository = `stalled/${name}`) => ({
    token_sha256: [sha(tokens[name])],
    build: { mode: "layered", timeout_s: timeout, on_push: false,
      layered: { ...layered, base_image: `127.0.0.1:${registry === "good" ? REG_PORT : SILENT_PORT}/kiln/busybox@${busybox}` } },
    image: { registry, repository },
  });
  // The server's auth file for the front server: the same credential under its host.
  const auth = JSON.parse(fs.readFileSync(path.join(regDir, "auth.json"), "utf8"));
  fs.writeFileSync(path.join(dir, "front-auth.json"), JSON.stringify({ auths: {
    [`127.0.0.1:${SILENT_PORT}`]: auth.auths[`127.0.0.1:${REG_PORT}`] } }), { mode: 0o600 });
  const config = path.join(dir, "kiln.json");
  fs.writeFileSync(config, JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: path.join(dir, "state") },
    scheduler: { max_parallel_builds: 2 },
    operator_token_sha256: [sha(rnd())],
    registries: {
      good: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") },
      silent: { url: `http://127.0.0.1:${SILENT_PORT}`, auth_file: path.join(dir, "front-auth.json") },
    },
    domains: { slow: domain("slow", "silent", TIMEOUT_S), cold: domain("cold", "silent", TIMEOUT_S, "fine/cold"),
      fine: domain("fine", "good", 600, "fine/fine") },
  }, null, 1));
  // Asynchronously: check-config resolves the base images through the front server, which runs
  // in this process.
  const cc = await new Promise((resolve) => {
    const p = spawn(KILN, ["check-config", "--config", config], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => { out += d; });
    p.on("close", (code) => resolve({ code, out }));
  });
  assert.equal(cc.code, 0, cc.out);
  kiln = spawn(KILN, ["serve", "--config", config, "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  for (let i = 0; ; i++) {
    assert.ok(kiln.exitCode === null, `kiln exited: ${kilnLog}`);
    try { if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) break; } catch {}
    assert.ok(i < 600, "kiln did not answer /healthz");
    await sleep(100);
  }
});

after(async () => {
  if (kiln && kiln.exitCode === null) {
    kiln.kill("SIGTERM");
    await new Promise((r) => { kiln.once("exit", r); setTimeout(() => { kiln.kill("SIGKILL"); r(); }, 30_000); });
  }
  for (const s of silentSockets) s.destroy();
  silent?.close();
  spawnSync(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]);
  fs.rmSync(dir, { recursive: true, force: true });
});

// One build of `domain` against the stalled registry while "fine" builds and both answer status
// calls; returns the build's result after checking it failed as infrastructure within its bound.
async function stalledBuild(domain, what) {
  const slow = await connect(domain);
  const fine = await connect("fine");
  push(domain, "c1", `${domain}-1`);
  const before = stalled.length;
  const t0 = Date.now();
  let done = false;
  const build = call(slow, "build_candidate", { candidate: "c1" }).finally(() => { done = true; });
  // Meanwhile: status calls of both domains answer, and the other domain builds and pushes.
  const statusAnswers = { stalled: 0, fine: 0 };
  const poll = (async () => {
    while (!done) {
      const a = await call(slow, "candidate_status", { candidate: "c1" });
      assert.ok(!a.isError && a.sc.candidate === "c1", JSON.stringify(a.sc));
      statusAnswers.stalled++;
      const b = await call(fine, "list_candidates", {});
      assert.ok(!b.isError && b.sc.domain === "fine", JSON.stringify(b.sc));
      statusAnswers.fine++;
      await sleep(500);
    }
  })();
  push("fine", `during-${domain}`, `fine-${domain}`);
  const other = await call(fine, "build_candidate", { candidate: `during-${domain}` });
  assert.equal(other.sc.status, "succeeded", `the other domain builds while a registry stalls: ${JSON.stringify(other.sc).slice(0, 600)}`);
  const r = await build;
  const elapsed = Date.now() - t0;
  await poll;
  assert.ok(stalled.length > before, `kiln's ${what} reached the stalled registry`);
  assert.equal(r.sc.status, "failed", JSON.stringify(r.sc).slice(0, 800));
  assert.equal(r.sc.error_kind, "infrastructure", JSON.stringify(r.sc).slice(0, 800));
  assert.ok(r.isError);
  // The bound: the build's timeout plus slack — far below what unbounded waits took (each
  // registry request: 30 s per I/O step, 3 attempts).
  assert.ok(elapsed < (TIMEOUT_S + 30) * 1000, `the build ended ${elapsed} ms after the request (timeout_s ${TIMEOUT_S}): ${r.sc.error}`);
  assert.ok(statusAnswers.stalled >= 2 && statusAnswers.fine >= 2, JSON.stringify(statusAnswers));
  assert.ok(!JSON.stringify(r.sc).includes(dir), JSON.stringify(r.sc).slice(0, 400));
  // Nothing of the stalled build keeps running, and kiln serves the next request.
  for (let i = 0; i < 50 && leftovers().length; i++) await sleep(200);
  assert.deepEqual(leftovers(), []);
  const st = await call(slow, "candidate_status", { candidate: "c1" });
  assert.equal(st.sc.latest_build?.build_id, r.sc.build_id);
  assert.equal(st.sc.latest_build?.status, "failed");
  await slow.close();
  await fine.close();
  return { r, elapsed };
}

// First, while no build of this process has resolved the stalled domains' base image (the
// layered builder keeps resolved bases in memory, so a later build would not fetch it).
test("a registry that stalls the base-image fetch fails the build within its timeout", { timeout: 600_000 }, async (t) => {
  stallAll = true;
  try {
    const { r, elapsed } = await stalledBuild("cold", "base-image fetch");
    assert.ok(stalled.some((x) => x.includes("/v2/kiln/busybox/")), JSON.stringify(stalled));
    t.diagnostic(`stalled base fetch: failed after ${elapsed} ms: ${r.sc.error}`);
  } finally {
    stallAll = false;
  }
});

test("a registry that accepts pushes and never answers fails the build within its timeout; kiln keeps serving", { timeout: 600_000 }, async (t) => {
  const fine = await connect("fine");
  push("fine", "c1", "fine-1");   // warms the base store and GOCACHE of "fine"
  const warm = await call(fine, "build_candidate", { candidate: "c1" });
  assert.equal(warm.sc.status, "succeeded", JSON.stringify(warm.sc).slice(0, 600));
  await fine.close();
  const { r, elapsed } = await stalledBuild("slow", "push");
  assert.ok(stalled.some((x) => x.includes("/v2/stalled/slow/")), JSON.stringify(stalled));
  assert.match(r.sc.error, /did not answer within the build's timeout|timed out/, r.sc.error);
  t.diagnostic(`stalled push: failed after ${elapsed} ms: ${r.sc.error}`);
});
