// Issue 19, the storage budget against real buildah storage, a real registry and git: the real
// `kiln serve` (containerfile mode: rootless buildah as the build user, local deploy target,
// docker-registry with htpasswd auth, git smart HTTP) with a domain budget a little above what
// the domain cannot give up, so that every idle candidate storage is collected:
//   1. a candidate's storage is collected and the candidate builds again (base image fetched
//      again into a fresh storage);
//   2. the deployed build keeps serving on the local target while its candidate's storage goes,
//      its image stays in the registry and the local target's blobs of it stay (protected like
//      the image; the candidate storages go first);
//   3. a running build's storage is never collected (its lease), even while the domain is over
//      its budget; it is collected once the build ended.
// The budget is measured, not guessed: a first kiln without a budget builds and deploys, then
// `kiln gc --dry-run` gives the bytes per kind; the second kiln (same state directory) gets
// budget = what is never collected + half a candidate storage.
//
//   tests/e2e/run_e2e.sh build/app/kiln $PWD/tests/integration/storage_gc.test.mjs
// Ports: registry 5232, kiln 18832 (metrics 18833), local deploy 19232. Runs as root.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import fs from "node:fs";
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
const REG_PORT = 5232;
const PORT = 18832;
const DEPLOY_PORT = 19232;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-storage-gc-"));
const regDir = path.join(dir, "registry");
const state = path.join(dir, "state");
const config = path.join(dir, "kiln.json");
const rnd = () => crypto.randomBytes(24).toString("hex");
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const token = rnd();
let kiln = null, kilnLog = "", client = null;

const storageOf = (c) => path.join(state, "domains/gc/candidates", c, "storage");
const exists = (p) => fs.existsSync(p);

function writeConfig(budgetGb) {
  fs.writeFileSync(config, JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: state, metrics_listen: `127.0.0.1:${PORT + 1}` },
    scheduler: { max_parallel_builds: 2 },
    operator_token_sha256: [sha(rnd())],
    ...(budgetGb ? { storage: { gc_interval_s: 10, candidate_idle_s: 0 } } : {}),
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: { gc: {
      token_sha256: [sha(token)],
      build: { mode: "containerfile", timeout_s: 600, on_push: false },
      image: { registry: "local", repository: "storage-gc/app" },
      deploy: { type: "local", local: { port: DEPLOY_PORT, health_path: "/healthz" } },
      ...(budgetGb ? { storage: { max_gb: budgetGb } } : {}),
    } },
  }, null, 1));
  const cc = spawnSync(KILN, ["check-config", "--config", config], { encoding: "utf8" });
  assert.equal(cc.status, 0, cc.stdout + cc.stderr);
}

