// Crash tests: the real `kiln serve` (real buildah and bubblewrap, a real docker-registry with
// htpasswd auth, the local deploy target, git over HTTP, the official MCP SDK client) is killed
// with SIGKILL at 27 points of builds (layered and containerfile: resolving, queued, building,
// pushing, just after the answer), git pushes, deploys and `kiln apply`, some at random
// instants, and restarted each time. After every restart:
//   - `kiln state-check` finds the journal consistent: no corruption, no duplicate start or
//     terminal record, no build left running (builds that were running became `interrupted`);
//   - every build id a client was given is in the journal; every answer a client received
//     (a build's status and digest, a rolled-out deploy) is what the journal says — nothing a
//     caller was told is lost, nothing is reported twice;
//   - build ids are never handed out twice;
//   - candidate_status / list_candidates / GET /v1/domains agree with the journal (the latest
//     successful build per candidate, the deployed build);
//   - nothing the killed kiln started (buildah, bubblewrap sandboxes, deployed candidates)
//     survives it.
// The restart-to-/healthz times are printed (no timing is asserted).
//
//   KILN=build/app/kiln node --test tests/e2e/crash_e2e.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { sh, gitPush } from "./agent_git.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5150;
const PORT = 18720;
const LOCAL_PORT = 19150;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-crash-e2e-"));
const regDir = path.join(dir, "registry");
const stateDir = path.join(dir, "state");
const tokens = { fast: rnd(), slow: rnd() };
const operatorToken = rnd();
const FINAL = new Set(["succeeded", "failed", "cancelled", "interrupted"]);

let kiln = null;
let log = "";          // this kiln process's stderr
let allLog = "";       // every kiln process's stderr
let trigger = null;    // {re, from, delay, fire}
let clients = {};
const restartMs = [];

// What clients were told. seen: id -> {domain, candidate, status, digest, acked}; acked means
// a build_candidate answer with a final status reached the client.
const seen = new Map();
let ackedDeploy = null;                 // {build_id, at} of the last rolled_out answer received
const deployRequests = [];              // build ids asked to be deployed, with the time
const points = [];

function rnd() { return crypto.randomBytes(24).toString("hex"); }
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const randInt = (lo, hi) => lo + Math.floor(Math.random() * (hi - lo + 1));

// ---- kiln process, kill triggers -------------------------------------------------------------

function checkTrigger() {
  if (!trigger) return;
  const m = trigger.re.exec(log.slice(trigger.from));
  if (!m) return;
  const t = trigger;
  trigger = null;
  setTimeout(() => t.fire(m[0]), t.delay);
}

async function startKiln() {
  log = "";
  const t0 = Date.now();
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "ignore", "pipe"] });
  kiln.stderr.on("data", (d) => { log += d; allLog += d; checkTrigger(); });
  kiln.exited = new Promise((r) => kiln.once("exit", r));
  let up = false;
  for (let i = 0; i < 1200 && !up; i++) {
    try { up = (await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok; } catch {}
    if (!up) await sleep(25);
  }
  assert.ok(up, `kiln serve did not come up:\n${log}`);
  restartMs.push(Date.now() - t0);
  clients = {};
}

async function killKiln() {
  if (!kiln || kiln.exitCode !== null || kiln.signalCode !== null) return;
  kiln.kill("SIGKILL");
  await kiln.exited;
  // Calls in flight would wait for their (long) timeouts: closing the clients ends them.
  const cs = Object.values(clients);
  clients = {};
  await Promise.all(cs.map((c) => c.close().catch(() => {})));
}

// Arms a kill: SIGKILL `delay` ms after `re` matches log text written from now on. Resolves
// with the matched text once kiln is dead; rejects after `limitMs` without a match.
function killOn(re, delay = 0, limitMs = 300_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { trigger = null; reject(new Error(`kill point ${re} never reached:\n${log.slice(-3000)}`)); }, limitMs);
    trigger = { re, from: log.length, delay, fire: async (what) => { clearTimeout(timer); await killKiln(); resolve(what); } };
    checkTrigger();
  });
}

