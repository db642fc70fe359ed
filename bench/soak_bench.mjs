// Soak benchmark: DOMAINS x CANDIDATES independent agent loops against a real `kiln serve`
// (layered mode, local deploy target, real docker-registry with htpasswd auth), ITERATIONS
// iterations each: mutate the source, git push over smart HTTP, build_candidate over MCP (the
// official TypeScript SDK client), with random compile errors, cancels, duplicate requests and
// deploys. Then it checks consistency, leaks, memory, graceful stop, the journal
// (`kiln state-check --builds`) and a restart. Run it through bench/soak_bench.sh.
//
//   KILN=build/app/kiln DOMAINS=2 CANDIDATES=4 ITERATIONS=25 node bench/soak_bench.mjs
//
// Environment (defaults): KILN (build/app/kiln), DOMAINS (2, max 8), CANDIDATES (4),
// ITERATIONS (25), SEED (random; printed, reruns the same random choices), P_BREAK (0.2),
// P_CANCEL (0.1), P_DUP (0.1), P_DEPLOY (0.08), DUP_EXPECT (same: both calls must return the
// same build — an identical request with no push in between joins the running build, see
// docs/tools.md | supersede: accept the older one cancelled as superseded), SOAK_PARENT (/var/tmp), SOAK_TIMEOUT_S (whole run; 900 + 20 per iteration),
// KEEP=1 (keep the work directory), SOAK_JSON (bench/out/soak.json), KILN_HISTORY (50: builds
// kiln keeps in memory per candidate; older ones may answer build_log "not found").
// The first iteration of agent i is forced to scenario i % 4 (deploy, compile error, cancel,
// duplicate) so that the small CI run (2x2x3) covers every flow; the rest is random.
// Ports: registry 5170, kiln 18740, local deploy 19170 + domain index.
// Exit: 0 all checks passed, 1 a check failed, 3 set-up error or deadline.
import { spawn, execFile } from "node:child_process";
import { promisify, isDeepStrictEqual } from "node:util";
import { pathToFileURL } from "node:url";
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";

const execFileP = promisify(execFile);
const here = path.dirname(new URL(import.meta.url).pathname);
const ROOT = path.resolve(here, "..");
const sdk = path.join(ROOT, "tests/e2e/node_modules/@modelcontextprotocol/sdk/dist/esm");
const { Client } = await import(pathToFileURL(path.join(sdk, "client/index.js")).href);
const { StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(sdk, "client/streamableHttp.js")).href);

// ------------------------------------------------------------------------------ parameters
const env = process.env;
const int = (name, def) => {
  const v = env[name] === undefined || env[name] === "" ? def : Number(env[name]);
  if (!Number.isInteger(v) || v < 0) throw new Error(`${name} must be a non-negative integer, got ${env[name]}`);
  return v;
};
const num = (name, def) => (env[name] === undefined || env[name] === "" ? def : Number(env[name]));
const KILN_GIVEN = path.resolve(env.KILN ?? path.join(ROOT, "build/app/kiln"));
const DOMAINS = int("DOMAINS", 2);
const CANDIDATES = int("CANDIDATES", 4);
const ITERATIONS = int("ITERATIONS", 25);
const SEED = int("SEED", crypto.randomInt(1, 2 ** 31 - 1));
const RUN_STARTED_MS = Date.now();
const P_BREAK = num("P_BREAK", 0.2);
const P_CANCEL = num("P_CANCEL", 0.1);
const P_DUP = num("P_DUP", 0.1);
const P_DEPLOY = num("P_DEPLOY", 0.08);
const DUP_EXPECT = env.DUP_EXPECT ?? "same";
const REG_PORT = 5170;
const PORT = 18740;
const DEPLOY_BASE = 19170;
const PARENT = env.SOAK_PARENT ?? "/var/tmp";
const HISTORY = int("KILN_HISTORY", 50);   // builds kiln keeps in memory per candidate
const OUT_JSON = env.SOAK_JSON ?? path.join(ROOT, "bench/out/soak.json");
// Issue 19: storage budget and samples. STORAGE_MAX_GB (unset: no budget) is kiln's storage.max_gb
// and, split evenly, each domain's domains.<d>.storage.max_gb; GC_INTERVAL_S (10) its
// storage.gc_interval_s; SAMPLE_S (5) the sampling period of RSS, disk per kind, fds, threads.
// DISK_SLACK (1.0: the strict budget; kiln collects down to storage.headroom_pct below it and
// again within ~2 s of every build): a sample may exceed the budget by this factor. RSS_FLAT_PCT (unset: reported only): fail when the RSS of the last quarter of the
// loop is more than this many % above the second quarter's.
const STORAGE_MAX_GB = env.STORAGE_MAX_GB ? Number(env.STORAGE_MAX_GB) : null;
const GC_INTERVAL_S = int("GC_INTERVAL_S", 10);
const SAMPLE_S = int("SAMPLE_S", 5);
const DISK_SLACK = num("DISK_SLACK", 1.0);
const RSS_FLAT_PCT = env.RSS_FLAT_PCT ? Number(env.RSS_FLAT_PCT) : null;
// Issue 19, the long soak: KILLS (0) kill -9 restarts of kiln and REGISTRY_RESTARTS (0) restarts
// of the registry during the loop (agents paused at a barrier; builds in flight at each kill -9,
// builds while the registry is down), at 10 %, 20 %, ... of the loop (EVENT_STEP 0.1); LOOP_S (0: none) bounds the
// loop by time (agents start no iteration after it; ITERATIONS is then an upper bound);
// MIN_BUILDS (0) fails the run with fewer builds; SOAK_PNG (bench/out/soak.png, "" none) the
// chart of the samples (gnuplot). RSS_FLAT_PCT is judged over the last kiln process's samples
// after its first third (warm-up): the least-squares growth over that window, in % of its mean.
const KILLS = int("KILLS", 0);
const REGISTRY_RESTARTS = int("REGISTRY_RESTARTS", 0);
const LOOP_S = int("LOOP_S", 0);
const MIN_BUILDS = int("MIN_BUILDS", 0);
const EVENT_STEP = num("EVENT_STEP", 0.1);   // restart event i runs at (i + 1) * EVENT_STEP of the loop
const OUT_PNG = env.SOAK_PNG ?? path.join(ROOT, "bench/out/soak.png");
const TIMEOUT_S = int("SOAK_TIMEOUT_S", LOOP_S ? LOOP_S + 900 : 900 + 20 * DOMAINS * CANDIDATES * ITERATIONS);
if (DOMAINS < 1 || DOMAINS > 8) throw new Error("DOMAINS must be 1..8 (local deploy ports 19170-19177)");
if (CANDIDATES < 1 || ITERATIONS < 1) throw new Error("CANDIDATES and ITERATIONS must be >= 1");
if (!["supersede", "same"].includes(DUP_EXPECT)) throw new Error("DUP_EXPECT must be supersede or same");
if (!fs.existsSync(KILN_GIVEN)) throw new Error(`kiln binary not found: ${KILN_GIVEN} (set KILN)`);

const W = fs.mkdtempSync(path.join(PARENT, "kiln-soak-"));
const REG_DIR = path.join(W, "registry");
const STATE = path.join(W, "state");
const LOG = path.join(W, "kiln.log");
// The binary under test is a copy taken at the start: a rebuild of KILN during the run (another
// session relinking it) cannot swap the binary between the first start and the restart.
const KILN = path.join(W, "kiln");
fs.copyFileSync(KILN_GIVEN, KILN);
fs.chmodSync(KILN, 0o755);
const t0run = Date.now();
const deadline = t0run + TIMEOUT_S * 1000;

// Seeded PRNG (mulberry32), one per agent: the same SEED makes the same choices.
function makeRng(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const note = (...a) => process.stderr.write(`[soak +${((Date.now() - t0run) / 1000).toFixed(0)}s] ${a.join(" ")}\n`);
const sha256 = (s) => crypto.createHash("sha256").update(s).digest("hex");
const rnd = () => crypto.randomBytes(24).toString("hex");

// ------------------------------------------------------------------------------ checks
const checks = new Map();  // name -> {pass, fail, details[]}
function check(name, ok, detail = "") {
  let c = checks.get(name);
  if (!c) checks.set(name, (c = { pass: 0, fail: 0, details: [] }));
  if (ok) c.pass++;
  else {
    c.fail++;
    if (c.details.length < 8) c.details.push(String(detail).slice(0, 600));
    note(`CHECK FAILED: ${name}: ${String(detail).slice(0, 300)}`);
  }
  return ok;
}

// ------------------------------------------------------------------------------ processes
let kiln = null;          // the running kiln serve (ChildProcess)
let kilnExit = null;      // promise of its exit {code, signal}
let registryPid = null;
let cleaned = false;

async function run(cmd, args, opts = {}) {
  const { stdout } = await execFileP(cmd, args, { maxBuffer: 256 << 20, ...opts });
  return stdout;
}

function startKiln() {
  const out = fs.openSync(LOG, "a");
  fs.writeSync(out, `\n==== kiln serve started at ${new Date().toISOString()}\n`);
  kiln = spawn(KILN, ["serve", "--config", path.join(W, "kiln.json"), "--grace", "30"],
    { stdio: ["ignore", out, out] });
  fs.closeSync(out);
  const proc = kiln;
  kilnExit = new Promise((r) => {
    proc.once("exit", (code, signal) => r({ code, signal }));
    proc.once("error", (e) => { proc.spawnError = e; r({ code: null, signal: null, error: String(e) }); });
  });
  return proc;
}

async function waitHealthy(maxMs = 120_000) {
  const t = Date.now();
  while (Date.now() - t < maxMs) {
    if (kiln.spawnError) throw new Error(`cannot start kiln: ${kiln.spawnError.message}`);
    if (kiln.exitCode !== null || kiln.signalCode !== null) throw new Error(`kiln exited during start: ${tail(LOG)}`);
    try {
      const r = await fetch(`http://127.0.0.1:${PORT}/healthz`);
      if (r.ok) return Date.now() - t;
    } catch {}
    await sleep(20);
  }
  throw new Error(`kiln did not answer /healthz within ${maxMs} ms`);
}

async function stopKiln(maxMs = 120_000) {
  if (!kiln || kiln.spawnError || kiln.exitCode !== null || kiln.signalCode !== null) return kilnExit ? await kilnExit : null;
  kiln.kill("SIGTERM");
  const r = await Promise.race([kilnExit, sleep(maxMs).then(() => null)]);
  if (r) return r;
  kiln.kill("SIGKILL");
  await kilnExit;
  return { code: null, signal: "SIGKILL", timedOut: true };
}

function tail(file, n = 30) {
  try { return fs.readFileSync(file, "utf8").split("\n").slice(-n).join("\n"); } catch { return ""; }
}

function rssKb(pid) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/^VmRSS:\s+(\d+)\s+kB/m);
    return m ? Number(m[1]) : null;
  } catch { return null; }
}

