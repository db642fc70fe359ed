// A scripted agent iteration, as an AI agent in the sandbox would do it, over MCP with the
// official TypeScript SDK client: list tools, build a candidate with progress while a
// concurrent status call answers, then build a candidate with a compile error and read the
// diagnostics.
//
// diagnostics; finally deploy the best candidate (the good one) and call it.
//
// env: KILN_URL (http://127.0.0.1:8700/mcp), KILN_TOKEN, GOOD (candidate), BAD (candidate),
//      DEPLOY_URL (optional: deploy GOOD, then GET this URL on the deployed service)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.env.KILN_URL ?? "http://127.0.0.1:8700/mcp";
const token = process.env.KILN_TOKEN;
const good = process.env.GOOD ?? "c1";
const bad = process.env.BAD ?? "c2";
const t0 = Date.now();
const say = (...a) => console.log(`[agent +${((Date.now() - t0) / 1000).toFixed(2)}s]`, ...a);

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "kiln-scripted-agent", version: "1.0.0" });
await client.connect(transport);
say("connected; server:", client.getServerVersion()?.name, client.getServerVersion()?.version);

const { tools } = await client.listTools();
say("tools:", tools.map((t) => t.name).join(", "));

const long = { timeout: 900_000, resetTimeoutOnProgress: true };
say(`build_candidate ${good} (wait: true, with progress)`);
const build = client.callTool({ name: "build_candidate", arguments: { candidate: good } }, undefined, {
  ...long,
  onprogress: (p) => say(`  progress ${p.progress}: ${p.message ?? ""}`),
});
// While the build runs, a status call answers at once.
await new Promise((r) => setTimeout(r, 300));
const s0 = Date.now();
const status = await client.callTool({ name: "candidate_status", arguments: { candidate: good } });
say(`  concurrent candidate_status answered in ${Date.now() - s0} ms: state=${status.structuredContent.state}`);
const res = await build;
const b = res.structuredContent;
say(`build ${b.build_id}: ${b.status}${b.cache_hit ? " (cache hit)" : ""}`, b.image ? b.image.ref : "", JSON.stringify(b.timings));
if (b.status !== "succeeded") {
  console.error(b.log_tail);
  process.exit(1);
}

say(`build_candidate ${bad} (a compile error)`);
const bres = await client.callTool({ name: "build_candidate", arguments: { candidate: bad } }, undefined, long);
const f = bres.structuredContent;
say(`build ${f.build_id}: ${f.status}, isError=${bres.isError}`);
for (const d of f.diagnostics) say(`  ${d.file}:${d.line}:${d.column}: ${d.severity}: ${d.message}`);
if (f.status !== "failed" || f.diagnostics.length === 0) process.exit(1);

const log = await client.callTool({ name: "build_log", arguments: { build_id: f.build_id, limit: 400 } });
say(`build_log (first 400 bytes of ${f.build_id}):\n` + log.structuredContent.text);

const list = await client.callTool({ name: "list_candidates", arguments: {} });
for (const c of list.structuredContent.candidates) say(`candidate ${c.candidate}: ${c.state}`);

const deployUrl = process.env.DEPLOY_URL;
if (deployUrl) {
  say(`deploy_candidate ${good} (the best candidate: its latest successful build, by digest)`);
  const dres = await client.callTool({ name: "deploy_candidate", arguments: { candidate: good } }, undefined, {
    ...long,
    onprogress: (p) => say(`  progress ${p.progress}: ${p.message ?? ""}`),
  });
  const d = dres.structuredContent;
  say(`deploy ${d.deploy_id}: ${d.status}${d.reason ? " (" + d.reason + ")" : ""} in ${d.elapsed_ms} ms:`, d.image?.ref ?? "");
  if (d.status !== "rolled_out") {
    console.error(d.message ?? "");
    process.exit(1);
  }
  const r = await fetch(deployUrl);
  say(`GET ${deployUrl} on the deployed candidate: ${r.status} ${(await r.text()).trim().slice(0, 120)}`);
  if (r.status !== 200) process.exit(1);
  const st = await client.callTool({ name: "candidate_status", arguments: { candidate: good } });
  say(`candidate_status ${good}: deployed build ${st.structuredContent.deployed_build?.build_id}`);
}
await client.close();
say("done");
