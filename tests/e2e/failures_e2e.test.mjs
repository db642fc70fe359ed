// Issue 16, end to end: every failure reaches the agent with its cause and the next step. The
// real `kiln serve` (bubblewrap, rootless buildah, docker-registry with htpasswd auth, git
// smart HTTP) driven by the official MCP TypeScript SDK client, plus the fake Kubernetes API
// server (tests/fake_k8s/) for deploys. One scenario per error kind: compile, test,
// containerfile (syntax error, missing Containerfile), base_image, output_missing, timeout,
// cancelled, superseded, not_pushed, invalid_argument, deploy_crash (exit 1 and OOMKilled),
// deploy_unready, deploy_image, infrastructure (the registry stopped). Each asserts isError,
// error_kind, a non-empty next_step, repository-relative diagnostics where a compiler spoke,
// and (after all) that no result contains the state directory, the kubeconfig path, the API
// server's address or the registry's URL.
//
//   tests/e2e/run_e2e.sh build/app/kiln failures_e2e.test.mjs
// Ports: registry 5190, kiln 18780, fake API server 16480. Runs as root (bubblewrap, rootless
// buildah for the build user). One kiln and one set of base images for all scenarios.
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
import { writeFakeApiFiles, kubeconfig } from "./fake_k8s.mjs";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = path.resolve(process.env.KILN ?? path.join(root, "build/app/kiln"));
const REG_PORT = 5190;
const PORT = 18780;
const K8S_PORT = 16480;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-failures-e2e-"));
const regDir = path.join(dir, "registry");
const stateDir = path.join(dir, "state");
const kubeconfigPath = path.join(dir, "kubeconfig");
const PUBLIC_URL = `http://kiln.test:${PORT}`;  // what agents are told to push to
const k8sToken = rnd();
const tokens = {};
const results = [];  // every tool result, as the client received it
let kiln, fake;
let kilnLog = "";
let busybox;  // sha256:... of kiln/busybox:1
const clients = {};

function rnd() { return crypto.randomBytes(24).toString("hex"); }
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const token = (domain) => (tokens[domain] ??= rnd());
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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

// ------------------------------------------------------------------------------ agent side

function push(domain, branch, mutate) {
  return pushCandidate(dir, { port: PORT, domain, branch, token: token(domain), mutate: (w) => {
    fs.rmSync(path.join(w, "out"), { recursive: true, force: true });
    if (mutate) mutate(w);
  } });
}

const write = (rel, text) => (w) => {
  fs.mkdirSync(path.dirname(path.join(w, rel)), { recursive: true });
  fs.writeFileSync(path.join(w, rel), text);
};
const containerfile = (text) => write("Containerfile", text);
const all = (...fns) => (w) => { for (const f of fns) f(w); };

