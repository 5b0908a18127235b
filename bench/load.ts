// A load generator for realistic requests: thousands of distinct descriptor values, 1-3
// descriptors per call, unary gRPC over a few HTTP/2 connections with a fixed number of calls
// in flight. h2load can only send one fixed body; this complements it.
// Usage: node dist/bench/load.js <host:port> <calls> <inFlight> <connections> [distinct]
// Prints one JSON line: { calls, errors, seconds, perSecond, p50Ms, p90Ms, p99Ms }.
import { connect, type ClientHttp2Session } from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { RateLimitRequestSchema } from "../src/proto.js";

const [
  address = "127.0.0.1:8081",
  callsArg = "100000",
  inFlightArg = "256",
  connectionsArg = "4",
  distinctArg = "5000",
] = process.argv.slice(2);
const calls = Number(callsArg);
const inFlight = Number(inFlightArg);
const distinct = Number(distinctArg);

/** Builds one request body (gRPC envelope) per distinct value; 1 to 3 descriptors each. */
function bodies(): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < distinct; i++) {
    const descriptors = [
      {
        entries: [
          {
            key: "remote_address",
            value: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
          },
        ],
      },
    ];
    if (i % 3 >= 1) {
      descriptors.push({
        entries: [{ key: "path", value: `/api/v1/items/${i % 97}` }],
      });
    }
    if (i % 3 === 2) {
      descriptors.push({
        entries: [
          { key: "tenant", value: `t${i % 50}` },
          { key: "plan", value: i % 2 === 0 ? "free" : "pro" },
        ],
      });
    }
    const message = toBinary(
      RateLimitRequestSchema,
      create(RateLimitRequestSchema, { domain: "bench", descriptors }),
    );
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    out.push(frame);
  }
  return out;
}

const frames = bodies();
const sessions: ClientHttp2Session[] = Array.from(
  { length: Number(connectionsArg) },
  () => connect(`http://${address}`),
);
const latenciesUs = new Float64Array(calls);
let started = 0;
let finished = 0;
let errors = 0;
const begin = process.hrtime.bigint();

function one(): void {
  if (started >= calls) return;
  const index = started++;
  const session = sessions[index % sessions.length]!;
  const t0 = process.hrtime.bigint();
  const stream = session.request({
    ":method": "POST",
    ":path": "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    "content-type": "application/grpc",
    te: "trailers",
  });
  let status = "";
  stream.on("trailers", (t: Record<string, string | string[] | undefined>) => {
    status = String(t["grpc-status"]);
  });
  stream.on("response", (h) => {
    if (h["grpc-status"] !== undefined) status = String(h["grpc-status"]);
  });
  stream.on("data", () => undefined);
  stream.on("error", () => undefined);
  stream.on("close", () => {
    latenciesUs[index] = Number(process.hrtime.bigint() - t0) / 1000;
    if (status !== "0") errors++;
    finished++;
    if (finished === calls) done();
    else one();
  });
  stream.end(frames[index % frames.length]);
}

function done(): void {
  const seconds = Number(process.hrtime.bigint() - begin) / 1e9;
  const sorted = Array.from(latenciesUs).sort((a, b) => a - b);
  const at = (q: number): number =>
    Math.round(
      sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! / 10,
    ) / 100;
  process.stdout.write(
    JSON.stringify({
      calls,
      errors,
      seconds,
      perSecond: Math.round(calls / seconds),
      p50Ms: at(0.5),
      p90Ms: at(0.9),
      p99Ms: at(0.99),
    }) + "\n",
  );
  for (const s of sessions) s.close();
}

for (let i = 0; i < inFlight; i++) one();
