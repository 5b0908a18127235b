// A logging fake RLQS server (envoy.service.rate_limit_quota.v3.RateLimitQuotaService) for
// checking an Envoy config on its own: it records every usage report Envoy sends and pushes
// quota assignments when the test asks. It encodes and decodes the few messages by hand with
// @bufbuild/protobuf's wire reader and writer, so it depends neither on generated code nor on
// our service (field numbers as in envoy/service/rate_limit_quota/v3/rlqs.proto and
// envoy/type/v3/ratelimit_strategy.proto, token_bucket.proto).

import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import * as grpc from "@grpc/grpc-js";

/** `BucketId.bucket`: the map of one bucket id. */
export type BucketId = Readonly<Record<string, string>>;

/** One `BucketQuotaUsage` of a report. */
export interface BucketUsage {
  readonly bucketId: BucketId;
  /** `time_elapsed` in seconds (Envoy 1.40 sends whole seconds). */
  readonly timeElapsedSeconds: number;
  readonly allowed: number;
  readonly denied: number;
}

/** One `RateLimitQuotaUsageReports` message, as received. */
export interface UsageReport {
  /** Index of the stream it came on (0 for the first Envoy stream the server saw). */
  readonly stream: number;
  /** `performance.now()` when it arrived. */
  readonly atMs: number;
  readonly domain: string;
  readonly usages: readonly BucketUsage[];
}

/** A `RateLimitStrategy` the fake can push. */
export type Strategy =
  | { readonly blanketRule: "ALLOW_ALL" | "DENY_ALL" }
  | {
      readonly tokenBucket: {
        readonly maxTokens: number;
        readonly tokensPerFill: number;
        /** Whole seconds: Envoy 1.40 drops the fraction. */
        readonly fillIntervalSeconds: number;
      };
    };

/** A running fake RLQS server. */
export interface RlqsFake {
  /** TCP port on 127.0.0.1. */
  readonly port: number;
  /** Every report received so far, in order. */
  readonly reports: readonly UsageReport[];
  /** Streams opened so far (open or closed). */
  streams(): number;
  /**
   * Sends one `QuotaAssignmentAction` for `bucketId` with `strategy` on the given stream (every
   * open stream when omitted).
   */
  assign(
    bucketId: BucketId,
    strategy: Strategy,
    ttlSeconds: number,
    stream?: number,
  ): void;
  /** Sends an `AbandonAction` for `bucketId` on every open stream. */
  abandon(bucketId: BucketId): void;
  stop(): Promise<void>;
}

const methodPath =
  "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

function decodeBucketId(bytes: Uint8Array): BucketId {
  const out: Record<string, string> = {};
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [field, type] = r.tag();
    if (field !== 1) {
      r.skip(type, field);
      continue;
    }
    // A map entry: key = 1, value = 2.
    const entry = new BinaryReader(r.bytes());
    let key = "";
    let value = "";
    while (entry.pos < entry.len) {
      const [f, t] = entry.tag();
      if (f === 1) key = entry.string();
      else if (f === 2) value = entry.string();
      else entry.skip(t, f);
    }
    out[key] = value;
  }
  return out;
}

function decodeDurationSeconds(bytes: Uint8Array): number {
  const r = new BinaryReader(bytes);
  let seconds = 0;
  let nanos = 0;
  while (r.pos < r.len) {
    const [f, t] = r.tag();
    if (f === 1) seconds = Number(r.int64());
    else if (f === 2) nanos = r.int32();
    else r.skip(t, f);
  }
  return seconds + nanos / 1e9;
}

function decodeUsage(bytes: Uint8Array): BucketUsage {
  const r = new BinaryReader(bytes);
  let bucketId: BucketId = {};
  let timeElapsedSeconds = 0;
  let allowed = 0;
  let denied = 0;
  while (r.pos < r.len) {
    const [f, t] = r.tag();
    if (f === 1) bucketId = decodeBucketId(r.bytes());
    else if (f === 2) timeElapsedSeconds = decodeDurationSeconds(r.bytes());
    else if (f === 3) allowed = Number(r.uint64());
    else if (f === 4) denied = Number(r.uint64());
    else r.skip(t, f);
  }
  return { bucketId, timeElapsedSeconds, allowed, denied };
}

