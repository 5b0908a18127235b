// Rate limiting: the counter backend, cache keys, near-limit ratio, modes, response headers,
// worker processes.

import {
  anyInteger,
  EnvParseError,
  nonNegativeInteger,
  parseFloat,
  positiveInteger,
} from "../env-parsers.js";
import { legacyBackendTypes } from "../legacy-names.js";
import {
  custom,
  durationMs,
  flag,
  integer,
  oneOf,
  ratio,
  text,
} from "./codecs.js";
import {
  setting,
  settingsGroup,
  type SettingsCheck,
  type SettingsOf,
} from "./define.js";
import type { statistics } from "./statistics.js";

/** Counter backend (`BACKEND_TYPE`): key-value store, memcached protocol, or in-process. */
export type BackendType = "kv" | "mc" | "memory";

const backendTypeExpected = "kv, mc or memory";
const backendTypeWords = oneOf<BackendType>(
  new Map<string, BackendType>([
    ["", "kv"],
    ["kv", "kv"],
    ["mc", "mc"],
    ["memory", "memory"],
  ]),
  backendTypeExpected,
);
/** As {@link backendTypeWords}, naming our word when given the reference's (`redis`, `memcache`). */
const backendType = custom<BackendType>((value) => {
  const ours = legacyBackendTypes.get(value);
  if (ours !== undefined)
    throw new EnvParseError(
      backendTypeExpected,
      `${value} is the Go reference's word: set BACKEND_TYPE=${ours}`,
    );
  return backendTypeWords.parse(value);
}, backendTypeWords.format);

/** `BACKEND_FAILURE_MODE` values (same words as YAML `failure_mode`). */
export type BackendFailureMode = "error" | "allow" | "deny" | "local";

const failureModeCodec = oneOf<BackendFailureMode>(
  new Map<string, BackendFailureMode>([
    ["error", "error"],
    ["allow", "allow"],
    ["deny", "deny"],
    ["local", "local"],
  ]),
  "error, allow, deny or local",
);

const localShareCodec = custom((value: string): number => {
  const share = parseFloat(value, { min: 0, max: 1 });
  if (share === 0) throw new EnvParseError("a number above 0, at most 1");
  return share;
}, String);

/**
 * How a request's counters are charged (`CHARGE_MODE`): every descriptor (`each`, the
 * reference's behaviour) or none when any is over its limit (`all_or_nothing`).
 */
export type ChargeMode = "each" | "all_or_nothing";

const chargeMode = oneOf<ChargeMode>(
  new Map<string, ChargeMode>([
    ["each", "each"],
    ["all_or_nothing", "all_or_nothing"],
  ]),
  "each or all_or_nothing",
);

