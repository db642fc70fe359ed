// HTTP transport caps (docs/security.md, "Limits of the HTTP transport"): unauthenticated
// bodies are refused from the headers, so they never reach kiln's memory.
//
// Starts `kiln serve`, then sends 8 concurrent unauthenticated POSTs of 60 MB each (4 to
// /git/<domain>.git/git-receive-pack, 4 to /mcp) while a legitimate domain keeps calling
// candidate_status. Each POST must get 401; kiln's peak RSS (VmHWM) must grow by less than
// 100 MB and stay under 300 MB; every candidate_status call must answer. Prints the RSS numbers.
//
//   KILN=build/app/kiln node --test tests/e2e/unauth_bodies.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "../..");
const KILN = process.env.KILN ?? path.join(root, "build/app/kiln");
const PORT = Number(process.env.KILN_E2E_UNAUTH_PORT ?? 18731);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-unauth-"));
const token = crypto.randomBytes(24).toString("hex");
const sha = (s) => crypto.createHash("sha256").update(s).digest("hex");
const BODY_BYTES = 60 * 1000 * 1000;
const CHUNK = Buffer.alloc(1 << 20, 0x61);
let kiln;
let kilnLog = "";

function vmHwmKiB(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m[1]);
}

// One unauthenticated POST of BODY_BYTES, written as fast as the socket takes it. Resolves with
// the status as soon as the answer arrives (the rest of the body is then abandoned) and with
// how many bytes had been handed to the socket by then.
function hugePost(p, headers) {
  return new Promise((resolve) => {
    let sent = 0;
    let done = false;
    const finish = (v) => { if (!done) { done = true; resolve(v); } };
    const req = http.request({ host: "127.0.0.1", port: PORT, path: p, method: "POST", agent: false,
      headers: { "Content-Length": String(BODY_BYTES), ...headers } });
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { body += d; });
      res.on("end", () => { finish({ status: res.statusCode, body, sent, www: res.headers["www-authenticate"] ?? "" }); req.destroy(); });
      res.on("error", () => finish({ status: res.statusCode, body, sent, www: res.headers["www-authenticate"] ?? "" }));
    });
    req.on("error", (e) => setTimeout(() => finish({ status: 0, error: String(e), sent }), 2000));
    const pump = () => {
      while (!done && sent < BODY_BYTES) {
        const n = Math.min(CHUNK.length, BODY_BYTES - sent);
        sent += n;
        if (!req.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) return req.once("drain", pump);
      }
      if (!done) req.end();
    };
    pump();
  });
}

async function rpc(body, session) {
  const headers = { Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" };
  if (session) Object.assign(headers, { "MCP-Session-Id": session, "MCP-Protocol-Version": "2025-11-25" });
  const res = await fetch(`http://127.0.0.1:${PORT}/mcp`, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, session: res.headers.get("mcp-session-id"), text };
}

before(async () => {
  fs.writeFileSync(path.join(dir, "kiln.json"), JSON.stringify({
    server: { listen: `127.0.0.1:${PORT}`, state_dir: path.join(dir, "state") },
    registries: { local: { url: "http://127.0.0.1:1" } },
    domains: {
      app: { token_sha256: [sha(token)], build: { mode: "containerfile" }, image: { registry: "local", repository: "e2e/app" } },
    },
  }));
  kiln = spawn(KILN, ["serve", "--config", path.join(dir, "kiln.json"), "--grace", "1"], { stdio: ["ignore", "pipe", "pipe"] });
  kiln.stderr.on("data", (d) => { kilnLog += d; });
  kiln.stdout.on("data", (d) => { kilnLog += d; });
  for (let i = 0; i < 200; i++) {
    try { if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) return; } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`kiln did not start:\n${kilnLog}`);
});

after(async () => {
  if (kiln && kiln.exitCode === null && kiln.signalCode === null) {
    const exited = new Promise((r) => kiln.once("exit", r));
    kiln.kill("SIGTERM");
    await exited;
  }
  fs.rmSync(dir, { recursive: true, force: true });
  assert.ok(!kilnLog.includes(token), "the token never reaches the log");
});

test("8 concurrent unauthenticated 60 MB POSTs get 401 without growing kiln", { timeout: 300_000 }, async () => {
  const init = await rpc({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "unauth", version: "1" } } });
  assert.equal(init.status, 200, init.text);
  const session = init.session;
  await rpc({ jsonrpc: "2.0", method: "notifications/initialized" }, session);
  const status = () => rpc({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "candidate_status", arguments: { candidate: "main" } } }, session);
  assert.equal((await status()).status, 200);
  const before = vmHwmKiB(kiln.pid);

  // The legitimate domain keeps asking while the attack runs.
  let attacking = true;
  let answered = 0;
  const failures = [];
  const poller = (async () => {
    while (attacking) {
      const r = await status();
      if (r.status === 200) answered++; else failures.push(r);
    }
  })();
  const attack = [];
  for (let i = 0; i < 4; i++) {
    attack.push(hugePost("/git/app.git/git-receive-pack", { "Content-Type": "application/x-git-receive-pack-request" }));
    attack.push(hugePost("/mcp", { "Content-Type": "application/json", Accept: "application/json, text/event-stream" }));
  }
  const results = await Promise.all(attack);
  attacking = false;
  await poller;
  const after = vmHwmKiB(kiln.pid);
  const growthMB = (after - before) / 1024;
  console.log(`# kiln VmHWM before ${(before / 1024).toFixed(1)} MB, after ${(after / 1024).toFixed(1)} MB ` +
    `(growth ${growthMB.toFixed(1)} MB); bytes handed to the socket per POST before the answer: ` +
    results.map((r) => `${(r.sent / 1e6).toFixed(1)} MB`).join(", ") + `; candidate_status answered ${answered} times`);
  for (const r of results) {
    assert.equal(r.status, 401, JSON.stringify(r));
    assert.match(r.www, /^Bearer/);
  }
  assert.ok(growthMB < 100, `peak RSS grew by ${growthMB.toFixed(1)} MB`);
  assert.ok(after / 1024 < 300, `peak RSS ${(after / 1024).toFixed(1)} MB`);
  assert.deepEqual(failures, []);
  assert.ok(answered >= 1, "candidate_status kept answering");
  // And still serves afterwards.
  assert.equal((await status()).status, 200);
});