async function client(domain) {
  if (clients[domain]) return clients[domain];
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token(domain)}` } },
  });
  const c = new Client({ name: `kiln-failures-e2e-${domain}`, version: "1.0.0" });
  await c.connect(transport);
  clients[domain] = c;
  return c;
}

const CALL = { timeout: 300_000, resetTimeoutOnProgress: true };

// One MCP tool call: the structured content plus isError (the text block must be the same).
async function call(domain, name, args) {
  const c = await client(domain);
  const r = await c.callTool({ name, arguments: args }, undefined, CALL);
  results.push({ name, text: JSON.stringify(r) });
  assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent, "text block = structured content");
  return { ...r.structuredContent, isError: r.isError };
}

// The shape every failure has; `kind` is the expected error_kind.
function assertFailure(r, kind) {
  const shown = JSON.stringify(r).slice(0, 4000);
  assert.equal(r.isError, true, `isError: ${shown}`);
  assert.equal(r.error_kind, kind, `error_kind: ${shown}`);
  assert.equal(typeof r.error, "string", shown);
  assert.ok(r.error.length > 0, `a non-empty error: ${shown}`);
  assert.equal(typeof r.next_step, "string", shown);
  assert.ok(r.next_step.length > 0, `a non-empty next_step: ${shown}`);
}

// Diagnostics a compiler printed are relative to the repository root.
function assertRepoRelative(diags, file) {
  assert.ok(Array.isArray(diags) && diags.length > 0, `diagnostics: ${JSON.stringify(diags)}`);
  for (const d of diags) {
    if (!d.file) continue;
    assert.ok(!d.file.startsWith("/"), `repo-relative path: ${d.file}`);
    assert.ok(!d.file.startsWith("./"), `no ./ prefix: ${d.file}`);
  }
  assert.ok(diags.some((d) => d.file === file), `a diagnostic in ${file}: ${JSON.stringify(diags)}`);
}

const build = (domain, candidate, extra = {}) => call(domain, "build_candidate", { candidate, ...extra });

async function settled(domain, candidate) {
  return until(`${domain}/${candidate} to finish`, async () => {
    const s = await call(domain, "candidate_status", { candidate });
    const b = s.latest_build;
    return b && ["succeeded", "failed", "cancelled", "interrupted"].includes(b.status) ? b : null;
  }, 120_000, 250);
}

// ------------------------------------------------------------------------------ set-up

const layered = (domain, command, deploy) => ({
  token_sha256: [sha(token(domain))],
  build: { mode: "layered", timeout_s: 120, layered: {
    base_image: `127.0.0.1:${REG_PORT}/kiln/busybox@${busybox}`,
    command,
    env: { GOFLAGS: "-buildvcs=false" },
    caches: { GOCACHE: "go-build" },
    outputs: [{ from: "out/app", to: "/app" }],
    entrypoint: ["/app"],
  } },
  image: { registry: "local", repository: `failures/${domain}` },
  ...(deploy ? { deploy } : {}),
});
const trivial = ["/bin/sh", "-c", "mkdir -p out && echo app > out/app"];
const k8s = (deployment, extra = {}) => ({ type: "kubernetes", kubernetes: { namespace: "loop", deployment, container: "app",
  kubeconfig: kubeconfigPath, rollout_timeout_s: 30, unready_timeout_s: 3, ...extra } });

function seedDeployment(name) {
  return {
    apiVersion: "apps/v1", kind: "Deployment",
    metadata: { name, namespace: "loop", labels: { app: name } },
    spec: {
      replicas: 1, progressDeadlineSeconds: 30,
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name } },
        spec: { containers: [{ name: "app", image: `127.0.0.1:${REG_PORT}/seed/base@sha256:${"1".repeat(64)}`,
          resources: { limits: { memory: "64Mi" } } }] } },
    },
  };
}

before(async () => {
  sh(path.join(root, "scripts/registry.sh"), ["start", "--dir", regDir, "--port", String(REG_PORT)]);
  const out = sh(path.join(root, "scripts/base_images.sh"), ["--registry", `127.0.0.1:${REG_PORT}`, "--authfile", path.join(regDir, "auth.json")]);
  busybox = /^busybox=.*@(sha256:[0-9a-f]{64})$/m.exec(out)?.[1];
  assert.ok(busybox, `base_images.sh printed the busybox digest: ${out}`);

  writeFakeApiFiles(dir, [k8sToken]);
  fake = spawn("python3", [path.join(root, "tests/fake_k8s/fake_apiserver.py"), "--port", String(K8S_PORT),
    "--cert", path.join(dir, "api.crt"), "--key", path.join(dir, "api.key"), "--tokens", path.join(dir, "tokens.json"),
    "--step-ms", "100"], { stdio: ["ignore", "inherit", "inherit"] });
  const curl = (...a) => sh("curl", ["-sf", "--cacert", path.join(dir, "ca.crt"), ...a]);
  await until("the fake API server", async () => { try { curl(`https://127.0.0.1:${K8S_PORT}/_fake/stats`); return true; } catch { return false; } }, 20_000, 100);
  curl("-X", "POST", "-H", "Content-Type: application/json", "--data",
    JSON.stringify({ deployments: ["crash", "oom", "unready", "pullfail"].map((n) => seedDeployment(`d-${n}`)) }),
    `https://127.0.0.1:${K8S_PORT}/_fake/state`);
  fs.writeFileSync(kubeconfigPath, kubeconfig(dir, K8S_PORT, k8sToken), { mode: 0o600 });

  const containerfileDomain = (domain, timeout, deploy) => ({
    token_sha256: [sha(token(domain))],
    build: { mode: "containerfile", timeout_s: timeout },
    image: { registry: "local", repository: `failures/${domain}` },
    ...(deploy ? { deploy } : {}),
  });
  const config = path.join(dir, "kiln.json");
  fs.writeFileSync(config, JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: stateDir, public_url: PUBLIC_URL, metrics_listen: "off" },
    scheduler: { max_parallel_builds: 2 },
    registries: { local: { url: `http://127.0.0.1:${REG_PORT}`, auth_file: path.join(regDir, "auth.json") } },
    domains: {
      // A leftover kubernetes block whose kubeconfig is gone: deploy.type "none" does not use it.
      cf: containerfileDomain("cf", 120, { type: "none", kubernetes: { namespace: "loop", deployment: "gone",
        container: "app", kubeconfig: path.join(dir, "no-such-kubeconfig") } }),
      ct: containerfileDomain("ct", 5),
      lg: layered("lg", ["go", "build", "-o", "out/app", "./cmd/epp"]),
      lo: layered("lo", ["/bin/sh", "-c", "mkdir -p out && echo built elsewhere > out/other"]),
      // The fake's pods behave by the image's repository name (crash, oom, unready, pullfail).
      crash: layered("crash", trivial, k8s("d-crash")),
      oom: layered("oom", trivial, k8s("d-oom")),
      unready: layered("unready", trivial, k8s("d-unready")),
      pullfail: layered("pullfail", trivial, k8s("d-pullfail")),
    },
  }, null, 1));
  const check = spawnSync(KILN, ["check-config", "--config", config], { encoding: "utf8" });
  assert.equal(check.status, 0, `check-config: ${check.stdout}${check.stderr}`);
  assert.match(check.stdout, /domains\.cf\.deploy\.kubernetes: ignored/, "check-config warns about the leftover block");

  kiln = spawn(KILN, ["serve", "--config", config, "--grace", "5"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  await until("kiln /healthz", async () => {
    assert.equal(kiln.exitCode, null, `kiln exited during start-up: ${kilnLog}`);
    try { return (await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok; } catch { return false; }
  }, 60_000, 100);
});

after(async () => {
  for (const c of Object.values(clients)) await c.close().catch(() => {});
  const problems = [];
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await exited;
  }
  if (fake && fake.exitCode === null) fake.kill("SIGTERM");
  try { sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]); } catch {}
  const left = spawnSync("pgrep", ["-af", dir], { encoding: "utf8" }).stdout.trim();
  if (left) problems.push(`processes of the test survive: ${left}`);
  for (const t of [...Object.values(tokens), k8sToken])
    if (kilnLog.includes(t)) problems.push("a token is in kiln's log");
  if (process.env.KILN_E2E_KEEP) console.log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(problems, []);
});