export const rateLimiting = settingsGroup("rate limiting", {
  /** Counter backend: `kv` (also for ""), `mc` or `memory`. */
  backendType: setting({
    env: "BACKEND_TYPE",
    codec: backendType,
    default: "kv",
    meaning: "Counter backend: kv, mc or memory (in-process).",
  }),
  /**
   * What the kv and mc backends' requests get when the backend fails or its circuit breaker
   * is open: `error` (UNAVAILABLE, the reference's behaviour), `allow` (OK, nothing counted),
   * `deny` (OVER_LIMIT) or `local` (an in-process limiter); a domain's YAML `failure_mode`
   * overrides it (docs/failure-modes.md).
   */
  backendFailureMode: setting({
    env: "BACKEND_FAILURE_MODE",
    codec: failureModeCodec,
    default: "error",
    meaning:
      "When the kv or mc backend fails: error (UNAVAILABLE), allow, deny or local (docs/failure-modes.md).",
  }),
  /** Consecutive kv or mc failures (errors or timeouts) that open the circuit breaker, ≥ 1. */
  backendFailureThreshold: setting({
    env: "BACKEND_FAILURE_THRESHOLD",
    codec: integer({ min: 1, max: 1_000_000 }),
    default: 3,
    unit: "failures",
    meaning:
      "Consecutive kv or mc failures or timeouts that open the circuit breaker.",
  }),
  /**
   * Time between half-open probes (one real request each) while the circuit breaker is open,
   * in milliseconds; also caps the kv reconnect backoff under a failure mode other than error.
   */
  backendProbeIntervalMs: setting({
    env: "BACKEND_PROBE_INTERVAL",
    codec: durationMs("positive"),
    default: 500,
    meaning:
      "Time between probes of the backend (one real request) while the circuit breaker is open.",
  }),
  /**
   * Longest a decision waits on the kv or mc backend, in milliseconds, before it is answered
   * by the failure mode (and counted as a backend failure); 0: no bound but the caller's
   * `grpc-timeout` (always honoured) and the backend's own timeouts (docs/failure-modes.md).
   */
  backendDecisionTimeoutMs: setting({
    env: "BACKEND_DECISION_TIMEOUT",
    codec: durationMs("non-negative"),
    default: 0,
    meaning:
      "Longest a decision waits on the kv or mc backend before the failure mode answers; 0: only the caller's grpc-timeout bounds it.",
  }),
  /**
   * Share of each limit the `local` failure mode grants this process, 0 < share ≤ 1 (0.25 for
   * a fleet of four); limits become ⌊limit × share⌋, at least 1.
   */
  backendFailureLocalShare: setting({
    env: "BACKEND_FAILURE_LOCAL_SHARE",
    codec: localShareCodec,
    default: 1,
    meaning:
      "Share of each limit (above 0, at most 1) the local failure mode allows this process.",
  }),
  /** Prepended verbatim to every cache key. */
  cacheKeyPrefix: setting({
    env: "CACHE_KEY_PREFIX",
    codec: text,
    default: "",
    meaning: "Prepended to every cache key.",
  }),
  /**
   * Upper bound (exclusive) of the random seconds added to each counter's expiration; ≤ 0
   * disables the jitter.
   */
  expirationJitterMaxSeconds: setting({
    env: "EXPIRATION_JITTER_MAX_SECONDS",
    codec: integer(anyInteger),
    default: 300,
    unit: "seconds",
    meaning:
      "Largest random seconds added to counter expirations; 0 or less disables.",
  }),
  /**
   * Number of worker processes sharing the listening ports, 1–64; above 1 needs a
   * shared backend (kv or mc).
   */
  workers: setting({
    env: "WORKERS",
    codec: integer({ min: 1, max: 64 }),
    default: 1,
    unit: "processes",
    meaning:
      "Worker processes sharing the listening ports (uses every core); above 1 needs BACKEND_TYPE kv or mc.",
  }),
  /**
   * Most live counters of the memory backend (`BACKEND_TYPE=memory`); beyond it the windows
   * that end soonest are dropped first, counted in `ratelimit.memory.evicted_keys`. About 110
   * bytes of heap per live key (docs/performance.md).
   */
  memoryMaxKeys: setting({
    env: "MEMORY_MAX_KEYS",
    codec: integer(positiveInteger),
    default: 1_000_000,
    unit: "keys",
    meaning:
      "Most live counters of the memory backend; the windows that end soonest are dropped first.",
  }),
  /** Size of the local over-limit cache in bytes; 0 disables it. */
  localCacheSizeBytes: setting({
    env: "LOCAL_CACHE_SIZE_IN_BYTES",
    codec: integer(nonNegativeInteger),
    default: 0,
    unit: "bytes",
    meaning: "Size of the local over-limit cache in bytes; 0 disables it.",
  }),
  /**
   * Fraction of the limit above which hits count as near limit, 0–1 (`NEAR_LIMIT_RATIO`; the
   * reference holds it as a 32-bit float, so apply `Math.fround` where its arithmetic matters).
   */
  nearLimitRatio: setting({
    env: "NEAR_LIMIT_RATIO",
    codec: ratio,
    default: 0.8,
    meaning:
      "Fraction of the limit (0 to 1) above which hits count as near limit.",
  }),
  /**
   * Increment no counter of a request once one of its descriptors is over limit
   * .
   */
  stopCacheKeyIncrementWhenOverlimit: setting({
    env: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    codec: flag,
    default: false,
    meaning:
      "Do not increment counters of a request that is already over a limit.",
  }),
  /**
   * Charge mode of every domain whose config has no `charge:` (docs/configuration.md,
   * "All-or-nothing charging"); `each` keeps the reference's behaviour.
   */
  chargeMode: setting({
    env: "CHARGE_MODE",
    codec: chargeMode,
    default: "each",
    meaning:
      "Charge mode of domains without charge: in their config: each, or all_or_nothing (a request over any limit increments no counter).",
  }),
  /** Global shadow mode: over-limit results are reported as OK. */
  shadowMode: setting({
    env: "SHADOW_MODE",
    codec: flag,
    default: false,
    meaning: "Global shadow mode: over-limit results are reported as OK.",
  }),
  /** Global quota mode. */
  quotaMode: setting({
    env: "QUOTA_MODE",
    codec: flag,
    default: false,
    meaning: "Global quota mode.",
  }),
  /** Fill `dynamic_metadata` in responses. */
  responseDynamicMetadata: setting({
    env: "RESPONSE_DYNAMIC_METADATA",
    codec: flag,
    default: false,
    meaning: "Fill dynamic metadata in responses.",
  }),
  /**
   * Report unhealthy until at least one configuration is loaded
   * .
   */
  healthyWithAtLeastOneConfigLoaded: setting({
    env: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    codec: flag,
    default: false,
    meaning: "Report unhealthy until a configuration is loaded.",
  }),
  /** Add rate-limit headers to responses. */
  limitResponseHeadersEnabled: setting({
    env: "LIMIT_RESPONSE_HEADERS_ENABLED",
    codec: flag,
    default: false,
    meaning: "Add rate-limit headers to responses.",
  }),
  /** Header carrying the limit. */
  limitLimitHeader: setting({
    env: "LIMIT_LIMIT_HEADER",
    codec: text,
    default: "RateLimit-Limit",
    meaning: "Header name for the limit.",
  }),
  /** Header carrying the remaining hits. */
  limitRemainingHeader: setting({
    env: "LIMIT_REMAINING_HEADER",
    codec: text,
    default: "RateLimit-Remaining",
    meaning: "Header name for the remaining hits.",
  }),
  /** Header carrying the seconds until reset. */
  limitResetHeader: setting({
    env: "LIMIT_RESET_HEADER",
    codec: text,
    default: "RateLimit-Reset",
    meaning: "Header name for the seconds until reset.",
  }),
  /** Most descriptors in one request, ≥ 1; more is INVALID_ARGUMENT (docs/limits.md). */
  requestMaxDescriptors: setting({
    env: "REQUEST_MAX_DESCRIPTORS",
    codec: integer(positiveInteger),
    default: 1000,
    meaning:
      "Most descriptors in one request; more is INVALID_ARGUMENT / 400 (docs/limits.md).",
  }),
  /** Most entries in one descriptor, ≥ 1; more is INVALID_ARGUMENT (docs/limits.md). */
  requestMaxEntries: setting({
    env: "REQUEST_MAX_ENTRIES",
    codec: integer(positiveInteger),
    default: 100,
    meaning:
      "Most entries in one descriptor; more is INVALID_ARGUMENT / 400 (docs/limits.md).",
  }),
  /**
   * Longest entry key, entry value or domain in UTF-8 bytes, ≥ 1; longer is INVALID_ARGUMENT
   * (docs/limits.md).
   */
  requestMaxEntryBytes: setting({
    env: "REQUEST_MAX_ENTRY_BYTES",
    codec: integer(positiveInteger),
    default: 65536,
    unit: "bytes",
    meaning:
      "Longest entry key, entry value or domain (UTF-8); longer is INVALID_ARGUMENT / 400 (docs/limits.md).",
  }),
});