async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  try { await stopKiln(60_000); } catch {}
  try { await run(path.join(ROOT, "scripts/registry.sh"), ["stop", "--dir", REG_DIR]); } catch {}
  if (env.KEEP === "1") note(`kept ${W}`);
  else fs.rmSync(W, { recursive: true, force: true });
}

const watchdog = setTimeout(async () => {
  note(`DEADLINE: the run exceeded SOAK_TIMEOUT_S=${TIMEOUT_S}; stopping`);
  try { kiln?.kill("SIGKILL"); } catch {}
  await cleanup();
  process.exit(3);
}, TIMEOUT_S * 1000);
watchdog.unref();
for (const sig of ["SIGINT", "SIGTERM"])
  process.on(sig, async () => { note(`${sig}: cleaning up`); await cleanup(); process.exit(130); });
// Whatever goes wrong, nothing of the run is left behind.
for (const ev of ["uncaughtException", "unhandledRejection"])
  process.on(ev, async (e) => { note(`${ev}: ${e?.stack ?? e}; cleaning up`); await cleanup(); process.exit(3); });

/// Processes as {pid, ppid, args}.
async function processes() {
  const out = await run("ps", ["-ww", "-eo", "pid=,ppid=,etimes=,args="]);
  return out.split("\n").filter(Boolean).map((l) => {
    const m = l.match(/^\s*(\d+)\s+(\d+)\s+(\d+)\s+(.*)$/);
    return m ? { pid: Number(m[1]), ppid: Number(m[2]), age_s: Number(m[3]), args: m[4] } : null;
  }).filter(Boolean);
}
function subtree(ps, roots) {
  const kids = new Map();
  for (const p of ps) { if (!kids.has(p.ppid)) kids.set(p.ppid, []); kids.get(p.ppid).push(p); }
  const seen = new Set();
  const stack = [...roots];
  while (stack.length) {
    const pid = stack.pop();
    if (seen.has(pid)) continue;
    seen.add(pid);
    for (const k of kids.get(pid) ?? []) stack.push(k.pid);
  }
  return seen;
}
/// Processes of this run that are neither kiln, the registry, nor a deployed candidate's
/// sandbox (bwrap over <state>/domains/<d>/deploy/rootfs/...) and its children.
async function strayProcesses({ allowDeployed }) {
  const ps = await processes();
  const self = process.pid;
  // A deployed candidate: its rootfs under the state directory, or staged below /run/kiln-deploy
  // (the local sandbox runs it as an unprivileged user from there).
  // Only this run's: a sandbox another test on the machine left behind is not this kiln's
  // (started before this run began).
  const runAge = (Date.now() - RUN_STARTED_MS) / 1000 + 1;
  const isDeploy = (p) => p.age_s <= runAge &&
    ((p.args.includes(`${STATE}/domains/`) && p.args.includes("/deploy/rootfs/")) || p.args.includes("/run/kiln-deploy/"));
  const deployPids = new Set(ps.filter(isDeploy).map((p) => p.pid));
  const deployRoots = ps.filter((p) => isDeploy(p) && !deployPids.has(p.ppid)).map((p) => p.pid);
  const deployed = allowDeployed ? subtree(ps, deployRoots) : new Set();
  const kilnTree = kiln && kiln.exitCode === null ? subtree(ps, [kiln.pid]) : new Set();
  const stray = [];
  for (const p of ps) {
    if (p.pid === self || p.pid === registryPid || (kiln && p.pid === kiln.pid) || deployed.has(p.pid)) continue;
    if (p.args.startsWith("ps -ww")) continue;
    if (kilnTree.has(p.pid) || p.args.includes(W)) stray.push(`${p.pid} ${p.args.slice(0, 200)}`);
  }
  const deployedList = ps.filter((p) => deployRoots.includes(p.pid)).map((p) => `${p.pid} (parent ${p.ppid}) ${p.args.slice(0, 240)}`);
  return { stray, deployedCount: deployRoots.length, deployedList };
}

// ------------------------------------------------------------------------------ MCP
async function connect(token, name) {
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return client;
}
const long = { timeout: 600_000, resetTimeoutOnProgress: true, maxTotalTimeout: 1_200_000 };
async function tool(client, name, args, opts = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, { ...long, ...opts });
  let text = null;
  try { text = JSON.parse(r.content?.[0]?.text ?? "null"); } catch {}
  check("every tool result carries the same JSON as text and structuredContent",
    isDeepStrictEqual(text, r.structuredContent ?? null), `${name}: ${r.content?.[0]?.text?.slice(0, 200)}`);
  return { sc: r.structuredContent ?? {}, isError: r.isError === true };
}

// ------------------------------------------------------------------------------ observations
const TERMINAL = new Set(["succeeded", "failed", "cancelled", "interrupted"]);
const builds = new Map();   // build id -> {id, domain, candidate, obs: [{status, digest, via}], kind, broken}
let obsSeq = 0;
function observe(domain, candidate, b, via, extra = {}) {
  if (!b || typeof b.build_id !== "string") return null;
  let rec = builds.get(b.build_id);
  if (!rec) builds.set(b.build_id, (rec = { id: b.build_id, domain, candidate, obs: [], kind: extra.kind ?? "observed", epoch }));
  if (extra.kind && rec.kind === "observed") rec.kind = extra.kind;
  if (extra.broken !== undefined) rec.broken = extra.broken;
  check("a build id belongs to one domain/candidate", rec.domain === domain && rec.candidate === candidate,
    `${b.build_id} seen as ${rec.domain}/${rec.candidate} and ${domain}/${candidate}`);
  // An answer without an `image` field (cancel_build of a build that had already ended) says
  // nothing about the digest: undefined, not null.
  const digest = "image" in b ? (b.image?.digest ?? null) : undefined;
  rec.obs.push({ seq: obsSeq++, status: b.status, digest, via, error: b.error ?? null });
  return rec;
}
const terminalOf = (rec) => rec.obs.filter((o) => TERMINAL.has(o.status));
const latencies = { succeeded: [], failed: [], kiln_total_ms: [] };
const counters = { iterations: 0, pushes: 0, normal: 0, cancel_flows: 0, cancel_ok: 0, cancel_after_end: 0,
  abort_flows: 0, abort_after_end: 0, dup_pairs: 0, dup_same: 0, dup_superseded: 0, dup_other: 0, deploys: 0, deploy_rolled_out: 0,
  deploy_superseded: 0, compile_errors: 0, cache_hits: 0 };
const lastSeen = new Map();  // "d/c" -> {latest, latestSuccessful}
const deployedAck = new Map();  // domain -> build id of the last deploy kiln answered rolled_out
// Issue 19: the barrier the agents wait at while kiln or the registry restarts.
let gate = null;        // {promise, resolve} while paused
let agentsIdle = 0;     // agents waiting at the gate or done with their loop
let epoch = 0;          // kiln processes started so far - 1 (samples carry it)
async function atGate() {
  while (gate) {   // the next event may close the gate again before this agent runs
    agentsIdle++;
    try { await gate.promise; } finally { agentsIdle--; }
  }
}

// ------------------------------------------------------------------------------ agent
const epp = path.join(ROOT, "examples/epp");
const MAIN_GO = fs.readFileSync(path.join(epp, "cmd/epp/main.go"), "utf8");
const SCORER_GO = fs.readFileSync(path.join(epp, "internal/scorer/scorer.go"), "utf8");
const SCORER_LINES = SCORER_GO.endsWith("\n") ? SCORER_GO.split("\n").length - 1 : SCORER_GO.split("\n").length;
if (!MAIN_GO.includes('[]byte("ok\\n")')) throw new Error("examples/epp/cmd/epp/main.go changed: no ok\\n reply");

