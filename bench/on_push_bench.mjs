// The loop of bench/on_push_bench.sh (see there): `kiln serve`, then N interleaved iterations of
// mutate -> host incremental go build -> git push -> DELAY_MS -> build_candidate (joins the
// build the push started). Prints one JSON line.
import { spawn, execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import path from "node:path";
import fs from "node:fs";

const { KILN, W, TOKEN, ROOT, MODE } = process.env;
const N = Number(process.env.N), DELAY_MS = Number(process.env.DELAY_MS), PORT = Number(process.env.PORT);
const sdk = path.join(ROOT, "tests/e2e/node_modules/@modelcontextprotocol/sdk/dist/esm");
const { Client } = await import(pathToFileURL(path.join(sdk, "client/index.js")).href);
const { StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(sdk, "client/streamableHttp.js")).href);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const src = path.join(W, "src");
const run = (cmd, args, opts = {}) => execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts }).toString();
const git = (...a) => run("git", ["-c", "user.name=bench", "-c", "user.email=b@x", ...a], { cwd: src });
const hostEnv = { ...process.env, GOCACHE: path.join(W, "host-gocache"), CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" };
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor((s.length - 1) / 2)]; };

const kiln = spawn(KILN, ["serve", "--config", path.join(W, "kiln.json"), "--grace", "5"], { stdio: ["ignore", "ignore", "pipe"] });
let kilnLog = "";
kiln.stderr.on("data", (d) => { kilnLog = (kilnLog + d).slice(-20000); });
try {
  for (let i = 0; ; i++) {
    if (kiln.exitCode !== null) throw new Error(`kiln exited: ${kilnLog}`);
    try { if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) break; } catch {}
    if (i > 600) throw new Error("kiln did not start");
    await sleep(100);
  }
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${PORT}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } },
  });
  const client = new Client({ name: "kiln-onpush-bench", version: "1.0.0" });
  await client.connect(transport);
  const build = async () => {
    const t0 = Date.now();
    const r = await client.callTool({ name: "build_candidate", arguments: { candidate: "c1" } }, undefined, { timeout: 900_000 });
    const s = r.structuredContent;
    if (s.status !== "succeeded") throw new Error(`build failed: ${JSON.stringify(s).slice(0, 2000)}`);
    return { ...s, call_ms: Date.now() - t0 };
  };
  const push = () => {
    git("add", "-A");
    git("commit", "-qm", "change", "--allow-empty");
    run("git", ["push", "-q", "-f", `http://127.0.0.1:${PORT}/git/bench.git`, "HEAD:refs/heads/c1"], {
      cwd: src,
      env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "http.extraHeader",
        GIT_CONFIG_VALUE_0: `Authorization: Bearer ${TOKEN}` },
    });
  };
  git("init", "-q");
  run("go", ["build", "-o", path.join(W, "host-app"), "./cmd/app"], { cwd: src, env: hostEnv });  // warm host
  push();
  await build();  // warm kiln (joins the first push's build)
  const host = [], waited = [], call = [], total = [], pushMs = [];
  let joined = 0, onPush = 0;
  for (let i = 1; i <= N; i++) {
    run("python3", [path.join(ROOT, "bench/gen_go_service.py"), "--mutate", String(i), "--out", src]);
    let t0 = Date.now();
    run("go", ["build", "-o", path.join(W, "host-app"), "./cmd/app"], { cwd: src, env: hostEnv });
    host.push(Date.now() - t0);
    t0 = Date.now();
    push();
    pushMs.push(Date.now() - t0);
    await sleep(DELAY_MS);
    const r = await build();
    waited.push(r.timings.waited_ms);
    call.push(r.call_ms);
    total.push(r.timings.total_ms);
    joined += r.joined ? 1 : 0;
    onPush += r.started_on_push ? 1 : 0;
  }
  await client.close();
  const H = median(host), Wt = median(waited), C = median(call);
  const ratio = (x) => Math.round((x / H) * 1000) / 1000;
  const load = Number(fs.readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
  console.log(JSON.stringify({
    benchmark: "on_push", mode: MODE, n: N, delay_ms: DELAY_MS,
    host_incremental_ms: H, waited_ms: Wt, call_ms: C, push_ms: median(pushMs), build_total_ms: median(total),
    ratio_waited: ratio(Wt), ratio_call: ratio(C), target_ratio: 0.1, pass: ratio(Wt) <= 0.1,
    joined, started_on_push: onPush, samples: { host, waited, call, total }, loadavg: load,
  }));
} finally {
  if (kiln.exitCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await exited;
  }
}