async function startKiln() {
  kiln = spawn(KILN, ["serve", "--config", config, "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  for (let i = 0; ; i++) {
    assert.ok(kiln.exitCode === null, `kiln exited: ${kilnLog.slice(-2000)}`);
    try { if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) break; } catch {}
    assert.ok(i < 600, "kiln did not answer /healthz");
    await sleep(100);
  }
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  client = new Client({ name: "storage-gc", version: "1.0.0" });
  await client.connect(transport);
}
async function stopKiln() {
  if (client) { try { await client.close(); } catch {} client = null; }
  if (!kiln || kiln.exitCode !== null) return;
  const exited = new Promise((r) => kiln.once("exit", r));
  kiln.kill("SIGTERM");
  await exited;
}
async function call(name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 });
  return r.structuredContent ?? {};
}
// A busybox httpd serving /healthz; `note` makes the tree (and the image) distinct. The base
// image lives in the domain's shared base store, not in a candidate's storage, so each image
// carries 4 MiB of its own (/pad): a candidate storage then outweighs what the deploy's rootfs
// adds, which the budget below relies on, whatever the base weighs.
function push(cand, note, run = "true") {
  return pushCandidate(dir, { port: PORT, domain: "gc", branch: cand, token, mutate: (w) => {
    for (const e of fs.readdirSync(w)) fs.rmSync(path.join(w, e), { recursive: true, force: true });
    fs.writeFileSync(path.join(w, "Containerfile"), "ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\n" +
      "RUN head -c 4194304 /dev/urandom > /pad && mkdir -p /www && echo ok > /www/healthz\nCOPY note.txt /www/note.txt\n" +
      `RUN ${run}\nCMD [\"sh\", \"-c\", \"exec httpd -f -p $PORT -h /www\"]\n`);
    fs.writeFileSync(path.join(w, "note.txt"), `${note}\n`);
  } });
}
async function build(cand, note, run) {
  push(cand, note, run);
  const b = await call("build_candidate", { candidate: cand });
  assert.equal(b.status, "succeeded", JSON.stringify(b).slice(0, 800));
  return b;
}
async function metrics() {
  try { return await (await fetch(`http://127.0.0.1:${PORT + 1}/metrics`)).text(); } catch { return ""; }
}
async function healthz() {
  try { return (await fetch(`http://127.0.0.1:${DEPLOY_PORT}/healthz`, { signal: AbortSignal.timeout(5000) })).status; } catch { return 0; }
}
async function until(what, fn, ms = 60_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) { if (await fn()) return; await sleep(250); }
  assert.fail(`timed out after ${ms} ms waiting for ${what}; kiln log tail:\n${kilnLog.slice(-3000)}`);
}
function registryHas(digest) {
  const auth = JSON.parse(fs.readFileSync(path.join(regDir, "auth.json"), "utf8")).auths[`127.0.0.1:${REG_PORT}`].auth;
  const r = spawnSync("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", `Authorization: Basic ${auth}`, "-H",
    "Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
    `http://127.0.0.1:${REG_PORT}/v2/storage-gc/app/manifests/${digest}`], { encoding: "utf8" });
  return r.stdout === "200";
}

