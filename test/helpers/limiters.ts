// Builds the decision pipeline over each backend, as app/ does, for tests that drive a
// backend directly with its own options.
import { KvCounterBackend } from "../../src/backends/kv/kv-counter-backend.js";
import type { KvBackendOptions } from "../../src/backends/kv/kv-options.js";
import { McCounterBackend } from "../../src/backends/mc/mc-counter-backend.js";
import type { McBackendOptions } from "../../src/backends/mc/mc-options.js";
import {
  MemoryCounterBackend,
  type MemoryCounterBackendOptions,
} from "../../src/backends/memory/memory-counter-backend.js";
import type { Decider } from "../../src/limiter/decide.js";
import { RateLimitPipeline } from "../../src/limiter/pipeline.js";
import type { StatsStore } from "../../src/stats/stats-store.js";
import type { Clock } from "../../src/util/clock.js";

/** The pipeline options a test gives beside the backend's own. */
interface PipelineParts {
  readonly decider: Decider;
  /** Hot-key leases for `lease: true` limits (`RateLimitPipelineOptions.leaseClock`). */
  readonly leaseClock?: Clock;
  readonly stopCacheKeyIncrementWhenOverlimit?: boolean;
  readonly statsStore?: StatsStore;
}

function pipelineOptions(options: PipelineParts): {
  decider: Decider;
  leaseClock?: Clock;
  stopCacheKeyIncrementWhenOverlimit?: boolean;
  statsStore?: StatsStore;
} {
  return {
    decider: options.decider,
    ...(options.stopCacheKeyIncrementWhenOverlimit !== undefined
      ? {
          stopCacheKeyIncrementWhenOverlimit:
            options.stopCacheKeyIncrementWhenOverlimit,
        }
      : {}),
    ...(options.statsStore !== undefined
      ? { statsStore: options.statsStore }
      : {}),
    ...(options.leaseClock !== undefined
      ? { leaseClock: options.leaseClock }
      : {}),
  };
}

/** The pipeline over the memory backend. */
export function memoryLimiter(
  options: MemoryCounterBackendOptions & PipelineParts,
): RateLimitPipeline<MemoryCounterBackend> {
  return new RateLimitPipeline({
    backend: new MemoryCounterBackend(options),
    ...pipelineOptions(options),
  });
}

/**
 * The pipeline over the kv backend.
 *
 * @throws {@link KvOptionsError} when an option is invalid
 */
export function kvLimiter(
  options: KvBackendOptions & PipelineParts,
): RateLimitPipeline<KvCounterBackend> {
  return new RateLimitPipeline({
    backend: new KvCounterBackend(options),
    ...pipelineOptions(options),
  });
}

/**
 * The pipeline over the mc backend (stop-increment never applies to mc, as upstream).
 *
 * @throws {@link RangeError} when an option is invalid
 */
export function mcLimiter(
  options: McBackendOptions & PipelineParts,
): RateLimitPipeline<McCounterBackend> {
  return new RateLimitPipeline({
    backend: new McCounterBackend(options),
    decider: options.decider,
    ...(options.statsStore !== undefined
      ? { statsStore: options.statsStore }
      : {}),
  });
}