class Agent {
  constructor(d, c, token, index) {
    this.index = index;
    this.domain = `d${d}`; this.cand = `c${c}`; this.token = token; this.port = DEPLOY_BASE + d;
    this.dir = path.join(W, "agents", this.domain, this.cand);
    this.key = `${this.domain}/${this.cand}`;
    this.gitEnv = { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_AUTHOR_NAME: "agent", GIT_AUTHOR_EMAIL: "a@x",
      GIT_COMMITTER_NAME: "agent", GIT_COMMITTER_EMAIL: "a@x", GIT_CONFIG_COUNT: "1",
      GIT_CONFIG_KEY_0: "http.extraHeader", GIT_CONFIG_VALUE_0: `Authorization: Bearer ${token}` };
    this.known = new Set();
    this.rng = makeRng(SEED + 7919 * (d * 64 + c));
  }
  git(...a) { return run("git", a, { cwd: this.dir, env: this.gitEnv }); }
  async init() {
    fs.mkdirSync(path.dirname(this.dir), { recursive: true });
    fs.cpSync(epp, this.dir, { recursive: true, filter: (s) => !s.startsWith(path.join(epp, "out")) });
    await this.git("init", "-q");
    await this.git("checkout", "-q", "-b", this.cand);
    this.client = await connect(this.token, `soak-${this.key}`);
  }
  /// Writes iteration `it`'s tree (broken: an undefined identifier in scorer.go), commits, pushes.
  async mutateAndPush(it, broken) {
    const tag = `${this.domain}/${this.cand} v${it}`;
    fs.writeFileSync(path.join(this.dir, "cmd/epp/main.go"), MAIN_GO.replace('[]byte("ok\\n")', `[]byte("ok ${tag}\\n")`));
    this.ident = `kilnSoakBroken_${this.domain}_${this.cand}_${it}`;
    fs.writeFileSync(path.join(this.dir, "internal/scorer/scorer.go"), broken ? `${SCORER_GO}\nvar _ = ${this.ident}\n` : SCORER_GO);
    await this.git("add", "-A");
    await this.git("commit", "-qm", `iteration ${it}${broken ? " (broken)" : ""}`);
    await this.git("push", "-q", "-f", `http://127.0.0.1:${PORT}/git/${this.domain}.git`, `HEAD:refs/heads/${this.cand}`);
    counters.pushes++;
    this.commit = (await this.git("rev-parse", "HEAD")).trim();
  }
  async build(args = {}, kind = "normal", opts = {}) {
    const t = Date.now();
    const { sc, isError } = await tool(this.client, "build_candidate", { candidate: this.cand, ...args }, opts);
    const ms = Date.now() - t;
    observe(this.domain, this.cand, sc, "build_candidate", { kind, broken: this.broken });
    if (sc.build_id) this.known.add(sc.build_id);
    check("build_candidate isError iff the build did not succeed (wait:true)",
      args.wait === false || isError === (sc.status !== "succeeded"), `${sc.build_id}: status ${sc.status} isError ${isError}`);
    return { sc, isError, ms };
  }
  /// Checks a finished build's result against what kiln reports about it afterwards.
  async verifyFinished(b, { broken, expectLatest = true }) {
    const id = b.build_id;
    check("a finished build has a terminal status", TERMINAL.has(b.status), `${id}: ${b.status}`);
    check("no build is reported interrupted while kiln runs", b.status !== "interrupted", id);
    if (b.status === "succeeded") {
      check("a succeeded build has an image digest and ref", /^sha256:[0-9a-f]{64}$/.test(b.image?.digest ?? "") &&
        (b.image?.ref ?? "").endsWith(`@${b.image.digest}`), `${id}: ${JSON.stringify(b.image)}`);
      check("a succeeded build's commit is the pushed one", b.commit === this.commit, `${id}: ${b.commit} vs ${this.commit}`);
      check("an intact tree never fails to compile, a broken one never succeeds", !broken, `${id} succeeded with a compile error in the tree`);
      if (b.cache_hit) counters.cache_hits++;
    } else if (b.status === "failed") {
      if (!check("an intact tree never fails to compile, a broken one never succeeds", broken, `${id}: ${b.error} ${b.log_tail?.slice(-300)}`)) return;
      counters.compile_errors++;
      const d = (b.diagnostics ?? []).find((x) => x.file === "internal/scorer/scorer.go" && (x.message ?? "").includes(this.ident));
      check("a compile error comes back as structured diagnostics (file, line, column, severity, message)",
        d && d.line === SCORER_LINES + 2 && d.column > 0 && d.severity === "error" && /undefined/.test(d.message),
        `${id}: expected internal/scorer/scorer.go:${SCORER_LINES + 2} undefined: ${this.ident}, got ${JSON.stringify(b.diagnostics)}`);
    }
    const st = (await tool(this.client, "candidate_status", { candidate: this.cand })).sc;
    observe(this.domain, this.cand, st.latest_build, "candidate_status");
    if (expectLatest) {
      const lb = st.latest_build ?? {};
      check("candidate_status' latest build is the build the client just finished, with the same status and digest",
        lb.build_id === id && lb.status === b.status && (lb.image?.digest ?? null) === (b.image?.digest ?? null),
        `${this.key}: client ${id} ${b.status} ${b.image?.digest}; status ${lb.build_id} ${lb.status} ${lb.image?.digest}`);
      check("candidate_status' state is the latest build's final status", st.state === b.status, `${this.key}: state ${st.state}, build ${b.status}`);
      if (b.status === "succeeded")
        check("candidate_status' latest successful build is the build that just succeeded",
          st.latest_successful_build?.build_id === id && st.latest_successful_build?.image?.digest === b.image.digest,
          `${this.key}: ${JSON.stringify(st.latest_successful_build)?.slice(0, 200)} vs ${id}`);
    }
    await this.verifyLog(b);
    this.remember(st);
  }
  async verifyLog(b) {
    const text = await readLog(this.client, b.build_id);
    if (text === null) { check("build_log knows every build the client saw", false, `${b.build_id}: not found`); return; }
    check("build_log knows every build the client saw", true);
    if (b.status !== "cancelled" || (b.log_tail ?? "").includes("kiln: build "))
      check("build_log holds the build's own log (its id and commit)", text.log.includes(`kiln: build ${b.build_id} of commit `),
        `${b.build_id}: ${text.log.slice(0, 200)}`);
    check("build_log is complete once the build ended", text.complete, b.build_id);
    check("the result's log_tail is the end of build_log", text.log.endsWith(b.log_tail ?? ""),
      `${b.build_id}: tail ${JSON.stringify((b.log_tail ?? "").slice(-120))} log ${JSON.stringify(text.log.slice(-120))}`);
    if (b.status === "succeeded") check("a succeeded build's log names the pushed digest", text.log.includes(b.image.digest), b.build_id);
    if (b.status === "failed" && builds.get(b.build_id)?.broken)
      check("a failed build's log holds the compiler's message", text.log.includes(this.ident), b.build_id);
  }
  remember(st) {
    lastSeen.set(this.key, { latest: st.latest_build?.build_id ?? null, latestStatus: st.latest_build?.status ?? null,
      latestDigest: st.latest_build?.image?.digest ?? null, latestSuccessful: st.latest_successful_build?.build_id ?? null,
      latestSuccessfulDigest: st.latest_successful_build?.image?.digest ?? null });
  }
  /// Polls candidate_status until a build not seen before shows up (the one just requested);
  /// null once stop() is true (the request already answered) or after maxMs.
  async findNewBuild(stop, maxMs = 120_000) {
    const t = Date.now();
    while (Date.now() - t < maxMs && !stop()) {
      const st = (await tool(this.client, "candidate_status", { candidate: this.cand })).sc;
      const lb = st.latest_build;
      if (lb && !this.known.has(lb.build_id)) {
        observe(this.domain, this.cand, lb, "candidate_status", { kind: "cancel", broken: this.broken });
        this.known.add(lb.build_id);
        return lb;
      }
      await sleep(25);
    }
    return null;
  }
  /// Polls candidate_status until build `id` (the latest) is final.
  async waitFinal(id, maxMs = 600_000) {
    const t = Date.now();
    while (Date.now() - t < maxMs) {
      const st = (await tool(this.client, "candidate_status", { candidate: this.cand })).sc;
      const lb = st.latest_build;
      observe(this.domain, this.cand, lb, "candidate_status");
      if (lb?.build_id !== id) { check("a cancelled build stays the candidate's latest until the next request", false, `${id} vs ${lb?.build_id}`); return null; }
      if (TERMINAL.has(lb.status)) return lb;
      await sleep(50);
    }
    check("a cancelled build reaches a terminal status", false, `${id} not final after ${maxMs} ms`);
    return null;
  }
  async cancel(id) {
    const { sc, isError } = await tool(this.client, "cancel_build", { build_id: id });
    check("cancel_build of a known build is not an error", !isError, `${id}: ${JSON.stringify(sc)}`);
    observe(this.domain, this.cand, sc.status ? { build_id: id, status: sc.status } : null, "cancel_build");
    return sc;
  }
  async iteration(it) {
    // The first iteration of agent i is scenario i % 4 (deploy, compile error, cancel, duplicate),
    // so even a small run (CI: 2x2x3) goes through each; the rest are random.
    const forced = it === 1 ? ["deploy", "break", "cancel", "dup"][this.index % 4] : null;
    this.broken = forced ? forced === "break" : this.rng() < P_BREAK;
    await this.mutateAndPush(it, this.broken);
    const r = forced ? { cancel: 0, dup: P_CANCEL, deploy: 1, break: 1 }[forced] : this.rng();
    if (r < P_CANCEL) await this.cancelFlow();
    else if (r < P_CANCEL + P_DUP) await this.dupFlow();
    else {
      counters.normal++;
      const { sc, ms } = await this.build();
      if (TERMINAL.has(sc.status) && sc.status !== "cancelled") {
        latencies[sc.status]?.push(ms);
        if (sc.timings?.total_ms) latencies.kiln_total_ms.push(sc.timings.total_ms);
      }
      await this.verifyFinished(sc, { broken: this.broken });
      if (sc.status === "succeeded" && (forced === "deploy" || this.rng() < P_DEPLOY)) await this.deploy(sc);
    }
    if (this.rng() < 0.1) {
      const l = (await tool(this.client, "list_candidates", {})).sc;
      const mine = (l.candidates ?? []).find((x) => x.candidate === this.cand);
      check("list_candidates lists the candidate with its latest build", l.domain === this.domain && mine &&
        mine.latest_build?.build_id === lastSeen.get(this.key)?.latest, `${this.key}: ${JSON.stringify(mine)?.slice(0, 300)}`);
    }
    counters.iterations++;
  }
  async cancelFlow() {
    counters.cancel_flows++;
    const variant = this.rng();
    const delay = Math.floor(this.rng() * 1500);
    let id = null, final = null, cancelReply = null;
    if (variant < 0.4) {            // wait:false, then cancel_build
      const { sc } = await this.build({ wait: false }, "cancel");
      check("build_candidate wait:false answers at once with a running build", sc.status === "running" || sc.status === "queued",
        `${sc.build_id}: ${sc.status}`);
      id = sc.build_id;
      await sleep(delay);
      cancelReply = await this.cancel(id);
      final = await this.waitFinal(id);
    } else {                        // a waiting build_candidate, cancelled by cancel_build or by the agent giving up
      const viaAbort = variant >= 0.8;
      if (viaAbort) counters.abort_flows++;
      const ac = new AbortController();
      let done = false;
      const call = this.build({}, "cancel", viaAbort ? { signal: ac.signal } : {})
        .then((r) => ({ r }), (e) => ({ e })).finally(() => { done = true; });
      const found = await this.findNewBuild(() => done);
      await sleep(delay);
      if (found) {
        id = found.build_id;
        // Abort through the SDK sends notifications/cancelled for the request in flight.
        if (viaAbort) ac.abort("the agent gave up"); else cancelReply = await this.cancel(id);
      }
      const res = await call;
      if (res.r) {
        final = res.r.sc;
        if (id) check("the waiting call returns the build that was cancelled", final.build_id === id, `${id} vs ${final.build_id}`);
        id = final.build_id;
        if (!found && !viaAbort) cancelReply = await this.cancel(id);
      } else if (id && viaAbort) {
        final = await this.waitFinal(id);
        // The build may have ended just before the abort reached kiln; then it keeps its status.
        if (final && final.status !== "cancelled") counters.abort_after_end++;
      } else {
        check("agent iterations run without a client-side error", false, `${this.key}: cancel flow: ${res.e?.stack ?? res.e}`);
        return;
      }
    }
    if (!final) return;
    if (cancelReply) {
      if (cancelReply.note) {
        counters.cancel_after_end++;
        check("cancel_build of an ended build reports its final status", cancelReply.status === final.status,
          `${id}: cancel said ${cancelReply.status} (${cancelReply.note}), final ${final.status}`);
      } else {
        counters.cancel_ok++;
        check("a build cancel_build cancelled ends cancelled", cancelReply.status === "cancelled" && final.status === "cancelled",
          `${id}: cancel said ${cancelReply.status}, final ${final.status}`);
      }
    }
    if (final.status === "cancelled")
      check("a cancelled build has no image", final.image === null, `${id}: ${JSON.stringify(final.image)}`);
    await this.verifyFinished(final, { broken: this.broken });
  }
  async dupFlow() {
    counters.dup_pairs++;
    const [a, b] = await Promise.all([this.build({}, "dup"), this.build({}, "dup")]);
    const x = a.sc, y = b.sc;
    const st = (await tool(this.client, "candidate_status", { candidate: this.cand })).sc;
    const latest = st.latest_build?.build_id;
    if (x.build_id === y.build_id) {
      counters.dup_same++;
      check("duplicate requests: both calls return the same result", x.status === y.status && x.image?.digest === y.image?.digest,
        `${x.build_id}: ${x.status}/${y.status}`);
      await this.verifyFinished(x, { broken: this.broken });
      return;
    }
    const sup = [x, y].filter((r) => r.status === "cancelled" && /superseded/.test(r.error ?? ""));
    if (sup.length) counters.dup_superseded++; else counters.dup_other++;
    if (DUP_EXPECT === "same")
      check("duplicate requests (same build_candidate twice at once) return the same build", false,
        `${this.key}: ${x.build_id} ${x.status} (${x.error ?? ""}) vs ${y.build_id} ${y.status} (${y.error ?? ""})`);
    {
      // docs/tools.md: a newer build_candidate for the same candidate supersedes the active one.
      const winner = [x, y].find((r) => r.build_id === latest);
      const loser = [x, y].find((r) => r.build_id !== latest);
      check("duplicate requests: the newer one is the candidate's latest build; the older is superseded or was already finished",
        winner && loser && winner.status !== "cancelled" &&
        (loser.status === "cancelled" ? /superseded/.test(loser.error ?? "") : TERMINAL.has(loser.status)),
        `${this.key}: latest ${latest}; ${x.build_id} ${x.status} (${x.error ?? ""}), ${y.build_id} ${y.status} (${y.error ?? ""})`);
      if (winner && loser && loser.status === "succeeded" && winner.status === "succeeded")
        check("duplicate requests that both built the same tree got the same digest", winner.image.digest === loser.image.digest,
          `${winner.build_id} ${winner.image.digest} vs ${loser.build_id} ${loser.image.digest}`);
      if (loser) await this.verifyFinished(loser, { broken: this.broken, expectLatest: false });
      if (winner) await this.verifyFinished(winner, { broken: this.broken });
    }
  }
  async deploy(b) {
    counters.deploys++;
    const { sc, isError } = await tool(this.client, "deploy_candidate", { candidate: this.cand, build_id: b.build_id });
    if (sc.status === "rolled_out") {
      counters.deploy_rolled_out++;
      deployedAck.set(this.domain, b.build_id);
      check("a rolled-out deploy is of the requested build and digest", !isError && sc.build_id === b.build_id &&
        sc.image?.digest === b.image.digest, JSON.stringify(sc).slice(0, 300));
      let code = 0;
      try { code = (await fetch(`http://127.0.0.1:${this.port}/healthz`)).status; } catch {}
      check("after a rolled-out deploy the local target answers /healthz", code === 200, `${this.key}: ${code}`);
    } else if (sc.reason === "Superseded") {
      counters.deploy_superseded++;   // a newer build of the domain is being deployed: documented ordering
      check("a superseded deploy is an error result", isError, JSON.stringify(sc).slice(0, 300));
    } else {
      check("a deploy of a succeeded build rolls out (or is superseded by a newer one)", false, JSON.stringify(sc).slice(0, 400));
    }
  }
}

