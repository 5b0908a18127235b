// The token-bucket kv script on a real redis-server, against the pure GCRA on the same seeded
// sequences: every answer, stored TAT and expiry must agree.
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  gcraDecide,
  gcraExpirationMs,
  resolveGcraParams,
  type GcraParams,
} from "../../src/limiter/gcra.js";
import {
  gcraDecisionFromReply,
  gcraScript,
  gcraScriptArgs,
  gcraScriptSha,
} from "../../src/limiter/gcra-scripts.js";
import {
  startRedisServer,
  stopAllRedisServers,
  type RedisServer,
} from "../helpers/redis-server.js";
import { mulberry32 } from "../helpers/seeded-random.js";

// The caller's clock in µs (a whole millisecond, as Clock.nowMs() × 1000 gives).
const t0 = 1_700_000_123_456_000;
const second = 1_000_000;

/**
 * Random params and arrivals in whole milliseconds (the service's clock): bursts, idles,
 * checks, refunds and requests larger than the burst.
 */
function scenario(seed: number): {
  params: GcraParams;
  arrivals: { nowUs: number; hits: number }[];
} {
  const random = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T =>
    items[Math.floor(random() * items.length)]!;
  const requestsPerUnit = pick([1, 3, 7, 10, 60, 1000, 250_000]);
  const windowSeconds = pick([1, 2, 60, 3600, 86_400 * 30]);
  const burst =
    random() < 0.3 ? undefined : 1 + Math.floor(random() * 2 * requestsPerUnit);
  const params = resolveGcraParams({
    requestsPerUnit,
    windowSeconds,
    ...(burst !== undefined ? { burst } : {}),
  });
  const t = params.emissionIntervalUs;
  const arrivals: { nowUs: number; hits: number }[] = [];
  let now = t0;
  for (let i = 0; i < 200; i++) {
    const scale = pick([
      0,
      0,
      0.05,
      0.5,
      1,
      1,
      2,
      Math.min(params.burst, 50) + 2,
    ]);
    now += Math.floor((random() * scale * t) / 1000) * 1000;
    const r = random();
    const hits =
      r < 0.15
        ? -1 - Math.floor(random() * 3)
        : r < 0.3
          ? Math.floor(random() * (params.burst + 2))
          : r < 0.32
            ? Number.MAX_SAFE_INTEGER
            : 1;
    arrivals.push({ nowUs: now, hits });
  }
  return { params, arrivals };
}

let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedisServer();
  admin = server.client();
});
afterEach(async () => {
  await admin.flushall();
});
afterAll(async () => {
  admin.disconnect();
  await stopAllRedisServers();
});

describe("gcraScript", () => {
  it("loads under the SHA-1 the backend calls it by", async () => {
    expect(await admin.script("LOAD", gcraScript)).toBe(gcraScriptSha);
  });

  it("decides, stores and expires exactly as the pure GCRA on seeded sequences", async () => {
    await admin.script("LOAD", gcraScript);
    let written = 0;
    let refused = 0;
    let deleted = 0;
    for (let seed = 1; seed <= 60; seed++) {
      const { params, arrivals } = scenario(seed);
      const key = `api_user_s${seed}_tb`;
      let pure: number | undefined;
      let storedBefore: string | null = null;
      for (const { nowUs, hits } of arrivals) {
        const expected = gcraDecide(pure, nowUs, hits, params);
        if (expected.newTatUs !== undefined) pure = expected.newTatUs;
        // One transaction: the script, then what it left. The fake clock runs apart from the
        // store's, so PERSIST hands expiry back to the sequence (a lapsed TAT reads as now).
        const results = await admin
          .multi()
          .evalsha(
            gcraScriptSha,
            1,
            key,
            ...gcraScriptArgs(nowUs, hits, params),
          )
          .get(key)
          .pttl(key)
          .persist(key)
          .exec();
        const at = `seed ${seed} at ${nowUs} hits ${hits}`;
        expect(results, at).not.toBeNull();
        for (const [err] of results!) expect(err, at).toBeNull();
        const reply = (results![0]![1] as unknown[]).map(Number);
        const stored = results![1]![1] as string | null;
        const pttl = results![2]![1] as number;
        expect(gcraDecisionFromReply(reply, nowUs, hits, params), at).toEqual(
          expected,
        );
        if (!expected.allowed) refused++;
        if (expected.newTatUs === undefined) {
          expect(stored, at).toBe(storedBefore);
        } else if (expected.newTatUs > nowUs) {
          written++;
          expect(stored, at).toBe(String(expected.newTatUs));
          // Set with PX = ceil((TAT − now) / 1000) in this same transaction: an expiry is set
          // (not -1). A PX of 1 ms can read as 0 once the store's clock moved on within it.
          expect(pttl, at).toBeGreaterThanOrEqual(0);
          expect(pttl, at).toBeLessThanOrEqual(
            gcraExpirationMs(expected.newTatUs, nowUs),
          );
        } else {
          // A refund filled the bucket: the key is gone, as absent means full.
          deleted++;
          expect(stored, at).toBeNull();
        }
        storedBefore = stored;
      }
    }
    // The sequences covered every branch of the script.
    expect(written).toBeGreaterThan(1000);
    expect(refused).toBeGreaterThan(500);
    expect(deleted).toBeGreaterThan(10);
  });

  it("treats an unreadable value as a full bucket", async () => {
    const params = resolveGcraParams({ requestsPerUnit: 2, windowSeconds: 1 });
    await admin.script("LOAD", gcraScript);
    await admin.set("junk", "not a number");
    const reply = (
      (await admin.evalsha(
        gcraScriptSha,
        1,
        "junk",
        ...gcraScriptArgs(t0, 1, params),
      )) as unknown[]
    ).map(Number);
    expect(gcraDecisionFromReply(reply, t0, 1, params)).toEqual(
      gcraDecide(undefined, t0, 1, params),
    );
    expect(await admin.get("junk")).toBe(String(t0 + second / 2));
  });
});
