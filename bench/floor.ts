// The floor: a bare node:http2 unary gRPC handler that decodes the RateLimitRequest and
// returns a fixed response. Nothing a real service can do is cheaper on this stack; the
// benchmark reports every case as a ratio of it. Usage: node dist/bench/floor.js <port>
import { createServer } from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
} from "../src/proto.js";

const port = Number(process.argv[2] ?? "0");
const payload = toBinary(
  RateLimitResponseSchema,
  create(RateLimitResponseSchema, {
    overallCode: RateLimitResponse_Code.OK,
    statuses: [{ code: RateLimitResponse_Code.OK }],
  }),
);
const frame = Buffer.alloc(5 + payload.length);
frame.writeUInt32BE(payload.length, 1);
frame.set(payload, 5);

const server = createServer();
server.on("stream", (stream) => {
  const chunks: Buffer[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c));
  stream.on("error", () => undefined);
  stream.on("end", () => {
    const body = Buffer.concat(chunks);
    fromBinary(RateLimitRequestSchema, body.subarray(5));
    stream.respond(
      { ":status": 200, "content-type": "application/grpc" },
      { waitForTrailers: true },
    );
    stream.once("wantTrailers", () => {
      stream.sendTrailers({ "grpc-status": "0" });
    });
    stream.end(frame);
  });
});
server.listen(port, "127.0.0.1", () => {
  process.stdout.write("floor listening\n");
});
process.on("SIGTERM", () => {
  server.close();
  process.exit(0);
});