// ------------------------------------------------------------------------------ scenarios

test("the server instructions give this domain's exact git push command, never a token", async () => {
  const c = await client("cf");
  const text = c.getInstructions() ?? "";
  assert.ok(text.includes(`${PUBLIC_URL}/git/cf.git`), text);
  assert.ok(text.includes(`http.extraHeader="Authorization: Bearer <your token>"`), text);
  assert.ok(!text.includes(token("cf")), "the token itself is never in the instructions");
  assert.match(text, /deploy_candidate/);
});

test("not_pushed: building a branch nobody pushed names the exact push command", async () => {
  const r = await build("cf", "never-pushed");
  assertFailure(r, "not_pushed");
  assert.ok(r.next_step.includes(`git -c http.extraHeader="Authorization: Bearer <your token>" push ${PUBLIC_URL}/git/cf.git HEAD:refs/heads/never-pushed`), r.next_step);
  assert.equal(r.error, "branch 'never-pushed' not found in domain repository");
  // A candidate kiln has never heard of: isError, with the known candidates listed.
  const st = await call("cf", "candidate_status", { candidate: "never-heard-of" });
  assertFailure(st, "not_pushed");
  assert.match(st.error, /known candidates: .*'never-pushed'/, st.error);
});

test("invalid_argument: bad names, ids and sizes are refused with what to correct", async () => {
  for (const [tool, args] of [["build_candidate", { candidate: "../etc" }], ["build_candidate", { candidate: "ok", commit: "XYZ" }],
    ["build_log", { build_id: "b-0000000000000000", tail: 0 }], ["build_log", { build_id: "not-an-id" }],
    ["build_candidate", { candidate: "ok", surprise: 1 }]]) {
    const r = await call("cf", tool, args);
    assertFailure(r, "invalid_argument");
  }
});