/** Worker processes need a shared backend and a statistics sink that adds up across them. */
export const rateLimitingChecks: readonly SettingsCheck<
  SettingsOf<typeof rateLimiting> &
    Pick<SettingsOf<typeof statistics>, "usePullStats" | "disableStats">
>[] = [
  // Each worker would serve its own share of the counters on the shared pull port.
  (settings, reader) => {
    if (
      settings.workers > 1 &&
      settings.usePullStats &&
      !settings.disableStats &&
      reader.allValid("WORKERS", "USE_PULLSTATS")
    ) {
      reader.problem(
        `WORKERS=${settings.workers} with USE_PULLSTATS=true: each worker process would answer scrapes with its own counters; use a push sink (USE_PUSHSTATS or USE_TAGGED_PUSHSTATS, which add up across processes) or WORKERS=1`,
      );
    }
  },
  // Workers each keep their own in-process counters: only a shared backend counts right.
  (settings, reader) => {
    if (
      settings.workers > 1 &&
      settings.backendType === "memory" &&
      reader.allValid("WORKERS", "BACKEND_TYPE")
    ) {
      reader.problem(
        `WORKERS=${settings.workers} with BACKEND_TYPE=memory: the memory backend keeps counters in one process; use WORKERS=1 or a shared backend (kv or mc)`,
      );
    }
  },
];