async function readLog(client, id) {
  let offset = 0, log = "", complete = false;
  for (let i = 0; i < 1000; i++) {
    const { sc, isError } = await tool(client, "build_log", { build_id: id, offset, limit: 1_048_576 });
    if (isError) return null;
    log += sc.text ?? "";
    complete = sc.complete === true;
    if (sc.next_offset === offset || complete || !sc.text) break;
    offset = sc.next_offset;
  }
  return { log, complete };
}

function pct(a, p) {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

// ------------------------------------------------------------------------------ main
const summary = { seed: SEED, domains: DOMAINS, candidates: CANDIDATES, iterations: ITERATIONS, kiln: KILN_GIVEN, work_dir: W };
let exitCode = 0;
try {
  note(`work dir ${W}, seed ${SEED}, ${DOMAINS}x${CANDIDATES}x${ITERATIONS}, load ${fs.readFileSync("/proc/loadavg", "utf8").split(" ")[0]}`);
  // Registry (htpasswd auth) and the base images.
  const reg = await run(path.join(ROOT, "scripts/registry.sh"), ["start", "--dir", REG_DIR, "--port", String(REG_PORT)]);
  registryPid = Number(reg.match(/^pid=(\d+)/m)?.[1]);
  const bases = await run(path.join(ROOT, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(REG_DIR, "auth.json")]);
  const busybox = bases.match(/^busybox=[^@\s]+@(sha256:[0-9a-f]{64})$/m)?.[1];
  if (!busybox) throw new Error(`base_images.sh printed no busybox digest: ${bases}`);

  const tokens = Array.from({ length: DOMAINS }, rnd);
  const operatorToken = rnd();
  const domains = {};
  for (let d = 0; d < DOMAINS; d++) {
    domains[`d${d}`] = {
      token_sha256: [sha256(tokens[d])],
      build: { mode: "layered", timeout_s: 600, layered: {
        base_image: `127.0.0.1:${REG_PORT}/kiln/busybox@${busybox}`,
        command: ["go", "build", "-o", "out/app", "./cmd/epp"],
        env: { CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" },
        caches: { GOCACHE: "go-build" },
        outputs: [{ from: "out/app", to: "/app" }], entrypoint: ["/app"] } },
      image: { registry: "local", repository: `soak/d${d}` },
      deploy: { type: "local", local: { port: DEPLOY_BASE + d, health_path: "/healthz" } },
      ...(STORAGE_MAX_GB ? { storage: { max_gb: STORAGE_MAX_GB / DOMAINS } } : {}),
    };
  }
  fs.writeFileSync(path.join(W, "kiln.json"), JSON.stringify({
    log_level: "info",
    server: { listen: `127.0.0.1:${PORT}`, state_dir: STATE, max_sessions: 1024, metrics_listen: `127.0.0.1:${PORT + 1}` },
    scheduler: { max_parallel_builds: 2 },
    ...(STORAGE_MAX_GB ? { storage: { max_gb: STORAGE_MAX_GB, gc_interval_s: GC_INTERVAL_S } } : {}),
    operator_token_sha256: [sha256(operatorToken)],
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(REG_DIR, "auth.json") } },
    domains,
  }, null, 2));
  await run(KILN, ["check-config", "--config", path.join(W, "kiln.json")]);

  startKiln();
  summary.first_start_to_healthz_ms = await waitHealthy();
  note(`kiln pid ${kiln.pid} up in ${summary.first_start_to_healthz_ms} ms`);

  const agents = [];
  for (let d = 0; d < DOMAINS; d++)
    for (let c = 0; c < CANDIDATES; c++) agents.push(new Agent(d, c, tokens[d], agents.length));
  await Promise.all(agents.map((a) => a.init()));

  // ---- issue 19: restarts during the loop (kill -9 of kiln, registry restart)
  function restartEvents() {
    const kinds = [];
    let k = KILLS, r = REGISTRY_RESTARTS;
    while (k > 0 || r > 0) {             // interleaved: kill, registry, kill, ...
      if (k > 0) { kinds.push("kill"); k--; }
      if (r > 0) { kinds.push("registry"); r--; }
    }
    return kinds.map((kind, i) => ({ kind, at: Math.min(0.9, EVENT_STEP * (i + 1)), done: false }));
  }
  async function runEvents(events, fraction, finished) {
    for (const [i, ev] of events.entries()) {
      while (fraction() < ev.at && !finished()) await sleep(200);
      if (finished()) { note(`loop ended before restart event ${i} (${ev.kind})`); break; }
      let resolve;
      gate = { promise: new Promise((r) => (resolve = r)) };
      const tWait = Date.now();
      while (agentsIdle < agents.length) await sleep(50);
      ev.t_s = Math.round((Date.now() - t0run) / 1000);
      ev.barrier_ms = Date.now() - tWait;
      note(`restart event ${i}: ${ev.kind} (agents paused in ${ev.barrier_ms} ms)`);
      try {
        if (ev.kind === "kill") await killEvent(ev, i);
        else await registryEvent(ev);
        ev.done = true;
      } catch (e) {
        check("restart events run to the end", false, `${ev.kind}: ${e?.stack ?? e}`);
      } finally {
        gate = null;
        resolve();
      }
    }
  }
  const victimsOf = () => agents.filter((a) => a.cand === "c0");   // one per domain
  async function operatorDeployed() {
    const out = {};
    for (let d = 0; d < DOMAINS; d++) {
      const j = await (await fetch(`http://127.0.0.1:${PORT}/v1/domains/d${d}`, { headers: { Authorization: `Bearer ${operatorToken}` } })).json();
      out[`d${d}`] = j.deployed?.build_id ?? null;
    }
    return out;
  }
  async function healthzOf(a, maxMs) {
    const t = Date.now();
    let code = 0;
    do {
      try { code = (await fetch(`http://127.0.0.1:${a.port}/healthz`, { signal: AbortSignal.timeout(5000) })).status; } catch { code = 0; }
      if (code === 200) break;
      await sleep(250);
    } while (Date.now() - t < maxMs);
    return code;
  }
  async function killEvent(ev, n) {
    // Builds in flight at the kill: one per domain, started without waiting.
    const victims = [];
    for (const v of victimsOf()) {
      v.broken = false;
      await v.mutateAndPush(`k${n}`, false);
      const { sc } = await v.build({ wait: false }, "killed");
      victims.push([v, sc.build_id]);
    }
    await sleep(700 + Math.floor(Math.random() * 800));
    const acked = Object.fromEntries([...deployedAck]);
    const before = await operatorDeployed();
    for (const [d, id] of Object.entries(before))
      check("the operator API shows the deploy kiln last answered rolled_out", (acked[d] ?? null) === id, `${d}: ${id} vs acked ${acked[d]}`);
    const ps = await processes();
    const tree = subtree(ps, [kiln.pid]);
    const procs = ps.filter((p) => tree.has(p.pid) && p.pid !== kiln.pid && !p.args.startsWith("ps -ww"));
    ev.kiln_children = procs.length;
    ev.rss_kb = rssKb(kiln.pid);
    kiln.kill("SIGKILL");
    await kilnExit;
    // Nothing kiln started survives it: build sandboxes, git, deployed candidates' sandboxes.
    let alive = procs;
    for (let i = 0; i < 75 && alive.length; i++) {
      await sleep(200);
      alive = alive.filter((p) => { try { return fs.readFileSync(`/proc/${p.pid}/cmdline`, "utf8").length > 0; } catch { return false; } });
    }
    check("after kill -9 of kiln no process it started survives (builds, git, deployed sandboxes)", alive.length === 0,
      alive.map((p) => `${p.pid} ${p.args.slice(0, 160)}`).join("\n"));
    const mounts = leftMounts();
    check("after kill -9 of kiln no mount of the run is left", mounts.length === 0, mounts.join("\n"));
    // Every acknowledged build and deploy is in the journal (kiln state-check on a copy, kiln down).
    const sc = await stateCheck();
    if (check("kiln state-check runs while kiln is down after kill -9", sc !== null)) {
      check("state-check after kill -9: no corruption, no duplicate terminal record", sc.corruptions.length === 0 &&
        sc.duplicate_terminal.length === 0 && sc.duplicate_started.length === 0, JSON.stringify([sc.corruptions, sc.duplicate_terminal]).slice(0, 400));
      const list = new Map((sc.build_list ?? []).map((b) => [b.id, b]));
      const recent = recentPerCandidate(198);
      let missing = [];
      for (const rec of builds.values()) {
        const j = list.get(rec.id);
        if (!j) { if (recent.has(rec.id)) missing.push(rec.id); continue; }
        const term = terminalOf(rec)[0];
        if (term && j.status !== term.status) missing.push(`${rec.id}: client ${term.status}, journal ${j.status}`);
      }
      check("after kill -9 every acknowledged build is in the journal with the status the client saw", missing.length === 0, missing.slice(0, 10).join(", "));
      for (let d = 0; d < DOMAINS; d++)
        check("after kill -9 the journal's deployed build is the last acknowledged deploy",
          (sc.domains?.[`d${d}`]?.deployed?.build_id ?? null) === (acked[`d${d}`] ?? null),
          `d${d}: journal ${JSON.stringify(sc.domains?.[`d${d}`]?.deployed)} acked ${acked[`d${d}`]}`);
    }
    epoch++;
    startKiln();
    ev.restart_to_healthz_ms = await waitHealthy();
    note(`kill -9 #${n}: kiln restarted in ${ev.restart_to_healthz_ms} ms`);
    for (const a of agents) {
      try { await a.client.close(); } catch {}
      a.client = await connect(a.token, `soak-${a.key}-e${epoch}`);
    }
    for (const [v, id] of victims) {
      let lb = null;
      for (let i = 0; i < 600; i++) {
        const st = (await tool(v.client, "candidate_status", { candidate: v.cand })).sc;
        lb = st.latest_build;
        if (lb?.build_id !== id || TERMINAL.has(lb.status)) { v.remember(st); break; }
        await sleep(100);
      }
      observe(v.domain, v.cand, lb, "candidate_status");
      check("after kill -9 a build that was in flight is the candidate's latest, with a terminal status (interrupted if it had not finished)",
        lb?.build_id === id && TERMINAL.has(lb.status), `${v.key}: ${id} vs ${lb?.build_id} ${lb?.status}`);
      ev.victims = [...(ev.victims ?? []), `${id}:${lb?.status}`];
    }
    for (const a of agents) {
      if (victims.some(([v]) => v === a)) continue;
      const st = (await tool(a.client, "candidate_status", { candidate: a.cand })).sc;
      const seen = lastSeen.get(a.key);
      check("after kill -9 candidate_status shows the latest and latest successful build the client saw",
        !seen || ((st.latest_build?.build_id ?? null) === seen.latest && (st.latest_successful_build?.build_id ?? null) === seen.latestSuccessful),
        `${a.key}: ${st.latest_build?.build_id}/${st.latest_successful_build?.build_id} vs ${seen?.latest}/${seen?.latestSuccessful}`);
    }
    const after = await operatorDeployed();
    for (let d = 0; d < DOMAINS; d++) {
      const id = acked[`d${d}`] ?? null;
      check("after kill -9 the operator API shows the last acknowledged deploy", after[`d${d}`] === id, `d${d}: ${after[`d${d}`]} vs ${id}`);
      if (!id) continue;
      // docs/operations.md: after a restart the local target serves nothing until the next deploy;
      // the acknowledged deploy's build deploys again from the registry.
      const owner = agents.find((a) => a.domain === `d${d}` && a.cand === builds.get(id)?.candidate);
      const { sc, isError } = await tool(owner.client, "deploy_candidate", { candidate: owner.cand, build_id: id });
      check("after kill -9 the acknowledged deployed build deploys again on the local target", !isError && sc.status === "rolled_out" &&
        (await healthzOf(owner, 30_000)) === 200, `d${d} ${id}: ${JSON.stringify(sc).slice(0, 300)}`);
    }
  }
  async function registryEvent(ev) {
    await run(path.join(ROOT, "scripts/registry.sh"), ["stop", "--dir", REG_DIR]);
    const victims = victimsOf();
    // Builds while the registry is down fail as infrastructure, and kiln keeps answering.
    await Promise.all(victims.map(async (v) => {
      v.broken = false;
      await v.mutateAndPush(`r${ev.t_s}`, false);
      const { sc } = await v.build({}, "registry-down");
      check("a build while the registry is down fails with an infrastructure error", sc.status === "failed" &&
        ["infrastructure", "not_pushed"].includes(sc.error_kind), `${sc.build_id}: ${sc.status} ${sc.error_kind} ${sc.error}`);
      const st = (await tool(v.client, "candidate_status", { candidate: v.cand })).sc;
      observe(v.domain, v.cand, st.latest_build, "candidate_status");
      v.remember(st);
    }));
    for (const a of agents.filter((x) => x.cand !== "c0")) {
      const { sc, isError } = await tool(a.client, "candidate_status", { candidate: a.cand });
      check("kiln answers candidate_status while the registry is down", !isError && sc.candidate === a.cand, JSON.stringify(sc).slice(0, 200));
    }
    for (const [d, id] of deployedAck)
      if (id) check("a deployed candidate keeps serving while the registry is down", (await healthzOf(agents.find((a) => a.domain === d), 10_000)) === 200, d);
    const reg = await run(path.join(ROOT, "scripts/registry.sh"), ["start", "--dir", REG_DIR, "--port", String(REG_PORT)]);
    registryPid = Number(reg.match(/^pid=(\d+)/m)?.[1]);
    // The same trees build and push again once it is back.
    await Promise.all(victims.map(async (v) => {
      const { sc } = await v.build({}, "registry-back");
      check("after the registry restart a build succeeds and pushes", sc.status === "succeeded", `${sc.build_id}: ${sc.status} ${sc.error}`);
      await v.verifyFinished(sc, { broken: false });
    }));
  }

  // Warm-up: one build per domain fills the domain's GOCACHE (std for CGO_ENABLED=0).
  note("warm-up: one build per domain");
  await Promise.all(agents.filter((a) => a.cand === "c0").map(async (a) => {
    a.broken = false;
    await a.mutateAndPush(0, false);
    const { sc } = await a.build({}, "warmup");
    check("warm-up build succeeds", sc.status === "succeeded", JSON.stringify(sc).slice(0, 400));
    await a.verifyFinished(sc, { broken: false });
  }));
  summary.rss_start_kb = rssKb(kiln.pid);
  // Issue 19: samples over the loop (RSS, fds, threads, disk of the state directory per kind).
  summary.samples = [];
  let sampling = false;
  const sampler = setInterval(async () => {
    if (sampling || !kiln?.pid) return;
    sampling = true;
    try { summary.samples.push({ t_s: Math.round((Date.now() - t0run) / 1000), epoch, ...procSample(kiln.pid), ...(await diskSample()) }); }
    catch {} finally { sampling = false; }
  }, SAMPLE_S * 1000);
  let rssMax = summary.rss_start_kb;
  const rssTimer = setInterval(() => { const r = rssKb(kiln?.pid); if (r && r > rssMax) rssMax = r; }, 2000);
  note(`warm-up done; kiln VmRSS ${summary.rss_start_kb} kB; starting ${agents.length} agent loops`);

  // The soak: every candidate is an independent agent loop.
  const tLoop = Date.now();
  const total = agents.length * ITERATIONS;
  const progress = setInterval(() => note(`${counters.iterations}/${total} iterations, ${builds.size} builds, VmRSS ${rssKb(kiln?.pid)} kB, ` +
    `state dir ${Math.round((summary.samples.at(-1)?.du_bytes ?? 0) / 1048576)} MiB`), 30_000);
  let loopsDone = false;
  const events = restartEvents();
  const eventsRun = runEvents(events, () => (LOOP_S ? (Date.now() - tLoop) / (LOOP_S * 1000) : counters.iterations / total), () => loopsDone);
  await Promise.all(agents.map(async (a) => {
    try {
      for (let it = 1; it <= ITERATIONS; it++) {
        if (LOOP_S && Date.now() - tLoop > LOOP_S * 1000) break;
        if (Date.now() > deadline - 300_000) { check("the soak finishes before its deadline", false, `${a.key} stopped at iteration ${it}`); break; }
        await atGate();
        try { await a.iteration(it); }
        catch (e) { check("agent iterations run without a client-side error", false, `${a.key} #${it}: ${e?.stack ?? e}`); }
        await sleep(Math.floor(a.rng() * 200));
      }
    } finally { agentsIdle++; }
  }));
  loopsDone = true;
  await eventsRun;
  summary.events = events;
  check(`every planned restart ran (${KILLS} kill -9 of kiln, ${REGISTRY_RESTARTS} registry restarts)`, events.every((e) => e.done),
    JSON.stringify(events));
  clearInterval(progress);
  summary.loop_s = Math.round((Date.now() - tLoop) / 1000);
  note(`loops done in ${summary.loop_s} s: ${counters.iterations} iterations, ${builds.size} builds`);

  // ---- consistency: every build the client saw has exactly one terminal status
  const kilnLogText = fs.readFileSync(LOG, "utf8");
  const logTerminal = new Map();
  for (const m of kilnLogText.matchAll(/ build (b-[0-9a-f]{16}) domain=(\S+) candidate=(\S+) -> (succeeded|failed|cancelled|interrupted)\b/g)) {
    if (!logTerminal.has(m[1])) logTerminal.set(m[1], []);
    logTerminal.get(m[1]).push(m[4]);
  }
  const byStatus = {};
  for (const rec of builds.values()) {
    const term = terminalOf(rec);
    const distinct = [...new Set(term.map((o) => o.status))];
    if (!check("every build the client saw reached a terminal status", term.length > 0,
      `${rec.id} (${rec.domain}/${rec.candidate}, ${rec.kind}): ${rec.obs.map((o) => `${o.via}:${o.status}`).join(", ")}`)) continue;
    check("every build has exactly one terminal status across all answers", distinct.length === 1,
      `${rec.id}: ${term.map((o) => `${o.via}:${o.status}`).join(", ")}`);
    const firstTerm = term[0].seq;
    check("no answer shows a build running again after it ended", !rec.obs.some((o) => o.seq > firstTerm && !TERMINAL.has(o.status)),
      `${rec.id}: ${rec.obs.map((o) => `${o.via}:${o.status}`).join(", ")}`);
    const digests = [...new Set(term.filter((o) => o.status === "succeeded" && o.digest !== undefined).map((o) => o.digest))];
    check("a succeeded build always reports the same digest", digests.length <= 1, `${rec.id}: ${digests}`);
    rec.final = distinct[0];
    rec.digest = digests[0] ?? null;
    byStatus[rec.final] = (byStatus[rec.final] ?? 0) + 1;
    const lt = logTerminal.get(rec.id) ?? [];
    // A build kill -9 interrupted has its terminal record from the restart, not a log line.
    check("kiln's log has exactly one terminal transition per build, the one the client saw",
      (lt.length === 1 && lt[0] === rec.final) || (rec.final === "interrupted" && rec.kind === "killed" && lt.length === 0),
      `${rec.id}: log ${JSON.stringify(lt)}, client ${rec.final}`);
  }
  for (const [id, lt] of logTerminal)
    check("kiln's log has no build the client never saw", builds.has(id), `${id}: ${lt}`);
  summary.builds_total = builds.size;
  summary.builds_by_status = byStatus;
  if (MIN_BUILDS) check(`the soak ran at least MIN_BUILDS=${MIN_BUILDS} builds`, builds.size >= MIN_BUILDS, `${builds.size} builds`);

  // ---- end of run: candidate_status, list_candidates and build_log agree with the client
  const finalState = {};
  const admin = {};
  for (let d = 0; d < DOMAINS; d++) admin[`d${d}`] = await connect(tokens[d], `soak-admin-d${d}`);
  for (const a of agents) {
    const st = (await tool(admin[a.domain], "candidate_status", { candidate: a.cand })).sc;
    const seen = lastSeen.get(a.key);
    const lb = st.latest_build;
    check("at the end, candidate_status' latest build is the last one the client saw",
      lb?.build_id === seen?.latest && lb?.status === builds.get(lb?.build_id)?.final,
      `${a.key}: kiln ${lb?.build_id} ${lb?.status}; client ${seen?.latest} ${seen?.latestStatus}`);
    const lastOk = [...builds.values()].filter((r) => r.domain === a.domain && r.candidate === a.cand && r.final === "succeeded");
    check("at the end, the latest successful build is one the client saw succeed",
      st.latest_successful_build === null ? lastOk.length === 0 : builds.get(st.latest_successful_build.build_id)?.final === "succeeded" &&
        st.latest_successful_build.build_id === seen?.latestSuccessful && st.latest_successful_build.image.digest === builds.get(st.latest_successful_build.build_id).digest,
      `${a.key}: ${st.latest_successful_build?.build_id} vs client ${seen?.latestSuccessful}`);
    finalState[a.key] = {
      latest: lb?.build_id ?? null, latest_status: lb?.status ?? null, latest_digest: lb?.image?.digest ?? null,
      latest_successful: st.latest_successful_build?.build_id ?? null, latest_successful_digest: st.latest_successful_build?.image?.digest ?? null,
      deployed: st.deployed_build?.build_id ?? null, deployed_digest: st.deployed_build?.digest ?? null,
    };
  }
  for (const [d, client] of Object.entries(admin)) {
    const l = (await tool(client, "list_candidates", {})).sc;
    const names = (l.candidates ?? []).map((x) => x.candidate).sort();
    check("list_candidates lists exactly the domain's candidates", JSON.stringify(names) === JSON.stringify(agents.filter((a) => a.domain === d).map((a) => a.cand).sort()),
      `${d}: ${names}`);
    for (const x of l.candidates ?? [])
      check("list_candidates agrees with candidate_status", x.latest_build?.build_id === finalState[`${d}/${x.candidate}`]?.latest, `${d}/${x.candidate}`);
  }
  // build_log for every build kiln still keeps in memory (the last HISTORY per candidate, see
  // actors/domain_env.h history_per_candidate; older ones may be dropped): known and complete.
  let trimmed = 0;
  for (const a of agents) {
    const mine = [...builds.values()].filter((r) => r.domain === a.domain && r.candidate === a.cand).sort((x, y) => x.obs[0].seq - y.obs[0].seq);
    for (const [i, rec] of mine.entries()) {
      const text = await readLog(admin[rec.domain], rec.id);
      // Build logs live in memory: a build before the last kill -9 restart has none (docs/operations.md).
      const mustKeep = i >= mine.length - (HISTORY - 2) && rec.epoch === epoch;   // 2: a duplicate pair's order is kiln's choice
      if (!text && !mustKeep) { trimmed++; continue; }
      check("at the end, build_log knows every recent build and it is complete", text && text.complete,
        `${rec.id} (${i + 1} of ${mine.length} of ${a.key}): ${text ? "incomplete" : "not found"}`);
    }
  }
  summary.build_logs_trimmed = trimmed;
  const operatorView = {};
  for (let d = 0; d < DOMAINS; d++) {
    const r = await fetch(`http://127.0.0.1:${PORT}/v1/domains/d${d}`, { headers: { Authorization: `Bearer ${operatorToken}` } });
    const j = await r.json();
    operatorView[`d${d}`] = j;
    check("GET /v1/domains/<d> answers 200 with no deploy in progress", r.status === 200 && !j.deploy_in_progress, `d${d}: ${r.status} ${JSON.stringify(j).slice(0, 200)}`);
    const depCands = agents.filter((a) => a.domain === `d${d}` && finalState[a.key].deployed);
    check("the domain's deployed build is reported by exactly that candidate's candidate_status",
      (j.deployed ? depCands.length === 1 && finalState[depCands[0].key].deployed === j.deployed.build_id : depCands.length === 0),
      `d${d}: /v1 ${JSON.stringify(j.deployed)?.slice(0, 200)}; candidates ${depCands.map((a) => a.key)}`);
  }
  for (const c of Object.values(admin)) await c.close();

  // ---- leaks while kiln runs: no build process left, at most one deployed candidate per domain
  let leak = null;
  for (let i = 0; i < 30; i++) {
    leak = await strayProcesses({ allowDeployed: true });
    if (!leak.stray.length) break;
    await sleep(500);
  }
  check("no build sandbox, compiler or git process is left after the builds ended", leak.stray.length === 0, leak.stray.join("\n"));
  check("at most one deployed candidate sandbox per domain", leak.deployedCount <= DOMAINS,
    `${leak.deployedCount} deploy sandboxes:\n${leak.deployedList.join("\n")}`);
  const tmpLeft = [];
  const walk = (dir, rel = "") => {
    let ents = [];
    try { ents = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
    for (const e of ents) {
      const r = `${rel}/${e.name}`;
      if (/^\/domains\/[^/]+\/(candidates\/[^/]+\/src|deploy\/rootfs\/[^/]+)$/.test(r)) continue;
      if (/(^\.?tmp[-_.]|\.tmp\d*$|\.tmp-|^incoming-|^tmp_)/.test(e.name)) tmpLeft.push(r);
      // Layered mode writes its (unlinked) layer file below the candidate's storage/ when it
      // skips compression (issue 18); a buildah storage there (rootless/) would be a leak.
      if (e.name === "storage" && e.isDirectory() && fs.existsSync(path.join(dir, e.name, "rootless")))
        tmpLeft.push(`${r} (a buildah storage in layered mode)`);
      if (e.isDirectory()) walk(path.join(dir, e.name), r);
    }
  };
  walk(STATE);
  check("no temporary file or directory is left in the state directory", tmpLeft.length === 0, tmpLeft.join("\n"));
  const wc = await buildahContainers();
  check("no buildah working container is left", wc.length === 0, wc.join("\n"));
  for (let d = 0; d < DOMAINS; d++) {
    const roots = fs.existsSync(path.join(STATE, `domains/d${d}/deploy/rootfs`)) ? fs.readdirSync(path.join(STATE, `domains/d${d}/deploy/rootfs`)) : [];
    check("at most one unpacked deploy rootfs per domain", roots.length <= 1, `d${d}: ${roots}`);
  }
  summary.rss_end_kb = rssKb(kiln.pid);
  clearInterval(rssTimer);
  clearInterval(sampler);
  checkSamples();
  summary.chart = await writeChart(summary.samples ?? [], summary.events);
  summary.rss_max_kb = Math.max(rssMax ?? 0, summary.rss_end_kb ?? 0);

  // ---- graceful stop
  const tStop = Date.now();
  const stopped = await stopKiln(120_000);
  summary.stop_ms = Date.now() - tStop;
  check("SIGTERM stops kiln with exit code 0", stopped && stopped.code === 0 && !stopped.timedOut, JSON.stringify(stopped));
  check("kiln logs its shutdown", /shutdown: no builds running|stopped/.test(tail(LOG, 20)), tail(LOG, 5));
  const after = await strayProcesses({ allowDeployed: false });
  check("nothing of the run survives kiln's stop (deployed candidates stop with kiln)", after.stray.length === 0, after.stray.join("\n"));
  const mountsLeft = leftMounts();
  check("no mount of the run is left after kiln's stop", mountsLeft.length === 0, mountsLeft.join("\n"));

  // ---- the journal: kiln state-check --builds
  let sc = null;
  const scRun = await execFileP(KILN, ["state-check", "--state-dir", STATE, "--builds"], { maxBuffer: 256 << 20 })
    .then((r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }), (e) => ({ code: e.code, stdout: e.stdout ?? "", stderr: e.stderr ?? String(e) }));
  try { sc = JSON.parse(scRun.stdout); } catch {}
  if (check("kiln state-check --state-dir <state_dir> --builds runs and prints JSON", sc !== null && (scRun.code === 0 || scRun.code === 1),
    `exit ${scRun.code}: ${scRun.stderr.slice(0, 400)} ${scRun.stdout.slice(0, 200)}`)) {
    check("state-check: exit 0 and ok", scRun.code === 0 && sc.ok === true, `exit ${scRun.code}, ${scRun.stderr.slice(0, 300)}`);
    check("state-check: no duplicate terminal record", Array.isArray(sc.duplicate_terminal) && sc.duplicate_terminal.length === 0, JSON.stringify(sc.duplicate_terminal));
    check("state-check: no duplicate build id", (sc.duplicate_started ?? []).length === 0, JSON.stringify(sc.duplicate_started));
    check("state-check: no corruption, no torn tail", (sc.corruptions ?? []).length === 0 && !sc.truncated_bytes,
      `${JSON.stringify(sc.corruptions)} truncated ${sc.truncated_bytes}`);
    check("state-check: no build was left running by a graceful stop", (sc.interrupted ?? []).length === 0, JSON.stringify(sc.interrupted));
    const list = new Map((sc.build_list ?? []).map((b) => [b.id, b]));
    const perCandidate = new Map();
    for (const rec of [...builds.values()].sort((x, y) => y.obs[0].seq - x.obs[0].seq)) {   // newest first
      const k = `${rec.domain}/${rec.candidate}`;
      perCandidate.set(k, (perCandidate.get(k) ?? 0) + 1);
      const j = list.get(rec.id);
      // Compaction drops builds beyond max_builds_per_candidate (200) per candidate, oldest first.
      if (!j && perCandidate.get(k) > 200 - 2) continue;
      check("state-check: every build the client saw is in the journal with the same terminal status (and digest)",
        j && j.status === rec.final && j.domain === rec.domain && j.candidate === rec.candidate &&
          (rec.final !== "succeeded" || j.digest === rec.digest),
        `${rec.id} ${rec.domain}/${rec.candidate} client ${rec.final} ${rec.digest ?? ""}; journal ${JSON.stringify(j)}`);
    }
    for (const id of list.keys()) check("state-check: the journal has no build the client never saw", builds.has(id), id);
    check("state-check: build count equals the builds the client saw (or fewer after compaction)",
      sc.builds === builds.size || (sc.builds < builds.size && [...perCandidate.values()].some((n) => n > 198)), `${sc.builds} vs ${builds.size}`);
    for (const a of agents) {
      const j = sc.domains?.[a.domain]?.candidates?.[a.cand];
      const f = finalState[a.key];
      check("state-check: latest successful build per candidate as kiln reported it",
        (j?.latest_successful?.id ?? null) === f.latest_successful && (j?.latest_successful?.digest ?? null) === f.latest_successful_digest,
        `${a.key}: journal ${JSON.stringify(j?.latest_successful)} kiln ${f.latest_successful}`);
    }
    for (let d = 0; d < DOMAINS; d++) {
      const j = sc.domains?.[`d${d}`]?.deployed ?? null;
      const o = operatorView[`d${d}`]?.deployed ?? null;
      check("state-check: the deployed build per domain as kiln reported it", (j?.build_id ?? null) === (o?.build_id ?? null),
        `d${d}: journal ${JSON.stringify(j)} kiln ${JSON.stringify(o)}`);
    }
    summary.state_check = { builds: sc.builds, load_ms: sc.load_ms, journal_records: sc.journal_records, statuses: sc.statuses,
      generation: sc.generation };
    // Issue 19: the journal compacts itself (4 MiB) and git runs gc --auto after pushes (gc.auto
    // 6700 loose objects): a long run shows both.
    // Compaction is due once a journal passes 4 MiB (state/state_store.h); a run whose journal
    // never got there has nothing to show (the long soak of 2026-12-02: 5,771 records < 4 MiB).
    const journalBytes = fs.readdirSync(path.join(STATE, "state")).filter((f) => /^journal-\d+\.log$/.test(f))
      .reduce((n, f) => n + fs.statSync(path.join(STATE, "state", f)).size, 0);
    summary.state_check.journal_bytes = journalBytes;
    if (sc.generation === 0)
      check("the journal compacts once it passes 4 MiB", journalBytes < 4 << 20, `generation 0 with ${journalBytes} bytes of journal`);
    summary.git = {};
    for (let d = 0; d < DOMAINS; d++) {
      const out = await run("git", ["--git-dir", path.join(STATE, `domains/d${d}/repo.git`), "count-objects", "-v"]).catch(() => "");
      const v = Object.fromEntries(out.split("\n").filter(Boolean).map((l) => l.split(": ")).map(([k, x]) => [k, Number(x)]));
      summary.git[`d${d}`] = v;
      check("git gc --auto keeps each domain repository's loose objects bounded (gc.auto 6700)", (v.count ?? 0) <= 6700 + 500, `d${d}: ${out}`);
    }
  }

  // ---- restart: the same state reloads
  const tStart = Date.now();
  startKiln();
  summary.restart_to_healthz_ms = await waitHealthy();
  summary.restart_state_load = (fs.readFileSync(LOG, "utf8").split("==== kiln serve started").pop().match(/state: .*loaded in \d+ ms.*/) ?? [null])[0];
  note(`restarted in ${summary.restart_to_healthz_ms} ms (${Date.now() - tStart} ms); ${summary.restart_state_load}`);
  for (let d = 0; d < DOMAINS; d++) admin[`d${d}`] = await connect(tokens[d], `soak-admin2-d${d}`);
  for (const a of agents) {
    const st = (await tool(admin[a.domain], "candidate_status", { candidate: a.cand })).sc;
    const now = {
      latest: st.latest_build?.build_id ?? null, latest_status: st.latest_build?.status ?? null, latest_digest: st.latest_build?.image?.digest ?? null,
      latest_successful: st.latest_successful_build?.build_id ?? null, latest_successful_digest: st.latest_successful_build?.image?.digest ?? null,
      deployed: st.deployed_build?.build_id ?? null, deployed_digest: st.deployed_build?.digest ?? null,
    };
    check("after a restart, candidate_status shows the same latest build, latest successful build and deployed build",
      JSON.stringify(now) === JSON.stringify(finalState[a.key]), `${a.key}: before ${JSON.stringify(finalState[a.key])} after ${JSON.stringify(now)}`);
  }
  for (let d = 0; d < DOMAINS; d++) {
    const j = await (await fetch(`http://127.0.0.1:${PORT}/v1/domains/d${d}`, { headers: { Authorization: `Bearer ${operatorToken}` } })).json();
    check("after a restart, the operator API shows the same deployed build", (j.deployed?.build_id ?? null) === (operatorView[`d${d}`].deployed?.build_id ?? null),
      `d${d}: ${JSON.stringify(j.deployed)} vs ${JSON.stringify(operatorView[`d${d}`].deployed)}`);
  }
  // A build after the restart gets an id never used before.
  const a0 = agents[0];
  a0.client = admin[a0.domain];
  a0.broken = false;
  await a0.mutateAndPush(ITERATIONS + 1, false);
  const idsBefore = new Set(builds.keys());
  const post = await a0.build({}, "post-restart");
  check("a build after the restart succeeds with a build id never used before", post.sc.status === "succeeded" && !idsBefore.has(post.sc.build_id),
    `${post.sc.build_id} ${post.sc.status}`);
  for (const c of Object.values(admin)) await c.close();
  const stopped2 = await stopKiln(120_000);
  check("the restarted kiln stops with exit code 0", stopped2 && stopped2.code === 0, JSON.stringify(stopped2));
} catch (e) {
  note(`ERROR: ${e?.stack ?? e}`);
  note(`kiln log tail:\n${tail(LOG, 40)}`);
  check("the soak runs to the end", false, e?.message ?? e);
  exitCode = 3;
}