test("compile (Containerfile): the Go compiler's errors with repository-relative paths", async () => {
  push("cf", "compile", (w) => {
    const f = path.join(w, "cmd/epp/main.go");
    fs.writeFileSync(f, fs.readFileSync(f, "utf8").replace("func main() {", "func main() {\n\tvar _ = notDeclaredAnywhere"));
  });
  const r = await build("cf", "compile");
  assertFailure(r, "compile");
  assertRepoRelative(r.diagnostics, "cmd/epp/main.go");
  const d = r.diagnostics.find((x) => x.file === "cmd/epp/main.go");
  assert.match(d.message, /undefined: notDeclaredAnywhere/);
  assert.match(r.error, /cmd\/epp\/main\.go:\d+:\d+: undefined: notDeclaredAnywhere/, r.error);
  assert.match(r.error, /RUN .*go build/, "the error names the failing instruction");
  // The builder's message is the first line of build_log; tail reads the end.
  const log = await call("cf", "build_log", { build_id: r.build_id });
  assert.equal(log.isError, false);
  assert.equal(log.text.split("\n")[0], `kiln: ${r.error}`);
  const tail = await call("cf", "build_log", { build_id: r.build_id, tail: 300 });
  assert.equal(tail.isError, false);
  assert.ok(Buffer.byteLength(tail.text) <= 300 + 3, `tail is bounded: ${Buffer.byteLength(tail.text)}`);
  assert.ok(log.text.endsWith(tail.text), "tail is the end of the log");
});

test("compile (layered): /workspace paths come out repository-relative", async () => {
  push("lg", "compile", write("internal/pool/broken.go", "package pool\n\nfunc Broken() int { return \"text\" }\n"));
  const r = await build("lg", "compile");
  assertFailure(r, "compile");
  assertRepoRelative(r.diagnostics, "internal/pool/broken.go");
});

test("test: a failing `go test` in a RUN step names the step, its exit code and the test file", async () => {
  push("cf", "tests", all(
    containerfile("ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/go-builder:1.19\nWORKDIR /src\nCOPY . .\nRUN go test ./...\n"),
    write("internal/fails/fails_test.go",
      "package fails\n\nimport \"testing\"\n\nfunc TestAnswer(t *testing.T) {\n\tif got := 1 + 1; got != 3 {\n\t\tt.Fatalf(\"got %d want 3\", got)\n\t}\n}\n")));
  const r = await build("cf", "tests");
  assertFailure(r, "test");
  assert.match(r.error, /RUN go test \.\/\.\.\./, r.error);
  assert.match(r.error, /exit code 1/, r.error);
  assert.match(r.error, /step \d+\/\d+/, r.error);
  assertRepoRelative(r.diagnostics, "internal/fails/fails_test.go");
});

test("containerfile: a syntax error and a missing Containerfile", async () => {
  push("cf", "syntax", containerfile("ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUNN echo hello\n"));
  const s = await build("cf", "syntax");
  assertFailure(s, "containerfile");
  push("cf", "nofile", (w) => fs.rmSync(path.join(w, "Containerfile")));
  const m = await build("cf", "nofile");
  assertFailure(m, "containerfile");
  assert.match(m.error, /Containerfile/);
});

test("base_image: a FROM outside the domain's registry", async () => {
  push("cf", "foreign", containerfile("FROM docker.io/library/alpine:3.19\nRUN true\n"));
  const r = await build("cf", "foreign");
  assertFailure(r, "base_image");
  assert.match(r.error, /docker\.io\/library\/alpine:3\.19/);
});

test("output_missing: a layered build that does not write its declared output", async () => {
  push("lo", "c1");
  const r = await build("lo", "c1");
  assertFailure(r, "output_missing");
  assert.match(r.error, /out\/app/);
});

test("timeout: a RUN step that outlives the domain's timeout", async () => {
  push("ct", "slow", containerfile("ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN sleep 600\n"));
  const r = await build("ct", "slow");
  assertFailure(r, "timeout");
});

test("cancelled and superseded (the newer build named)", async () => {
  const slow = containerfile("ARG KILN_REGISTRY\nFROM ${KILN_REGISTRY}/kiln/busybox:1\nRUN sleep 600\n");
  push("cf", "cancel-me", slow);
  const started = await build("cf", "cancel-me", { wait: false });
  assert.match(started.build_id, /^b-[0-9a-f]{16}$/);
  const c = await call("cf", "cancel_build", { build_id: started.build_id });
  assert.equal(c.isError, false, JSON.stringify(c));
  const cancelled = await settled("cf", "cancel-me");
  assert.equal(cancelled.status, "cancelled");
  assert.equal(cancelled.error_kind, "cancelled");
  assert.ok(cancelled.next_step.length > 0);

  push("cf", "twice", slow);
  const first = build("cf", "twice");  // waits: its result is the superseded failure
  await until("the first build to start", async () => (await call("cf", "candidate_status", { candidate: "twice" })).latest_build);
  push("cf", "twice", all(slow, write("NOTE", "a newer commit\n")));
  const second = await build("cf", "twice", { wait: false });
  const r = await first;
  assert.notEqual(second.build_id, r.build_id);
  assertFailure(r, "superseded");
  assert.ok(r.error.includes(second.build_id), `the error names the newer build: ${r.error}`);
  const c2 = await call("cf", "cancel_build", { build_id: second.build_id });
  assert.equal(c2.isError, false, JSON.stringify(c2));
  const gone = await settled("cf", "twice");
  assert.equal(gone.error_kind, "cancelled");
});

