// auth_proxy.mjs: a tiny HTTP proxy on 127.0.0.1 that adds `Authorization: Bearer <token>` to
// every request and forwards it (Host and Origin unchanged, bodies and SSE streamed) to kiln.
// For the MCP conformance suite, which cannot send an Authorization header.
//
//   KILN_URL=http://127.0.0.1:8700 KILN_TOKEN=... PROXY_PORT=0 node auth_proxy.mjs
//
// Prints "proxy listening on <port>" once ready. The token is never printed.
import http from 'node:http';

const target = new URL(process.env.KILN_URL || 'http://127.0.0.1:8700');
const token = process.env.KILN_TOKEN;
if (!token) {
  console.error('auth_proxy: KILN_TOKEN is required');
  process.exit(2);
}
const port = Number(process.env.PROXY_PORT || 0);

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const upstream = http.request(
    {
      host: target.hostname,
      port: target.port || 80,
      method: req.method,
      path: req.url,
      headers,
    },
    (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    },
  );
  upstream.on('error', (err) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: `proxy: ${err.message}` }));
  });
  res.on('close', () => upstream.destroy());
  req.pipe(upstream);
});

server.listen(port, '127.0.0.1', () => {
  console.log(`proxy listening on ${server.address().port}`);
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
