// A worker thread that polls one candidate's candidate_status through the official MCP SDK
// client until told to stop, and reports every latency (ms). Runs on its own event loop, so
// synchronous git calls in the test's main thread do not delay (or hide) its calls.
//   new Worker("./status_poller.mjs", { workerData: { url, token, candidate } })
//   worker.postMessage("stop") -> worker posts { latencies, failure }
import { parentPort, workerData } from "node:worker_threads";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { url, token, candidate } = workerData;
let stop = false;
parentPort.on("message", (m) => { if (m === "stop") stop = true; });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "status-poller", version: "1.0.0" });
const latencies = [];
let failure = null;
try {
  await client.connect(transport);
  parentPort.postMessage({ ready: true });
  while (!stop) {
    const t0 = performance.now();
    try {
      const r = await client.callTool({ name: "candidate_status", arguments: { candidate } }, undefined, { timeout: 10_000 });
      if (r.isError) throw new Error(`candidate_status failed: ${JSON.stringify(r)}`);
      latencies.push(performance.now() - t0);
    } catch (e) { failure ??= String(e); }
    await new Promise((r) => setTimeout(r, 5));
  }
  await client.close();
} catch (e) { failure ??= String(e); }
parentPort.postMessage({ latencies, failure });