test("deploy_crash: a container that exits 1 reports its exit code and last log lines", async () => {
  push("crash", "c1");
  push("crash", "c2", write("NOTE", "two\n"));
  const b1 = await build("crash", "c1");
  assert.equal(b1.status, "succeeded", JSON.stringify(b1));
  const b2 = await build("crash", "c2");
  assert.equal(b2.status, "succeeded", JSON.stringify(b2));
  // Another candidate's build names that candidate; unknown candidates list the known ones.
  const wrong = await call("crash", "deploy_candidate", { candidate: "c2", build_id: b1.build_id });
  assertFailure(wrong, "invalid_argument");
  assert.match(wrong.error, new RegExp(`build ${b1.build_id} belongs to candidate 'c1'.*candidate=c1`), wrong.error);
  const ghost = await call("crash", "deploy_candidate", { candidate: "ghost" });
  assertFailure(ghost, "not_pushed");
  assert.match(ghost.error, /'c1'/);
  assert.match(ghost.error, /'c2'/);

  // rollout_timeout_s is 30: a classified crash (not a Timeout) shows it failed fast.
  const r = await call("crash", "deploy_candidate", { candidate: "c1" });
  assertFailure(r, "deploy_crash");
  assert.equal(r.details.exit_code, 1, JSON.stringify(r.details));
  assert.ok(r.details.log_tail.length > 0 && r.details.log_tail.length <= 40, JSON.stringify(r.details));
  assert.match(r.details.log_tail.at(-1), /panic/);
  assert.match(r.error, /exited with code 1/);
});

test("deploy_crash: an OOM-killed container says OOMKilled and its memory limit", async () => {
  push("oom", "c1");
  assert.equal((await build("oom", "c1")).status, "succeeded");
  const r = await call("oom", "deploy_candidate", { candidate: "c1" });
  assertFailure(r, "deploy_crash");
  assert.equal(r.details.reason, "OOMKilled", JSON.stringify(r.details));
  assert.equal(r.details.exit_code, 137);
  assert.equal(r.details.memory_limit, "64Mi");
  assert.ok(r.details.log_tail.length > 0, JSON.stringify(r.details));
  assert.match(r.error, /OOMKilled|out of memory/i);
});

test("deploy_unready: a pod that never passes its readiness probe", async () => {
  push("unready", "c1");
  assert.equal((await build("unready", "c1")).status, "succeeded");
  const r = await call("unready", "deploy_candidate", { candidate: "c1" });
  assertFailure(r, "deploy_unready");
  assert.match(r.details.probe_message ?? "", /Readiness probe failed/, JSON.stringify(r.details));
});

test("deploy_image: an image the cluster cannot pull", async () => {
  push("pullfail", "c1");
  assert.equal((await build("pullfail", "c1")).status, "succeeded");
  const r = await call("pullfail", "deploy_candidate", { candidate: "c1" });
  assertFailure(r, "deploy_image");
  assert.match(r.reason, /ImagePullBackOff|ErrImagePull/);
});

test("infrastructure: the registry stopped is not the agent's code", async () => {
  push("crash", "c3", write("NOTE", "three\n"));
  sh(path.join(root, "scripts/registry.sh"), ["stop", "--dir", regDir]);
  const r = await build("crash", "c3");
  assertFailure(r, "infrastructure");
  assert.match(r.next_step, /^not your code/);
});

test("no result shows the state directory, the kubeconfig path, the API server or the registry URL", () => {
  assert.ok(results.length > 20, `results were checked (${results.length})`);
  const forbidden = [dir, stateDir, kubeconfigPath, `127.0.0.1:${K8S_PORT}`, `https://127.0.0.1:${K8S_PORT}`,
    `http://127.0.0.1:${REG_PORT}`, k8sToken, ...Object.values(tokens)];
  for (const { name, text } of results)
    for (const f of forbidden) assert.ok(!text.includes(f), `a ${name} result contains ${f}: ${text.slice(0, 2000)}`);
});
