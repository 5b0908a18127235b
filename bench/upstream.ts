// The trivial upstream behind Envoy in `make bench`: answers every request 200 "ok".
// Usage: node dist/bench/upstream.js <port>
import { createServer } from "node:http";

const port = Number(process.argv[2] ?? "0");
const server = createServer((req, res) => {
  req.resume();
  res.writeHead(200, { "content-type": "text/plain", "content-length": "2" });
  res.end("ok");
});
server.keepAliveTimeout = 60_000;
server.listen(port, "127.0.0.1", () => {
  process.stdout.write("upstream listening\n");
});
process.on("SIGTERM", () => {
  server.close();
  server.closeAllConnections();
});
