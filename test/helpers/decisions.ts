// Decisions and cache keys built for tests, from the parallel lists the tests read best.
import type { RateLimit } from "../../src/config/rate-limit-config.js";
import type { RateLimitConfig } from "../../src/config/rate-limit-config.js";
import type { CacheKey } from "../../src/limiter/cache-key.js";
import type { Decider } from "../../src/limiter/decide.js";
import type { Decision } from "../../src/limiter/decision.js";
import type { LimitRequest } from "../../src/limiter/limit-request.js";
import { counterReading } from "../../src/limiter/pipeline.js";
import type {
  CounterReading,
  RateLimitCache,
} from "../../src/limiter/rate-limit-cache.js";
import {
  RateLimitResponse_Code as Code,
  type RateLimitDescriptor,
  type RateLimitResponse_DescriptorStatus,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import type { FakeClock } from "./fake-clock.js";
import { limitRequest } from "./limit-request.js";

/**
 * A {@link Decision} with the given statuses and limits (one per descriptor), for the parts of
 * the service that answer from one: headers, dynamic metadata, subscribers.
 */
export function testDecision(
  statuses: RateLimitResponse_DescriptorStatus[],
  limits: readonly (RateLimit | undefined)[],
  quota: readonly boolean[] = limits.map(() => false),
  options: {
    readonly domain?: string;
    readonly descriptors?: readonly RateLimitDescriptor[];
    readonly hitsAddends?: readonly number[];
    readonly config?: RateLimitConfig;
    readonly overallCode?: Code;
  } = {},
): Decision {
  const descriptors =
    options.descriptors ??
    limits.map(() => ({
      $typeName:
        "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor" as const,
      entries: [],
      limit: undefined,
      hitsAddend: undefined,
      isNegativeHits: false,
    }));
  const deciding = statuses.findIndex((s) => s.code === Code.OVER_LIMIT);
  return {
    request: limitRequest(
      options.domain ?? "d",
      descriptors,
      limits,
      options.hitsAddends ?? limits.map(() => 1),
    ),
    config: options.config ?? ({} as RateLimitConfig),
    counted: undefined,
    statuses,
    overallCode:
      options.overallCode ?? (deciding >= 0 ? Code.OVER_LIMIT : Code.OK),
    deciding,
    quota,
  };
}

/**
 * The cache keys of a request at `nowSeconds` (upstream `GenerateCacheKeys`), through the
 * decider's charging plan: counts `total_hits` as the plan does. Moves `clock` to `nowSeconds`.
 *
 * @returns one per descriptor; `undefined` where its limit is undefined (or a token bucket)
 */
export function generateCacheKeys(
  decider: Decider,
  clock: FakeClock,
  domain: string,
  descriptors: readonly RateLimitDescriptor[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  nowSeconds: number,
): (CacheKey | undefined)[] {
  clock.seconds = nowSeconds;
  const plan = decider.plan(
    limitRequest(domain, descriptors, limits, hitsAddends),
    true,
    false,
  );
  const keys = new Array<CacheKey | undefined>(descriptors.length).fill(
    undefined,
  );
  for (const d of plan.counted)
    keys[d.index] ??= {
      key: d.cacheKey,
      perSecond: d.perSecond,
      previousKey: d.previousCacheKey,
    };
  return keys;
}

/**
 * Reads the counters a request would charge, without changing them or any statistic: a dry
 * run of the request with no hits (`RateLimitCache.dryRun`), as Explain reads them (an
 * in-process store's keys the local cache answers included). Sliding windows read the
 * previous window's counter too.
 *
 * @returns one per descriptor; `undefined` where its limit is undefined (or a token bucket)
 */
export async function peekCounters(
  cache: Pick<RateLimitCache, "dryRun">,
  request: LimitRequest,
): Promise<(CounterReading | undefined)[]> {
  const run = await cache.dryRun!(
    limitRequest(request.domain, request.descriptors, request.limits),
    { stats: createStatsManager().rateLimitStats("peek") },
  );
  const cached = run.plan.counted.filter((d) => d.localCacheHit);
  if (cached.length > 0 && run.backend.inProcess)
    await run.backend.peek(cached);
  const readings = new Array<CounterReading | undefined>(
    request.descriptors.length,
  ).fill(undefined);
  for (const d of run.plan.counted) readings[d.index] = counterReading(d);
  return readings;
}