// ---- clients ---------------------------------------------------------------------------------

async function client(domain) {
  if (clients[domain]) return clients[domain];
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${tokens[domain]}` } },
  });
  const c = new Client({ name: `crash-e2e-${domain}`, version: "1.0.0" });
  await c.connect(transport);
  clients[domain] = c;
  return c;
}

const long = { timeout: 900_000, resetTimeoutOnProgress: true };

async function call(domain, name, args) {
  const c = await client(domain);
  const r = await c.callTool({ name, arguments: args }, undefined, long);
  return r.structuredContent;
}

function noteBuild(domain, candidate, sc, acked) {
  if (!sc || !sc.build_id) return;
  const prev = seen.get(sc.build_id);
  const st = { domain, candidate, status: sc.status, digest: sc.image?.digest ?? null, acked: acked && FINAL.has(sc.status) };
  if (prev) {
    if (prev.acked) {
      assert.equal(sc.status, prev.status, `build ${sc.build_id} answered twice with different ends`);
      return;
    }
  }
  seen.set(sc.build_id, st);
}

// build_candidate wait:false: the id is acknowledged (must exist after any crash).
async function startBuild(domain, candidate) {
  const sc = await call(domain, "build_candidate", { candidate, wait: false });
  assert.ok(sc.build_id, JSON.stringify(sc));
  assert.ok(!seen.has(sc.build_id), `build id ${sc.build_id} handed out twice`);
  noteBuild(domain, candidate, sc, false);
  return sc.build_id;
}

// build_candidate wait:true: the final answer is acknowledged.
async function buildWait(domain, candidate) {
  const sc = await call(domain, "build_candidate", { candidate });
  assert.ok(sc.build_id, JSON.stringify(sc));
  noteBuild(domain, candidate, sc, true);
  return sc;
}

async function deployWait(candidate, build_id) {
  deployRequests.push({ build_id, at: Date.now() });
  const sc = await call("fast", "deploy_candidate", build_id ? { candidate, build_id } : { candidate });
  if (sc.status === "rolled_out") ackedDeploy = { build_id: sc.build_id, at: Date.now() };
  return sc;
}

// ---- the agent's side: worktrees per candidate -----------------------------------------------

const worktrees = {};
let edits = 0;
function pushEdit(domain, candidate) {
  let w = worktrees[`${domain}/${candidate}`];
  const git = (...a) => sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", ...a], { cwd: w });
  if (!w) {
    w = worktrees[`${domain}/${candidate}`] = fs.mkdtempSync(path.join(dir, `w-${domain}-${candidate}-`));
    fs.cpSync(path.join(root, "examples/epp"), w, { recursive: true });
    git("init", "-q");
  }
  const f = path.join(w, "cmd/epp/main.go");
  const src = fs.readFileSync(f, "utf8").replace(/\[\]byte\("ok[^"]*\\n"\)/, `[]byte("ok ${candidate} ${++edits}\\n")`);
  fs.writeFileSync(f, src);
  git("add", "-A");
  git("commit", "-qm", `edit ${edits}`);
  gitPush(w, { port: PORT, domain, branch: candidate, token: tokens[domain] });
}

// The same push, asynchronously (to be killed while it runs).
function pushEditAsync(domain, candidate) {
  const w = worktrees[`${domain}/${candidate}`];
  const f = path.join(w, "cmd/epp/main.go");
  fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace(/\[\]byte\("ok[^"]*\\n"\)/, `[]byte("ok ${candidate} ${++edits}\\n")`));
  // A few MB of incompressible data make the push take a while.
  fs.writeFileSync(path.join(w, `blob-${edits}.bin`), crypto.randomBytes(4 << 20));
  sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", "add", "-A"], { cwd: w });
  sh("git", ["-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", `big ${edits}`], { cwd: w });
  return new Promise((resolve) => {
    const p = spawn("git", ["push", "-q", "-f", `http://127.0.0.1:${PORT}/git/${domain}.git`, `HEAD:refs/heads/${candidate}`], {
      cwd: w, stdio: "ignore",
      env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader",
        GIT_CONFIG_VALUE_0: `Authorization: Bearer ${tokens[domain]}` },
    });
    p.on("exit", (code) => resolve(code));
  });
}