/** Decodes a `RateLimitQuotaUsageReports` message. */
export function decodeReports(
  bytes: Uint8Array,
): Pick<UsageReport, "domain" | "usages"> {
  const r = new BinaryReader(bytes);
  let domain = "";
  const usages: BucketUsage[] = [];
  while (r.pos < r.len) {
    const [f, t] = r.tag();
    if (f === 1) domain = r.string();
    else if (f === 2) usages.push(decodeUsage(r.bytes()));
    else r.skip(t, f);
  }
  return { domain, usages };
}

function writeBucketId(w: BinaryWriter, field: number, id: BucketId): void {
  w.tag(field, WireType.LengthDelimited).fork();
  for (const [key, value] of Object.entries(id))
    w.tag(1, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.LengthDelimited)
      .string(key)
      .tag(2, WireType.LengthDelimited)
      .string(value)
      .join();
  w.join();
}

function writeDuration(w: BinaryWriter, field: number, seconds: number): void {
  w.tag(field, WireType.LengthDelimited)
    .fork()
    .tag(1, WireType.Varint)
    .int64(Math.trunc(seconds))
    .join();
}

/** Encodes a `RateLimitQuotaResponse` with one `BucketAction`. */
export function encodeAction(
  bucketId: BucketId,
  action: { strategy: Strategy; ttlSeconds: number } | "abandon",
): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).fork(); // bucket_action
  writeBucketId(w, 1, bucketId);
  if (action === "abandon") {
    w.tag(3, WireType.LengthDelimited).bytes(new Uint8Array(0));
  } else {
    w.tag(2, WireType.LengthDelimited).fork(); // quota_assignment_action
    writeDuration(w, 2, action.ttlSeconds); // assignment_time_to_live
    w.tag(3, WireType.LengthDelimited).fork(); // rate_limit_strategy
    const s = action.strategy;
    if ("blanketRule" in s) {
      // A oneof member: written even when it is the zero value ALLOW_ALL.
      w.tag(1, WireType.Varint).int32(s.blanketRule === "DENY_ALL" ? 1 : 0);
    } else {
      const tb = s.tokenBucket;
      w.tag(3, WireType.LengthDelimited)
        .fork()
        .tag(1, WireType.Varint)
        .uint32(tb.maxTokens)
        .tag(2, WireType.LengthDelimited)
        .fork()
        .tag(1, WireType.Varint)
        .uint32(tb.tokensPerFill)
        .join();
      writeDuration(w, 3, tb.fillIntervalSeconds);
      w.join();
    }
    w.join().join();
  }
  w.join();
  return w.finish();
}

/** Starts a fake RLQS server on 127.0.0.1 and a port the kernel picks. */
export async function startRlqsFake(): Promise<RlqsFake> {
  const reports: UsageReport[] = [];
  const open = new Map<number, grpc.ServerDuplexStream<Buffer, Buffer>>();
  let streamCount = 0;
  const server = new grpc.Server();
  server.addService(
    {
      streamRateLimitQuotas: {
        path: methodPath,
        requestStream: true,
        responseStream: true,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: (b: Buffer) => b,
        responseDeserialize: (b: Buffer) => b,
      },
    },
    {
      streamRateLimitQuotas: (
        call: grpc.ServerDuplexStream<Buffer, Buffer>,
      ) => {
        const index = streamCount++;
        open.set(index, call);
        call.on("data", (b: Buffer) => {
          reports.push({
            stream: index,
            atMs: performance.now(),
            ...decodeReports(b),
          });
        });
        const close = (): void => {
          if (open.delete(index)) call.end();
        };
        call.on("end", close);
        call.on("error", close);
        call.on("cancelled", close);
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(
      "127.0.0.1:0",
      grpc.ServerCredentials.createInsecure(),
      (err, p) => {
        if (err !== null) reject(err);
        else resolve(p);
      },
    );
  });
  const send = (bytes: Uint8Array, stream?: number): void => {
    for (const [i, call] of open)
      if (stream === undefined || stream === i) call.write(Buffer.from(bytes));
  };
  return {
    port,
    reports,
    streams: () => streamCount,
    assign(bucketId, strategy, ttlSeconds, stream) {
      send(encodeAction(bucketId, { strategy, ttlSeconds }), stream);
    },
    abandon(bucketId) {
      send(encodeAction(bucketId, "abandon"));
    },
    stop: () =>
      new Promise<void>((resolve) => {
        for (const call of open.values()) call.end();
        open.clear();
        server.forceShutdown();
        resolve();
      }),
  };
}
