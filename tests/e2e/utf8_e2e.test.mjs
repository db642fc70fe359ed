// End to end: bytes that are not UTF-8 in build output never hang a call, and one domain's hung
// builds cannot hold every build slot. The real `kiln serve` (rootless buildah, docker-registry
// with htpasswd auth) driven by the official MCP TypeScript SDK client.
//   1. A Containerfile RUN step prints \377\376 and fails; another prints them and succeeds:
//      build_candidate answers (isError true for the failing one) with valid JSON, build_log
//      answers in small chunks, and kiln keeps answering other calls afterwards.
//   2. Two domains share two build slots (default per-domain cap: 1): domain "hog" starts two
//      builds that hang, domain "ok" still builds at once; /metrics shows the per-domain slots.
//
//   tests/e2e/run_e2e.sh build/app/kiln utf8_e2e.test.mjs
// Ports: registry 5195, kiln 18795 (metrics 18796). ~2 min.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { sh, pushCandidate } from "./agent_git.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5195;
const PORT = 18795;
const HANG = "kiln-utf8-e2e-hang";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-utf8-e2e-"));
const regDir = path.join(dir, "registry");
const tokens = { bytes: rnd(), hog: rnd(), ok: rnd() };
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
  const client = new Client({ name: "kiln-utf8-e2e", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

// A tool call; checks that the text content is the same valid JSON as structuredContent.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, long);
  const text = res.content[0].text;
  assert.deepEqual(JSON.parse(text), res.structuredContent, `${name}: text and structuredContent agree`);
  return { ...res.structuredContent, isError: res.isError };
}

// Reads the whole build log in chunks of `limit` bytes; every chunk is valid text.
async function readLog(client, buildId, limit) {
  let offset = 0, text = "";
  for (let i = 0; i < 100_000; i++) {
    const c = await call(client, "build_log", { build_id: buildId, offset, limit });
    assert.equal(c.isError, false, JSON.stringify(c));
    assert.equal(c.offset, offset);
    text += c.text;
    if (c.complete) return { text, end: c.next_offset };
    assert.ok(c.next_offset > offset, `build_log makes progress at ${offset}`);
    offset = c.next_offset;
  }
  assert.fail("build_log never completed");
}

const containerfile = (run) => (w) => fs.writeFileSync(path.join(w, "Containerfile"),
  `ARG KILN_REGISTRY\nFROM \${KILN_REGISTRY}/kiln/busybox:1\n${run}\n`);

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  const domain = (d) => ({
    token_sha256: [sha(tokens[d])],
    build: { mode: "containerfile", timeout_s: 600 },
    image: { registry: "local", repository: `utf8/${d}` },
  });
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, metrics_listen: `127.0.0.1:${PORT + 1}`, state_dir: path.join(dir, "state") },
    scheduler: { max_parallel_builds: 2 },  // three domains: each may hold 1 slot by default
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: { bytes: domain("bytes"), hog: domain("hog"), ok: domain("ok") },
  }));
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  await until("kiln /healthz", async () => {
    assert.equal(kiln.exitCode, null, `kiln exited: ${kilnLog}`);
    try { return (await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok; } catch { return false; }
  }, 60_000, 100);
  const push = (d, branch, mutate) => pushCandidate(dir, { port: PORT, domain: d, branch, token: tokens[d], mutate });
  push("bytes", "badbytes", containerfile(`RUN printf '\\377\\376 bad bytes\\n'; printf 'trunc \\342\\202'; exit 1`));
  push("bytes", "goodbytes", containerfile(
    `RUN printf '\\377\\376 bad bytes\\n\\355\\240\\200 surrogate \\300\\257 overlong caf\\303\\251 \\342\\202\\254\\n' && echo ok > /ok`));
  push("hog", "hang1", containerfile(`RUN sleep 3603 # ${HANG}-1`));
  push("hog", "hang2", containerfile(`RUN sleep 3603 # ${HANG}-2`));
  push("ok", "c1", containerfile("RUN echo fine > /fine"));
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

test("invalid UTF-8 in build output: build_candidate and build_log answer with valid JSON, kiln keeps answering", long, async (t) => {
  const client = await connect("bytes");
  // The failing build, several times (each one used to hang its call and leak its connection).
  let failed;
  for (let i = 0; i < 3; i++) {
    failed = await call(client, "build_candidate", { candidate: "badbytes" });
    assert.equal(failed.status, "failed", JSON.stringify(failed).slice(0, 2000));
    assert.equal(failed.isError, true);
  }
  t.diagnostic(`failed build: ${failed.error}`);
  assert.match(failed.log_tail, /\uFFFD\uFFFD bad bytes/, "the invalid bytes are shown as U+FFFD");
  for (const d of failed.diagnostics) assert.equal(typeof d.message, "string");
  const log = await readLog(client, failed.build_id, 65536);
  assert.match(log.text, /\uFFFD\uFFFD bad bytes/);
  // Small chunks split multi-byte characters: the text read in pieces is the same.
  const pieces = await readLog(client, failed.build_id, 5);
  assert.equal(pieces.text, log.text);
  assert.equal(pieces.end, log.end);

  // The succeeding build prints ill-formed and valid multi-byte text.
  const good = await call(client, "build_candidate", { candidate: "goodbytes" });
  assert.equal(good.status, "succeeded", JSON.stringify(good).slice(0, 2000));
  assert.equal(good.isError, false);
  assert.match(good.image.digest, /^sha256:[0-9a-f]{64}$/);
  const glog = await readLog(client, good.build_id, 7);
  assert.match(glog.text, /\uFFFD\uFFFD bad bytes/);
  assert.ok(glog.text.includes("caf\u00e9 \u20ac"), "valid multi-byte text is kept");
  assert.equal((await readLog(client, good.build_id, 65536)).text, glog.text);

  // Kiln keeps answering: status, list, a new session, health.
  const st = await call(client, "candidate_status", { candidate: "badbytes" });
  assert.equal(st.isError, false, JSON.stringify(st));
  assert.equal(st.latest_build.status, "failed");
  const list = await call(client, "list_candidates", {});
  assert.ok(list.candidates.some((c) => c.candidate === "goodbytes"), JSON.stringify(list));
  const other = await connect("ok");
  assert.equal((await call(other, "list_candidates", {})).isError, false);
  assert.equal((await fetch(`http://127.0.0.1:${PORT}/healthz`)).status, 200);
  await other.close();
  await client.close();
});

test("one domain's hung builds do not hold every build slot", long, async (t) => {
  const hog = await connect("hog");
  const ok = await connect("ok");
  const h1 = await call(hog, "build_candidate", { candidate: "hang1", wait: false });
  const h2 = await call(hog, "build_candidate", { candidate: "hang2", wait: false });
  assert.match(h1.build_id, /^b-[0-9a-f]{16}$/);
  await until("a hung RUN step to run", () => procs(`sleep 3603`).length > 0, 180_000);
  // hog's second build waits for hog's own slot although a global slot is free.
  const phases = await until("one hog build building, the other queued", async () => {
    const p = [];
    for (const c of ["hang1", "hang2"]) p.push((await call(hog, "candidate_status", { candidate: c })).latest_build?.phase);
    return p.includes("building") && p.includes("queued") ? p : null;
  }, 180_000, 250);
  t.diagnostic(`hog: hang1 ${phases[0]}, hang2 ${phases[1]}`);
  // Domain ok builds at once, beside the hung build.
  const b = await call(ok, "build_candidate", { candidate: "c1" });
  assert.equal(b.status, "succeeded", JSON.stringify(b).slice(0, 2000));
  const metrics = await (await fetch(`http://127.0.0.1:${PORT + 1}/metrics`)).text();  // the metrics listener
  assert.match(metrics, /kiln_domain_builds_running\{domain="hog"\} 1\n/);
  assert.match(metrics, /kiln_domain_build_slots\{domain="hog"\} 1\n/);
  assert.match(metrics, /kiln_queue_depth\{domain="hog"\} 1\n/);
  // Cancelling hog's builds frees everything.
  for (const id of [h2.build_id, h1.build_id]) assert.equal((await call(hog, "cancel_build", { build_id: id })).isError, false);
  await until("the hung builds to end", () => procs(HANG).length === 0 && procs("sleep 3603").length === 0, 60_000);
  await hog.close();
  await ok.close();
});