// ------------------------------------------------------------------------------ summary
summary.elapsed_s = Math.round((Date.now() - t0run) / 1000);
summary.counters = counters;
summary.latency_ms = {
  succeeded_p50: pct(latencies.succeeded, 50), succeeded_p95: pct(latencies.succeeded, 95), succeeded_n: latencies.succeeded.length,
  compile_error_p50: pct(latencies.failed, 50), compile_error_p95: pct(latencies.failed, 95), compile_error_n: latencies.failed.length,
  kiln_total_p50: pct(latencies.kiln_total_ms, 50), kiln_total_p95: pct(latencies.kiln_total_ms, 95),
};
summary.loadavg_end = fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
const failed = [...checks].filter(([, c]) => c.fail > 0);
summary.checks = { distinct: checks.size, passed: checks.size - failed.length, failed: failed.length,
  assertions: [...checks.values()].reduce((s, c) => s + c.pass + c.fail, 0) };
summary.check_counts = Object.fromEntries([...checks].map(([n, c]) => [n, { pass: c.pass, fail: c.fail }]));
summary.failures = Object.fromEntries(failed.map(([n, c]) => [n, { count: c.fail, examples: c.details }]));
if (failed.length && exitCode === 0) exitCode = 1;
await cleanup();
try { fs.mkdirSync(path.dirname(OUT_JSON), { recursive: true }); fs.writeFileSync(OUT_JSON, JSON.stringify(summary, null, 2) + "\n"); } catch {}

