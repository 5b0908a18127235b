// Times HpackDecoder on the request header blocks Envoy's gRPC client sends to the rate-limit
// service. The blocks are real: captured from a node:http2 client (nghttp2's encoder, as in Envoy)
// on one connection, so the first is literals + Huffman and the rest are mostly table references
// plus a fresh x-request-id.
//
//   esbuild bench/hpack-decode.ts --bundle --platform=node --format=esm --outfile=/tmp/hpack-bench.mjs
//   node /tmp/hpack-bench.mjs
import { randomUUID } from "node:crypto";
import { connect } from "node:http2";
import { createServer, type AddressInfo } from "node:net";
import { HpackDecoder } from "../src/http2/hpack.js";

const requestCount = 1000;

async function captureBlocks(count: number): Promise<Buffer[]> {
  const blocks: Buffer[] = [];
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const server = createServer((socket) => {
    socket.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]));
    let received = Buffer.alloc(0);
    let offset = 24; // client preface
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      while (received.length >= offset + 9) {
        const length = received.readUIntBE(offset, 3);
        const type = received[offset + 3];
        const flags = received[offset + 4] ?? 0;
        if (received.length < offset + 9 + length) break;
        const payload = received.subarray(offset + 9, offset + 9 + length);
        offset += 9 + length;
        if (type === 4 && (flags & 1) === 0) {
          socket.write(Buffer.from([0, 0, 0, 4, 1, 0, 0, 0, 0]));
        }
        // nghttp2 sends these small blocks unpadded, without priority, in one frame.
        if (type === 1 && (flags & 0x2c) === 0x04) blocks.push(payload);
        if (blocks.length === count) finish();
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const session = connect(`http://127.0.0.1:${port}`, {
    peerMaxConcurrentStreams: count,
  });
  session.on("error", () => undefined);
  for (let i = 0; i < count; i++) {
    session
      .request(
        {
          ":method": "POST",
          ":path":
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
          ":authority": "ratelimit",
          "content-type": "application/grpc",
          te: "trailers",
          "grpc-timeout": "20m",
          "x-envoy-internal": "true",
          "x-forwarded-for": "127.0.0.1",
          "x-request-id": randomUUID(),
          "x-envoy-expected-rq-timeout-ms": "20",
        },
        { endStream: true },
      )
      .on("error", () => undefined);
  }
  await done;
  session.destroy();
  server.close();
  return blocks;
}

function nsPer(iterations: number, run: () => void): number {
  const start = process.hrtime.bigint();
  run();
  return Number(process.hrtime.bigint() - start) / iterations;
}

const blocks = await captureBlocks(requestCount);
const [first = Buffer.alloc(0), second = Buffer.alloc(0)] = blocks;
const limit = 16384;
let sink = 0;

for (let round = 0; round < 5; round++) {
  const rounds = 2000;
  const firstNs = nsPer(rounds, () => {
    for (let i = 0; i < rounds; i++) {
      sink += new HpackDecoder().decode(first, 0, first.length, limit).length;
    }
  });
  const constructNs = nsPer(rounds, () => {
    for (let i = 0; i < rounds; i++)
      sink += new HpackDecoder().decode(first, 0, 0, limit).length;
  });
  const steadyRounds = 20;
  let steadyNs = 0;
  for (let r = 0; r < steadyRounds; r++) {
    const decoder = new HpackDecoder();
    decoder.decode(first, 0, first.length, limit);
    steadyNs += nsPer(blocks.length - 1, () => {
      for (let i = 1; i < blocks.length; i++) {
        const block = blocks[i] ?? first;
        sink += decoder.decode(block, 0, block.length, limit).length;
      }
    });
  }
  process.stdout.write(
    `round ${round}: first block (${first.length} B, fresh decoder) ${firstNs.toFixed(0)} ns ` +
      `(of which new HpackDecoder ${constructNs.toFixed(0)} ns); ` +
      `later blocks (${second.length} B, indexed + new x-request-id) ${(steadyNs / steadyRounds).toFixed(0)} ns/decode\n`,
  );
}
process.stdout.write(
  `first block: ${first.toString("hex")}\nsecond block: ${second.toString("hex")}\n(${sink})\n`,
);
