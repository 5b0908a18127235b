// A live decision service on the memory backend with a config canary beside it, all in this
// process on a fake clock: the unit tests of src/canary/ drive requests through the real
// ShouldRateLimit and read the report.

import { createDecisionChannel } from "../../../src/limiter/decision-channel.js";
import { create } from "@bufbuild/protobuf";
import { silentLogger } from "../../helpers/silent-logger.js";
import { MemoryCounterBackend } from "../../../src/backends/memory/memory-counter-backend.js";
import type { CanaryLedger } from "../../../src/canary/canary-ledger.js";
import { createCanary, type Canary } from "../../../src/canary/canary.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type { ChargeMode } from "../../../src/config/yaml-types.js";
import type { CounterSlot } from "../../../src/limiter/counter-backend.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { createLocalCache } from "../../../src/limiter/local-cache.js";
import { RateLimitPipeline } from "../../../src/limiter/pipeline.js";
import type { RateLimitResponse_Code as Code } from "../../../src/proto.js";
import {
  RateLimitRequestSchema,
  type GetCanaryReportResponse,
} from "../../../src/proto.js";
import {
  createRateLimitService,
  type RateLimitService,
} from "../../../src/service/rate-limit-service.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import type { StatsStore } from "../../../src/stats/stats-store.js";
import { FakeClock } from "../../helpers/fake-clock.js";

/** Options of {@link startCanaryHarness}. */
export interface HarnessOptions {
  readonly chargeMode?: ChargeMode;
  readonly stopIncrement?: boolean;
  readonly quotaMode?: boolean;
  /** A local over-limit cache in the live decision (`LOCAL_CACHE_SIZE_IN_BYTES`). */
  readonly localCache?: boolean;
  /** @defaultValue 1_700_000_040 (40 s into a minute) */
  readonly nowSeconds?: number;
}

/** The live service, its store and the canary. */
export interface Harness {
  readonly service: RateLimitService;
  readonly canary: Canary;
  readonly clock: FakeClock;
  readonly live: MemoryCounterBackend;
  readonly liveStats: StatsStore;
  /** The running canary's own counters. */
  own(): CanaryLedger | undefined;
  /**
   * Sends one request (descriptors as `k=v,k2=v2`; `*N` at the end of a descriptor sets its
   * hits addend) and returns its overall code.
   */
  send(domain: string, ...descriptors: string[]): Promise<Code>;
  /** The report once every request sent is evaluated. */
  report(): Promise<GetCanaryReportResponse>;
  /** Would-refuse / would-admit per rule, as `rule: +refuse -admit`. */
  changes(): Promise<Record<string, string>>;
  close(): Promise<void>;
}

/** Returns a counter's value in a memory store (0 when absent). */
export function countOf(store: MemoryCounterBackend, cacheKey: string): number {
  const slot: CounterSlot = {
    cacheKey,
    previousCacheKey: undefined,
    perSecond: false,
    expirationSeconds: 0,
    windowSeconds: 60,
    windowEndSeconds: 0,
    sliding: false,
    requestsPerUnit: 0,
    shadowMode: false,
    increment: 0,
    current: 0,
    previous: 0,
  };
  store.peek([slot]);
  return slot.current;
}

/** Starts a live service with `liveYaml` (one file per entry) on the memory backend. */
export function startCanaryHarness(
  liveFiles: Record<string, string>,
  options: HarnessOptions = {},
): Harness {
  const clock = new FakeClock(options.nowSeconds ?? 1_700_000_040);
  const statsManager = createStatsManager();
  const live = new MemoryCounterBackend({ clock });
  const pipeline = new RateLimitPipeline({
    backend: live,
    decider: createDecider({
      clock,
      expirationJitterMaxSeconds: 0,
      ...(options.localCache === true
        ? { localCache: createLocalCache({ maxBytes: 1 << 20, clock }) }
        : {}),
    }),
    stopCacheKeyIncrementWhenOverlimit: options.stopIncrement ?? false,
  });
  const logger = silentLogger();
  const decisions = createDecisionChannel();
  const canary = createCanary({
    decisions,
    readConfigDir: () => Promise.resolve([]),
    chargeMode: options.chargeMode ?? "each",
    stopCacheKeyIncrementWhenOverlimit: options.stopIncrement ?? false,
    globalQuotaMode: options.quotaMode ?? false,
    localCacheSizeBytes: options.localCache === true ? 1 << 20 : 0,
    clock,
    logger,
  });
  const service = createRateLimitService({
    cache: pipeline,
    statsManager,
    clock,
    logger,
    globalQuotaMode: options.quotaMode ?? false,
    decisions,
  });
  service.applyConfigUpdate({
    ok: true,
    config: loadConfig(
      Object.entries(liveFiles).map(([name, text]) => ({ name, text })),
      { statsManager, chargeMode: options.chargeMode ?? "each" },
    ),
  });
  const harness: Harness = {
    service,
    canary,
    clock,
    live,
    liveStats: statsManager.store,
    own: () => canary.ledger(),
    async send(domain, ...descriptors) {
      const response = await service.shouldRateLimit(
        create(RateLimitRequestSchema, {
          domain,
          descriptors: descriptors.map((text) => {
            const [entries = "", hits] = text.split("*");
            return {
              entries: entries.split(",").map((pair) => {
                const [key = "", value = ""] = pair.split("=");
                return { key, value };
              }),
              ...(hits !== undefined ? { hitsAddend: BigInt(hits) } : {}),
            };
          }),
        }),
      );
      return response.overallCode;
    },
    report: () => canary.report(),
    async changes() {
      const report = await canary.report();
      return Object.fromEntries(
        report.rules.map((r) => [r.rule, `+${r.wouldRefuse} -${r.wouldAdmit}`]),
      );
    },
    async close() {
      await canary.close();
      await pipeline.close();
    },
  };
  return harness;
}

/** One YAML domain file with the given descriptors block (indented two spaces). */
export function yaml(domain: string, descriptors: string): string {
  return `domain: ${domain}\ndescriptors:\n${descriptors}`;
}