const L = summary.latency_ms;
const kb = (x) => (x == null ? "n/a" : `${(x / 1024).toFixed(1)} MiB`);
console.log(`
kiln soak: ${DOMAINS} domains x ${CANDIDATES} candidates x ${ITERATIONS} iterations (seed ${SEED}), ${summary.elapsed_s} s (loops ${summary.loop_s ?? "n/a"} s), load at end ${summary.loadavg_end}
builds:    ${summary.builds_total ?? 0} total; ${Object.entries(summary.builds_by_status ?? {}).map(([k, v]) => `${k} ${v}`).join(", ")}
           ${counters.pushes} pushes, ${counters.compile_errors} compile errors, ${counters.cancel_flows} cancel flows (${counters.cancel_ok} cancelled in flight, ${counters.cancel_after_end} already ended, ${counters.abort_flows} via AbortSignal, ${counters.abort_after_end} of them after the build ended),
           ${counters.dup_pairs} duplicate pairs (same build ${counters.dup_same}, superseded ${counters.dup_superseded}, other ${counters.dup_other}), ${counters.cache_hits} cache hits,
           ${counters.deploys} deploys (${counters.deploy_rolled_out} rolled out, ${counters.deploy_superseded} superseded)
latency:   succeeded build p50 ${L.succeeded_p50 ?? "n/a"} ms, p95 ${L.succeeded_p95 ?? "n/a"} ms (n=${L.succeeded_n}); compile error p50 ${L.compile_error_p50 ?? "n/a"} ms, p95 ${L.compile_error_p95 ?? "n/a"} ms (n=${L.compile_error_n})
           kiln-side timings.total_ms p50 ${L.kiln_total_p50 ?? "n/a"} ms, p95 ${L.kiln_total_p95 ?? "n/a"} ms (the client times above are request -> result over MCP)
kiln RSS:  start (after warm-up) ${kb(summary.rss_start_kb)}, end ${kb(summary.rss_end_kb)}, max sampled ${kb(summary.rss_max_kb)}
samples:   ${summary.sample_stats ? `${summary.sample_stats.n} every ${SAMPLE_S} s; RSS 2nd quarter ${kb(summary.sample_stats.rss_q2_kb)}, last quarter ${kb(summary.sample_stats.rss_q4_kb)} (${summary.sample_stats.rss_growth_pct} %); disk max ${summary.sample_stats.disk_max_mib} MiB${STORAGE_MAX_GB ? ` (budget ${Math.round(STORAGE_MAX_GB * 1024)} MiB)` : ""}; fds ${summary.sample_stats.fds_min}..${summary.sample_stats.fds_max}; threads ${summary.sample_stats.threads_min}..${summary.sample_stats.threads_max}; collections freed ${summary.sample_stats.gc_freed_mib ?? "n/a"} MiB` : "none"}
events:    ${(summary.events ?? []).map((e) => `${e.kind}@${e.t_s ?? "-"}s${e.restart_to_healthz_ms != null ? ` (up in ${e.restart_to_healthz_ms} ms)` : ""}${e.done ? "" : " NOT RUN"}`).join(", ") || "none"}; RSS growth after warm-up of the last kiln ${summary.sample_stats?.rss_window_growth_pct ?? "n/a"} % over ${summary.sample_stats?.window_s ?? "n/a"} s; chart ${summary.chart ?? "none"}
restart:   SIGTERM -> exit ${summary.stop_ms ?? "n/a"} ms; restart -> /healthz ${summary.restart_to_healthz_ms ?? "n/a"} ms; ${summary.restart_state_load ?? ""}
journal:   ${summary.state_check ? `state-check: ${summary.state_check.builds} builds, ${summary.state_check.journal_records} records, load ${summary.state_check.load_ms} ms` : "state-check did not run"}
checks:    ${summary.checks.passed}/${summary.checks.distinct} passed (${summary.checks.assertions} assertions), ${summary.checks.failed} failed`);
for (const [n, c] of failed) console.log(`  FAILED (${c.fail}x): ${n}\n    ${c.details.join("\n    ")}`);
console.log(`summary JSON: ${OUT_JSON}`);
process.exit(exitCode);

