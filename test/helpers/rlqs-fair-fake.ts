// A stand-in RLQS server with a sharing policy, built on the logging fake (rlqs-fake.ts): it
// divides one limit per bucket among the Envoy streams reporting it, max-min fair over each
// stream's measured demand, and pushes each stream a token bucket for its share after every
// report. It exists to check the end-to-end harness (test/integration/rlqs-envoy.test.ts) and
// its assertions with RLQS_E2E_SERVER=fake while the service's own RLQS server is not there;
// it is not the service's algorithm (src/rlqs/ is), only the same idea in a few lines.

import { startRlqsFake, type RlqsFake } from "./rlqs-fake.js";

/** Options of {@link startFairRlqsFake}. */
export interface FairFakeOptions {
  /** The limit L each bucket shares, requests per second. */
  readonly limitPerSecond: number;
  /** `assignment_time_to_live` of each push, whole seconds. @defaultValue 15 */
  readonly ttlSeconds?: number;
}

/**
 * Max-min fair split of `limit` over `demands` (same order): streams asking less than an equal
 * share get what they ask; the rest share what is left equally. Whole tokens, the rounding
 * remainder to the largest demands, never more than `limit` in total.
 */
export function maxMinSplit(
  limit: number,
  demands: readonly number[],
): number[] {
  const order = demands
    .map((_, i) => i)
    .sort((a, b) => demands[a]! - demands[b]!);
  const shares = new Array<number>(demands.length).fill(0);
  let left = limit;
  order.forEach((i, k) => {
    const fair = left / (order.length - k);
    const give = Math.min(demands[i]!, fair);
    shares[i] = give;
    left -= give;
  });
  const whole = shares.map((s) => Math.floor(s));
  let remainder = Math.round(
    Math.min(
      limit,
      shares.reduce((a, b) => a + b, 0),
    ) - whole.reduce((a, b) => a + b, 0),
  );
  for (let k = order.length - 1; k >= 0 && remainder > 0; k--, remainder--)
    whole[order[k]!]! += 1;
  return whole;
}

const keyOf = (id: Readonly<Record<string, string>>): string =>
  JSON.stringify(Object.entries(id).sort(([a], [b]) => (a < b ? -1 : 1)));

/** Starts the fair fake on 127.0.0.1; `reports` are the logging fake's. */
export async function startFairRlqsFake(
  options: FairFakeOptions,
): Promise<RlqsFake> {
  const fake = await startRlqsFake();
  const ttl = options.ttlSeconds ?? 15;
  const limit = options.limitPerSecond;
  // Per bucket, per stream: the demand (requests per second, server clock) and when the stream
  // last reported it. A stream not yet measured counts as wanting all of L (the reserve).
  const buckets = new Map<
    string,
    {
      id: Readonly<Record<string, string>>;
      streams: Map<number, { demand: number; lastMs: number }>;
    }
  >();
  let seen = 0;
  const poll = setInterval(() => {
    while (seen < fake.reports.length) {
      const report = fake.reports[seen++]!;
      for (const usage of report.usages) {
        const key = keyOf(usage.bucketId);
        let bucket = buckets.get(key);
        if (bucket === undefined)
          buckets.set(
            key,
            (bucket = { id: usage.bucketId, streams: new Map() }),
          );
        const previous = bucket.streams.get(report.stream);
        const demand =
          previous === undefined
            ? limit
            : (usage.allowed + usage.denied) /
              Math.max((report.atMs - previous.lastMs) / 1000, 0.5);
        bucket.streams.set(report.stream, { demand, lastMs: report.atMs });
        const streams = [...bucket.streams.keys()];
        const split = maxMinSplit(
          limit,
          streams.map((s) => bucket.streams.get(s)!.demand),
        );
        streams.forEach((s, i) => {
          const tokens = Math.max(split[i]!, 1);
          // Envoy refills continuously at tokens_per_fill / fill_interval; max_tokens is only
          // the burst a stream may add after an idle moment, so keep it small: a full bucket
          // of one second's share would let a stream pass twice its share in a second.
          fake.assign(
            bucket.id,
            {
              tokenBucket: {
                maxTokens: Math.max(1, Math.ceil(tokens / 10)),
                tokensPerFill: tokens,
                fillIntervalSeconds: 1,
              },
            },
            ttl,
            s,
          );
        });
      }
    }
  }, 10);
  return {
    ...fake,
    async stop() {
      clearInterval(poll);
      await fake.stop();
    },
  };
}