// ---- checks ----------------------------------------------------------------------------------

function stateCheck() {
  const r = spawnSync(KILN, ["state-check", "--state-dir", stateDir, "--builds"], { encoding: "utf8", maxBuffer: 64 << 20 });
  let j = null;
  try { j = JSON.parse(r.stdout); } catch {}
  assert.ok(j, `state-check printed no JSON (exit ${r.status}): ${r.stderr}`);
  return { code: r.status, json: j, stderr: r.stderr };
}

// Processes the killed kiln started (sandboxes, buildah, git, deployed candidates): all gone.
async function assertNothingSurvived(label) {
  let left = "";
  for (let i = 0; i < 100; i++) {
    const ps = spawnSync("ps", ["-eo", "pid,stat,args"], { encoding: "utf8" }).stdout.split("\n");
    left = ps.filter((l) => l.includes(dir) && !/registry/.test(l) && !/ Z/.test(l.slice(0, 14))
      && /(bwrap|buildah|unshare|skopeo|git|go build|\/app)/.test(l)).join("\n");
    if (!left) return;
    await sleep(50);
  }
  assert.fail(`${label}: processes of the killed kiln survive:\n${left}`);
}

async function httpJson(u, token) {
  const r = await fetch(u, { headers: { Authorization: `Bearer ${token}` } });
  return { status: r.status, json: await r.json() };
}

async function verify(label) {
  const { code, json: st } = stateCheck();
  assert.equal(code, 0, `${label}: state-check: ${JSON.stringify(st).slice(0, 2000)}`);
  assert.equal(st.ok, true);
  assert.deepEqual(st.duplicate_terminal, [], `${label}: duplicate terminal records`);
  assert.deepEqual(st.duplicate_started, [], `${label}: duplicate start records`);
  assert.deepEqual(st.interrupted, [], `${label}: kiln left builds unfinished in its journal after its restart`);
  const byId = new Map(st.build_list.map((b, i) => [b.id, { ...b, order: i }]));
  for (const b of st.build_list) assert.ok(FINAL.has(b.status), `${label}: build ${b.id} is ${b.status} after the restart`);
  for (const [id, s] of seen) {
    const b = byId.get(id);
    assert.ok(b, `${label}: build ${id} (${s.domain}/${s.candidate}, told ${s.status}) is lost`);
    assert.equal(b.domain, s.domain);
    assert.equal(b.candidate, s.candidate);
    if (s.acked) {
      assert.equal(b.status, s.status, `${label}: build ${id} was answered ${s.status}, journal says ${b.status}`);
      if (s.status === "succeeded") assert.equal(b.digest, s.digest, `${label}: digest of ${id}`);
    }
  }
  // The service's views agree with the journal.
  for (const domain of Object.keys(tokens)) {
    const jd = st.domains[domain];
    const list = await call(domain, "list_candidates", {});
    for (const c of list.candidates) {
      assert.ok(!["resolving", "queued", "building", "pushing"].includes(c.state), `${label}: ${domain}/${c.candidate} is ${c.state} after a restart`);
      const want = jd?.candidates?.[c.candidate]?.latest_successful?.id ?? null;
      const status = await call(domain, "candidate_status", { candidate: c.candidate });
      assert.equal(status.latest_successful_build?.build_id ?? null, want, `${label}: latest successful of ${domain}/${c.candidate}`);
      // Never behind what a client was told succeeded.
      const acked = [...seen].filter(([, s]) => s.acked && s.status === "succeeded" && s.domain === domain && s.candidate === c.candidate)
        .map(([id]) => byId.get(id).order);
      if (acked.length) assert.ok(want && byId.get(want).order >= Math.max(...acked), `${label}: latest successful of ${domain}/${c.candidate} went back`);
    }
  }
  const op = await httpJson(`http://127.0.0.1:${PORT}/v1/domains/fast`, operatorToken);
  assert.equal(op.status, 200);
  const journaled = st.domains.fast?.deployed?.build_id ?? null;
  assert.equal(op.json.deployed?.build_id ?? null, journaled, `${label}: deployed build (service vs journal)`);
  if (ackedDeploy) {
    const later = deployRequests.filter((d) => d.at >= ackedDeploy.at - 1).map((d) => d.build_id);
    assert.ok(journaled === ackedDeploy.build_id || later.includes(journaled),
      `${label}: deployed build ${journaled} is neither the acknowledged ${ackedDeploy.build_id} nor a later request`);
  }
}

