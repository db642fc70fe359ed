// mcp_sdk_smoke.mjs: connects to kiln with the official MCP TypeScript SDK (Streamable HTTP),
// lists the tools and calls candidate_status. Exits non-zero on any failure.
//
//   KILN_MCP_URL=http://127.0.0.1:8700/mcp KILN_TOKEN=... [KILN_CANDIDATE=main] node mcp_sdk_smoke.mjs
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.env.KILN_MCP_URL;
const token = process.env.KILN_TOKEN;
const candidate = process.env.KILN_CANDIDATE || 'main';
if (!url || !token) {
  console.error('usage: KILN_MCP_URL=... KILN_TOKEN=... node mcp_sdk_smoke.mjs');
  process.exit(2);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log(`ok - ${what}`);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'kiln-smoke', version: '1.0.0' });
try {
  await client.connect(transport);
  check(transport.sessionId, 'initialize returned a session id');
  check(client.getServerVersion()?.name === 'kiln', 'serverInfo.name is kiln');

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  console.log(`tools: ${names.join(', ')}`);
  for (const n of ['build_candidate', 'candidate_status', 'build_log', 'cancel_build', 'list_candidates']) {
    check(names.includes(n), `tools/list has ${n}`);
  }

  // callTool validates structuredContent against the tool's outputSchema.
  const status = await client.callTool({ name: 'candidate_status', arguments: { candidate } });
  check(status.structuredContent && typeof status.structuredContent === 'object',
        'candidate_status returned structuredContent');
  check(status.content?.[0]?.type === 'text', 'candidate_status returned a text block');
  check(JSON.stringify(JSON.parse(status.content[0].text)) === JSON.stringify(status.structuredContent),
        'text block carries the same JSON');
  console.log(`candidate_status: ${status.content[0].text}`);

  if (process.env.KILN_SMOKE_BUILD) {
    let progress = 0;
    const build = await client.callTool(
      { name: 'build_candidate', arguments: { candidate } }, undefined,
      { onprogress: () => { progress++; }, timeout: 600000 });
    check(build.structuredContent?.status, `build_candidate finished (${build.structuredContent?.status}, ${progress} progress notifications)`);
  }

  await client.ping();
  console.log('ok - ping');
  await transport.terminateSession();
  console.log('ok - session terminated');
  await client.close();
} catch (err) {
  console.error(`FAIL: ${err?.stack || err}`);
  process.exit(1);
}
