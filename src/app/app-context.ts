import type { Logger } from "pino";
import type { HealthChecker } from "../health/health.js";
import type { Decider } from "../limiter/decide.js";
import type { StatsManager } from "../stats/stats-manager.js";
import type { Clock } from "../util/clock.js";

/**
 * What `create-app.ts` hands to the per-feature factories (`kv-cache.ts`, `mc-cache.ts`, `xds-provider.ts`,
 * `stats-sinks.ts`), which map {@link Settings} to one module's options.
 */
export interface AppContext {
  readonly logger: Logger;
  readonly clock: Clock;
  readonly health: HealthChecker;
  readonly statsManager: StatsManager;
  /** The decide step shared by every backend (with the local cache when enabled). */
  readonly decider: Decider;
  /**
   * Index of this worker process when `WORKERS` > 1, else 0. Listeners that must not be shared
   * between processes (debug, pull stats) open in worker 0 only.
   */
  readonly workerIndex: number;
}