// ---- issue 19: samples
function procSample(pid) {
  const out = {};
  try {
    const st = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    out.rss_kb = Number(st.match(/^VmRSS:\s+(\d+)/m)?.[1] ?? 0);
    out.threads = Number(st.match(/^Threads:\s+(\d+)/m)?.[1] ?? 0);
    out.fds = fs.readdirSync(`/proc/${pid}/fd`).length;
  } catch {}
  return out;
}

async function diskSample() {
  // Bytes per kind, as kiln counts them (/metrics kiln_storage_bytes, on the metrics listener).
  const out = { disk_bytes: 0, disk_by_kind: {} };
  try {
    const r = await fetch(`http://127.0.0.1:${PORT + 1}/metrics`);
    const text = await r.text();
    for (const m of text.matchAll(/^kiln_storage_bytes\{domain="([^"]*)",kind="([^"]+)"\} (\d+)/gm)) {
      out.disk_by_kind[m[2]] = (out.disk_by_kind[m[2]] ?? 0) + Number(m[3]);
      out.disk_bytes += Number(m[3]);
    }
    const freed = [...text.matchAll(/^kiln_storage_collected_bytes_total\{[^}]*\} (\d+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
    out.gc_freed_bytes = freed;
  } catch {}
  try { out.du_bytes = Number((await run("du", ["-sx", "--block-size=1", STATE])).split(/\s/)[0]); } catch {}
  return out;
}

function checkSamples() {
  const xs = summary.samples ?? [];
  if (xs.length < 4) return;
  const q = Math.floor(xs.length / 4);
  const mean = (a) => a.reduce((s, x) => s + (x.rss_kb ?? 0), 0) / Math.max(1, a.length);
  const q2 = mean(xs.slice(q, 2 * q)), q4 = mean(xs.slice(3 * q));
  const disk = xs.map((x) => x.du_bytes ?? x.disk_bytes ?? 0);
  summary.sample_stats = {
    n: xs.length,
    rss_q2_kb: Math.round(q2), rss_q4_kb: Math.round(q4),
    rss_growth_pct: Math.round(((q4 - q2) / Math.max(1, q2)) * 1000) / 10,
    disk_max_mib: Math.round(Math.max(...disk) / 1048576),
    fds_min: Math.min(...xs.map((x) => x.fds ?? 0)), fds_max: Math.max(...xs.map((x) => x.fds ?? 0)),
    threads_min: Math.min(...xs.map((x) => x.threads ?? 0)), threads_max: Math.max(...xs.map((x) => x.threads ?? 0)),
    gc_freed_mib: Math.round((xs[xs.length - 1].gc_freed_bytes ?? 0) / 1048576),
  };
  if (STORAGE_MAX_GB) {
    const cap = STORAGE_MAX_GB * 2 ** 30 * DISK_SLACK;
    const over = xs.filter((x) => (x.du_bytes ?? x.disk_bytes ?? 0) > cap);
    check(`disk of the state directory stays under the budget (x${DISK_SLACK}) at every sample`, over.length === 0,
      over.slice(0, 5).map((x) => `t=${x.t_s}s ${Math.round((x.du_bytes ?? 0) / 1048576)} MiB`).join(", "));
  }
  // The last kiln process after its first third (warm-up): least-squares growth of RSS, fds and
  // threads over the window, in % of their mean.
  const last = xs.filter((x) => x.epoch === xs[xs.length - 1].epoch);
  const win = last.slice(Math.floor(last.length / 3));
  Object.assign(summary.sample_stats, {
    window_s: win.length ? win[win.length - 1].t_s - win[0].t_s : 0, window_n: win.length,
    rss_window_growth_pct: growthPct(win, (x) => x.rss_kb ?? 0),
    rss_window_min_kb: Math.min(...win.map((x) => x.rss_kb ?? 0)), rss_window_max_kb: Math.max(...win.map((x) => x.rss_kb ?? 0)),
    fds_window_min: Math.min(...win.map((x) => x.fds ?? 0)), fds_window_max: Math.max(...win.map((x) => x.fds ?? 0)),
    threads_window_min: Math.min(...win.map((x) => x.threads ?? 0)), threads_window_max: Math.max(...win.map((x) => x.threads ?? 0)),
  });
  if (RSS_FLAT_PCT !== null) {
    const g = summary.sample_stats.rss_window_growth_pct;
    check(`kiln RSS levels off (growth over the last kiln process after warm-up within ${RSS_FLAT_PCT} %)`, g !== null && g <= RSS_FLAT_PCT,
      `${g} % over ${summary.sample_stats.window_s} s (${summary.sample_stats.rss_window_min_kb}..${summary.sample_stats.rss_window_max_kb} kB)`);
    const st = summary.sample_stats;
    // fds/threads: what a sample finds varies with the builds in flight; a leak grows past that.
    check("kiln's open fds do not grow after warm-up (no fd leak)", growthPct(win, (x) => x.fds ?? 0) <= 50 && st.fds_window_max <= st.fds_window_min + 200,
      `${st.fds_window_min}..${st.fds_window_max}, growth ${growthPct(win, (x) => x.fds ?? 0)} %`);
    check("kiln's threads do not grow after warm-up", st.threads_window_max <= st.threads_window_min + 64, `${st.threads_window_min}..${st.threads_window_max}`);
  }
}

async function buildahContainers() {
  // Layered builds use no buildah; if a candidate storage exists anyway, it must hold no working container.
  const found = [];
  const base = path.join(STATE, "domains");
  for (const d of fs.existsSync(base) ? fs.readdirSync(base) : []) {
    const cdir = path.join(base, d, "candidates");
    for (const c of fs.existsSync(cdir) ? fs.readdirSync(cdir) : []) {
      const st = path.join(cdir, c, "storage");
      if (!fs.existsSync(st)) continue;
      try {
        const out = await run("buildah", ["--root", path.join(st, "root"), "--runroot", path.join(st, "runroot"), "containers", "-q"]);
        for (const l of out.split("\n").filter(Boolean)) found.push(`${d}/${c}: ${l}`);
      } catch (e) { found.push(`${d}/${c}: buildah containers failed: ${e.message}`); }
    }
  }
  return found;
}

// ---- issue 19: restart helpers
/// `kiln state-check --builds` of the state directory (kiln copies it first): its JSON, or null.
async function stateCheck() {
  try {
    const r = await execFileP(KILN, ["state-check", "--state-dir", STATE, "--builds"], { maxBuffer: 256 << 20 })
      .then((x) => x, (e) => ({ stdout: e.stdout ?? "" }));
    return JSON.parse(r.stdout);
  } catch { return null; }
}
/// Ids of the newest `n` builds the client saw per candidate (older ones compaction may drop).
function recentPerCandidate(n) {
  const per = new Map();
  const out = new Set();
  for (const rec of [...builds.values()].sort((x, y) => y.obs[0].seq - x.obs[0].seq)) {
    const k = `${rec.domain}/${rec.candidate}`;
    per.set(k, (per.get(k) ?? 0) + 1);
    if (per.get(k) <= n) out.add(rec.id);
  }
  return out;
}
/// Mounts in this (the host's) mount namespace below the run's directory or the local target's
/// staging directory.
function leftMounts() {
  try {
    return fs.readFileSync("/proc/self/mountinfo", "utf8").split("\n")
      .filter((l) => l.includes(W) || l.includes("/run/kiln-deploy/")).map((l) => l.slice(0, 200));
  } catch { return []; }
}
/// Least-squares growth of y over the samples' time span, in % of the mean of y.
function growthPct(xs, y) {
  const n = xs.length;
  if (n < 3) return null;
  const mt = xs.reduce((s, x) => s + x.t_s, 0) / n, my = xs.reduce((s, x) => s + y(x), 0) / n;
  let sxy = 0, sxx = 0;
  for (const x of xs) { sxy += (x.t_s - mt) * (y(x) - my); sxx += (x.t_s - mt) ** 2; }
  if (!sxx || !my) return 0;
  const span = xs[n - 1].t_s - xs[0].t_s;
  return Math.round(((sxy / sxx) * span / my) * 1000) / 10;
}
/// The PNG chart of the samples (gnuplot): RSS, disk of the state directory and per kind against
/// the budget, fds and threads, restart events as vertical lines.
async function writeChart(xs, events) {
  if (!OUT_PNG || xs.length < 2) return null;
  const kinds = [...new Set(xs.flatMap((x) => Object.keys(x.disk_by_kind ?? {})))].sort();
  const dat = path.join(W, "soak_samples.dat");
  const mib = (b) => ((b ?? 0) / 1048576).toFixed(2);
  fs.writeFileSync(dat, xs.map((x) => [x.t_s, mib((x.rss_kb ?? 0) * 1024), mib(x.du_bytes ?? x.disk_bytes), x.fds ?? 0, x.threads ?? 0,
    ...kinds.map((k) => mib(x.disk_by_kind?.[k]))].join(" ")).join("\n") + "\n");
  const arrows = (events ?? []).filter((e) => e.t_s).map((e, i) =>
    `set arrow ${i + 1} from ${e.t_s}, graph 0 to ${e.t_s}, graph 1 nohead dt 2 lc rgb "${e.kind === "kill" ? "red" : "blue"}"`).join("\n");
  const budget = STORAGE_MAX_GB ? `, ${STORAGE_MAX_GB * 1024} title "budget (storage.max_gb)" lw 2 lc rgb "red"` : "";
  const script = `set terminal pngcairo size 1200,1100 font ",10" noenhanced
set output "${OUT_PNG}"
set multiplot layout 3,1 title "kiln soak: ${DOMAINS} domains x ${CANDIDATES} candidates, ${builds.size} builds (dashed: red kill -9 restart, blue registry restart)"
set grid
set xlabel "time (s)"
${arrows}
set ylabel "kiln VmRSS (MiB)"
set yrange [0:*]
plot "${dat}" using 1:2 with lines lw 2 title "RSS"
set ylabel "disk (MiB)"
plot "${dat}" using 1:3 with lines lw 2 title "state directory (du)"${kinds.map((k, i) => `, "" using 1:${6 + i} with lines title "${k}"`).join("")}${budget}
set ylabel "count"
plot "${dat}" using 1:4 with lines lw 2 title "open fds", "" using 1:5 with lines lw 2 title "threads"
unset multiplot
`;
  try {
    fs.mkdirSync(path.dirname(OUT_PNG), { recursive: true });
    const f = path.join(W, "soak.gp");
    fs.writeFileSync(f, script);
    await execFileP("gnuplot", [f]);
    return OUT_PNG;
  } catch (e) { note(`chart not written: ${e.message}`); return null; }
}