// One kill point: restart, verify, run `action` with a kill armed, then check the remains.
async function point(name, action) {
  points.push(name);
  await startKiln();
  await verify(`before ${name}`);
  const t0 = Date.now();
  await action();
  await killKiln();  // when the action itself did not
  const ids = [...seen.keys()];
  await assertNothingSurvived(name);
  console.log(`# crash point ${points.length} ${name}: killed after ${Date.now() - t0} ms; ${ids.length} builds seen`);
}

// Runs `work` while a kill is armed; the work's failures after the kill are expected.
async function during(kill, work) {
  const w = (async () => { try { await work(); } catch (e) { if (kiln.exitCode === null && kiln.signalCode === null) throw e; } })();
  const killed = await kill;
  await Promise.race([w, sleep(10_000)]);
  return killed;
}

// ---- setup -----------------------------------------------------------------------------------

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  const auth = path.join(regDir, "auth.json");
  sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", auth]);
  const digest = sh("skopeo", ["inspect", "--authfile", auth, "--tls-verify=false", `docker://127.0.0.1:${REG_PORT}/kiln/busybox:1`, "--format", "{{.Digest}}"]).trim();
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: stateDir },
    operator_token_sha256: [sha(operatorToken)],
    scheduler: { max_parallel_builds: 2 },
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: auth } },
    domains: {
      fast: {
        token_sha256: [sha(tokens.fast)],
        max_parallel_builds: 2,  // its "two candidates building at once" point needs both slots
        build: { mode: "layered", timeout_s: 300, on_push: false, layered: {  // issue 18: kill points are timed against build calls
          base_image: `127.0.0.1:${REG_PORT}/kiln/busybox@${digest}`,
          command: ["go", "build", "-o", "out/app", "./cmd/epp"],
          env: { CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" },
          caches: { GOCACHE: "go-build" },
          outputs: [{ from: "out/app", to: "/app" }], entrypoint: ["/app"] } },
        image: { registry: "local", repository: "crash/fast" },
        deploy: { type: "local", local: { port: LOCAL_PORT, health_path: "/healthz" } },
      },
      slow: {
        token_sha256: [sha(tokens.slow)],
        build: { mode: "containerfile", timeout_s: 900, on_push: false },  // issue 18
        image: { registry: "local", repository: "crash/slow" },
        deploy: { type: "none" },
      },
    },
  }));
  const cc = spawnSync(KILN, ["check-config", "--config", path.join(dir, "kiln.json")], { encoding: "utf8" });
  assert.equal(cc.status, 0, cc.stdout + cc.stderr);
  // First generation: candidates exist with one successful build each.
  await startKiln();
  for (const c of ["c1", "c2"]) { pushEdit("fast", c); const r = await buildWait("fast", c); assert.equal(r.status, "succeeded", JSON.stringify(r)); }
  pushEdit("slow", "s1");
  const r = await buildWait("slow", "s1");
  assert.equal(r.status, "succeeded", JSON.stringify(r).slice(0, 3000));
  const d = await deployWait("c1");
  assert.equal(d.status, "rolled_out", JSON.stringify(d));
  await killKiln();
});