before(async () => {
  const reg = spawnSync(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)], { encoding: "utf8" });
  assert.equal(reg.status, 0, reg.stderr);
  const bases = spawnSync(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`,
    "--authfile", path.join(regDir, "auth.json")], { encoding: "utf8" });
  assert.equal(bases.status, 0, bases.stderr);
});

after(async () => {
  await stopKiln();
  spawnSync(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]);
  const left = spawnSync("pgrep", ["-af", dir], { encoding: "utf8" }).stdout.split("\n").filter((l) => l.trim() && !l.includes("pgrep"));
  fs.rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(left, [], "no process of the test is left");
});

test("candidate storages are collected under the budget; deployed and running builds are kept", { timeout: 900_000 }, async (t) => {
  // ---- without a budget: two candidates built, c1 deployed; measure what each kind takes.
  writeConfig(0);
  await startKiln();
  const c1 = await build("c1", "one");
  await build("c2", "two");
  const dep = await call("deploy_candidate", { candidate: "c1", build_id: c1.build_id });
  assert.equal(dep.status, "rolled_out", JSON.stringify(dep).slice(0, 600));
  assert.ok(exists(storageOf("c1")) && exists(storageOf("c2")));
  const dry = spawnSync(KILN, ["gc", "--dry-run", "--config", config], { encoding: "utf8" });
  assert.equal(dry.status, 0, dry.stderr);
  const plan = JSON.parse(dry.stdout);
  const kinds = plan.bytes_by_kind ?? {};
  t.diagnostic(`bytes per kind without a budget: ${JSON.stringify(kinds)}`);
  const storage1 = Number(kinds.candidate_storage ?? 0) / 2;
  assert.ok(storage1 > 1 << 20, `a candidate storage holds its image's layers (${JSON.stringify(kinds)})`);
  const keep = ["git_repo", "journal", "deploy_rootfs", "deploy_blob", "build_key"].reduce((s, k) => s + Number(kinds[k] ?? 0), 0);
  // Less than what is there at the next start (a rootfs is removed at start, so two storages must
  // not fit) and more than what must stay once the deploy is back (its rootfs and blobs).
  const budget = (keep + storage1 / 4) / 2 ** 30;
  await stopKiln();

  // ---- with the budget: the idle storages go at start.
  writeConfig(budget);
  await startKiln();
  await until("an idle candidate's storage collected at start", () => !exists(storageOf("c1")) || !exists(storageOf("c2")));
  assert.match(kilnLog, /storage: freed .*\(candidate_storage\) domain=gc/);
  // After a restart the local target serves nothing until the next deploy (docs/operations.md).
  const again = await call("deploy_candidate", { candidate: "c1", build_id: c1.build_id });
  assert.equal(again.status, "rolled_out", `the deployed build deploys without its candidate's storage: ${JSON.stringify(again).slice(0, 600)}`);
  assert.equal(await healthz(), 200);
  // With the deploy's rootfs back, the other storage goes as well.
  await until("both idle storages collected", () => !exists(storageOf("c1")) && !exists(storageOf("c2")));

  // 1 + 2: c1 builds again into a fresh storage; that storage is collected once idle while the
  // deployed (older) build of c1 keeps serving and stays in the registry.
  const c1b = await build("c1", "one, again");
  assert.notEqual(c1b.image.digest, c1.image.digest);
  await until("c1's new storage collected after its build", () => !exists(storageOf("c1")), 60_000);
  assert.equal(await healthz(), 200, "the deployed build keeps serving while its candidate's storage goes");
  assert.ok(registryHas(c1.image.digest), "the deployed image stays in the registry");
  const st = await call("candidate_status", { candidate: "c1" });
  assert.equal(st.deployed_build?.build_id, c1.build_id);
  const c1c = await build("c1", "one, third");   // collected, then rebuilt
  assert.ok(!c1c.cache_hit);
  await until("c1's storage collected again (the domain under its budget)", () => !exists(storageOf("c1")), 60_000);

  // 3: a running build's storage is never collected, even over the budget.
  // The step first writes a candidate storage's worth of bytes: c2's storage alone is then over
  // the budget (keep + storage1/4) whatever the base image's layers weigh, so every collection
  // while it runs finds the domain over its budget with nothing else to free.
  push("c2", "two, slow", `head -c ${Math.ceil(storage1)} /dev/zero > /filler && sleep 25`);
  const slow = await call("build_candidate", { candidate: "c2", wait: false });
  const id = slow.build_id;
  const logAtStart = kilnLog.length;
  let polls = 0, existed = false, overBudgetSeen = false;
  for (;;) {
    const s = await call("candidate_status", { candidate: "c2" });
    if (s.latest_build?.build_id === id && ["succeeded", "failed", "cancelled", "interrupted"].includes(s.latest_build.status)) {
      assert.equal(s.latest_build.status, "succeeded", JSON.stringify(s.latest_build).slice(0, 600));
      break;
    }
    if (s.latest_build?.build_id === id && s.latest_build.status === "running") {
      polls++;
      if (/^kiln_storage_over_budget\{domain="gc"\} 1/m.test(await metrics())) overBudgetSeen = true;
      if (exists(storageOf("c2"))) existed = true;
      else assert.ok(!existed, "the running build's storage was deleted under it");
    }
    await sleep(500);
  }
  const during = kilnLog.slice(logAtStart);
  assert.ok(existed && polls >= 20, `the build ran (${polls} polls, storage seen ${existed}) through at least one collection`);
  // The collector ran meanwhile (the domain was over its budget with c2's storage), but deleted
  // nothing of c2 while its build ran.
  assert.ok(overBudgetSeen, "a collection found the domain over its budget while the build ran (kiln_storage_over_budget 1)");
  const freedC2 = during.split("\n").filter((l) => /storage: freed .*candidates\/c2\//.test(l));
  const endAt = during.search(new RegExp(`build ${id} domain=gc candidate=c2 -> succeeded`));
  assert.ok(endAt >= 0, "kiln logged the slow build's success");
  for (const l of freedC2) assert.ok(during.indexOf(l) > endAt, `collected while the build ran: ${l}`);
  await until("c2's storage collected once its build ended", () => !exists(storageOf("c2")), 60_000);
  assert.equal(await healthz(), 200);
  // The local target's blobs of the deployed image were kept through every collection (the
  // policy protects the deployed image's layers; candidate storages went instead).
  const rec = JSON.parse(fs.readFileSync(path.join(state, "domains/gc/deploy/images", `${c1.image.digest.slice(7)}.json`), "utf8"));
  assert.ok(rec.layers.length >= 1);
  for (const l of rec.layers)
    assert.ok(exists(path.join(state, "domains/gc/deploy/blobs/sha256", l.slice(7))), `blob ${l} of the deployed image kept`);
  await stopKiln();
});