after(async () => {
  trigger = null;
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) { kiln.kill("SIGTERM"); await kiln.exited; }
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch {}
  const password = fs.existsSync(path.join(regDir, "password")) ? fs.readFileSync(path.join(regDir, "password"), "utf8").trim() : null;
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
  for (const t of [...Object.values(tokens), operatorToken]) assert.ok(!allLog.includes(t), "no token reaches kiln's log");
  if (password) assert.ok(!allLog.includes(password), "the registry password never reaches kiln's log");
});

// ---- the kill points -------------------------------------------------------------------------

const buildPhases = (domain, cand, re, delay) => async () => {
  pushEdit(domain, cand);
  await during(killOn(re, delay), async () => { await startBuild(domain, cand); await kiln.exited; });
};

test("kill -9 at 27 points of builds, pushes and deploys; nothing is lost or duplicated", { timeout: 3_000_000 }, async () => {
  await point("idle", async () => {});
  await point("right after a build id was handed out", async () => {
    pushEdit("fast", "c1");
    await startBuild("fast", "c1");
    await killKiln();
  });
  await point("layered: resolving", buildPhases("fast", "c1", /candidate=c1 -> resolving/, 0));
  await point("layered: queued", buildPhases("fast", "c2", /candidate=c2 -> queued/, 0));
  await point("layered: building", buildPhases("fast", "c1", /candidate=c1 -> building/, 0));
  await point("layered: building + random", buildPhases("fast", "c2", /candidate=c2 -> building/, randInt(50, 900)));
  await point("layered: pushing", buildPhases("fast", "c1", /candidate=c1 -> pushing/, 0));
  await point("layered: pushing + random", buildPhases("fast", "c2", /candidate=c2 -> pushing/, randInt(1, 120)));
  await point("layered: as it succeeds", buildPhases("fast", "c1", /candidate=c1 -> succeeded/, 0));
  await point("layered: just after the answer reached the client", async () => {
    pushEdit("fast", "c2");
    const r = await buildWait("fast", "c2");
    await killKiln();
    assert.equal(r.status, "succeeded", JSON.stringify(r));
  });
  await point("compile error: just after the answer", async () => {
    const w = worktrees["fast/c1"];
    fs.writeFileSync(path.join(w, "cmd/epp/broken.go"), "package main\n\nfunc broken() int { return undefinedThing }\n");
    pushEdit("fast", "c1");
    const r = await buildWait("fast", "c1");
    await killKiln();
    assert.equal(r.status, "failed");
    assert.ok(r.diagnostics.length > 0);
    fs.rmSync(path.join(w, "cmd/epp/broken.go"));
  });
  await point("two candidates building at once", async () => {
    pushEdit("fast", "c1");
    pushEdit("fast", "c2");
    await during(killOn(/candidate=c[12] -> building/, randInt(100, 700)), async () => {
      await Promise.all([startBuild("fast", "c1"), startBuild("fast", "c2")]);
      await kiln.exited;
    });
  });
  await point("duplicate requests of one candidate, at pushing", async () => {
    pushEdit("fast", "c2");
    await during(killOn(/candidate=c2 -> pushing/, 0), async () => {
      await Promise.all([buildWait("fast", "c2"), buildWait("fast", "c2")]);
    });
  });
  await point("cancel, then kill right after its answer", async () => {
    pushEdit("fast", "c1");
    const id = await startBuild("fast", "c1");
    const r = await call("fast", "cancel_build", { build_id: id });
    await killKiln();
    assert.ok(FINAL.has(r.status), JSON.stringify(r));
  });
  await point("git push in flight (random)", async () => {
    const pushing = pushEditAsync("fast", "c2");
    await sleep(randInt(20, 400));
    await killKiln();
    await pushing;
  });
  await point("git push received", async () => {
    await during(killOn(/git: push to fast/, 0), async () => { await pushEditAsync("fast", "c1"); await kiln.exited; });
  });
  // Deploys need a successful build newer than the deployed one.
  const freshBuild = async (cand) => { pushEdit("fast", cand); const r = await buildWait("fast", cand); assert.equal(r.status, "succeeded", JSON.stringify(r)); return r.build_id; };
  await point("deploy: rolling out", async () => {
    const id = await freshBuild("c1");
    await during(killOn(/deploy \S+ domain=fast .* -> rolling out/, 0), () => deployWait("c1", id));
  });
  await point("deploy: rolling out + random", async () => {
    const id = await freshBuild("c2");
    await during(killOn(/deploy \S+ domain=fast .* -> rolling out/, randInt(50, 700)), () => deployWait("c2", id));
  });
  await point("deploy: rolled out", async () => {
    const id = await freshBuild("c1");
    await during(killOn(/deploy \S+ domain=fast .* -> rolled_out/, 0), () => deployWait("c1", id));
  });
  await point("deploy: just after the answer", async () => {
    const id = await freshBuild("c2");
    const r = await deployWait("c2", id);
    await killKiln();
    assert.equal(r.status, "rolled_out", JSON.stringify(r));
  });
  await point("kiln apply while it rolls out", async () => {
    const id = await freshBuild("c1");
    deployRequests.push({ build_id: id, at: Date.now() });
    const applied = new Promise((resolve) => {
      const p = spawn(KILN, ["apply", "--server", `http://127.0.0.1:${PORT}`, "--domain", "fast", "--candidate", "c1", "--timeout", "120"], {
        env: { ...process.env, KILN_TOKEN: operatorToken }, stdio: "ignore" });
      p.on("exit", resolve);
    });
    await killOn(/deploy \S+ domain=fast .* -> rolling out/, randInt(0, 300));
    // A quick rollout may finish before the kill: then apply's exit 0 is an answer the journal
    // must keep (checked at the next restart like any acknowledged deploy).
    if (await applied === 0) ackedDeploy = { build_id: id, at: Date.now() };
  });
  await point("containerfile: building", buildPhases("slow", "s1", /candidate=s1 -> building/, randInt(500, 3000)));
  await point("containerfile: pushing", buildPhases("slow", "s1", /candidate=s1 -> pushing/, 0));
  await point("containerfile: pushing + random", buildPhases("slow", "s1", /candidate=s1 -> pushing/, randInt(50, 400)));
  for (let i = 0; i < 3; i++) {
    await point(`random instant of a build and deploy #${i + 1}`, async () => {
      const cand = i % 2 ? "c1" : "c2";
      pushEdit("fast", cand);
      const at = randInt(0, 4000);
      const dead = new Promise((r) => setTimeout(() => killKiln().then(r), at));
      try {
        const r = await buildWait("fast", cand);
        if (r.status === "succeeded") await deployWait(cand, r.build_id);
      } catch (e) { if (kiln.exitCode === null && kiln.signalCode === null) throw e; }
      await dead;
    });
  }
  assert.ok(points.length >= 20, `${points.length} kill points`);

  // The last restart: everything checks out, `kiln apply` brings the local target back (it
  // serves nothing after a restart until a deploy) and the candidate answers.
  await startKiln();
  await verify("after the last restart");
  const r = spawnSync(KILN, ["apply", "--server", `http://127.0.0.1:${PORT}`, "--domain", "fast", "--timeout", "300"], {
    env: { ...process.env, KILN_TOKEN: operatorToken }, encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const res = await fetch(`http://127.0.0.1:${LOCAL_PORT}/healthz`);
  assert.equal(res.status, 200);
  assert.match(await res.text(), /^ok /);
  const total = seen.size;
  const sorted = [...restartMs].sort((a, b) => a - b);
  console.log(`# ${points.length} kill points, ${total} builds seen; restart to /healthz: median ${sorted[sorted.length >> 1]} ms, max ${sorted[sorted.length - 1]} ms`);
  kiln.kill("SIGTERM");
  await kiln.exited;
  const { code, json } = stateCheck();
  assert.equal(code, 0);
  assert.deepEqual(json.interrupted, [], "a clean stop leaves nothing unfinished");
});
