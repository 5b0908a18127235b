/**
 * Options of {@link createExponentialBackoff}. All durations are in milliseconds.
 */
export interface BackoffOptions {
  /**
   * Base wait before the first retry, in milliseconds; must be > 0. The base doubles (see
   * `multiplier`) after every wait.
   */
  readonly initialIntervalMs: number;
  /**
   * Upper bound of every wait, in milliseconds, jitter included; once the base reaches it, later
   * retries keep waiting this long. A value below `initialIntervalMs` makes every wait equal to
   * it (the reference's clamping). Must be ≥ 0.
   */
  readonly maxIntervalMs: number;
  /**
   * Growth of the base per retry, ≥ 1.
   * @defaultValue 2
   */
  readonly multiplier?: number;
  /**
   * Spread of the jitter as a ratio of the base, 0 … 1: with jitter on, a wait is drawn
   * uniformly from `[base × (1 − randomFactor), base × (1 + randomFactor))`, then capped at
   * `maxIntervalMs`. Values above 1 are treated as 1; ignored when `jitter` is false.
   * @defaultValue 0.5
   */
  readonly randomFactor?: number;
  /**
   * Randomise each wait by `randomFactor`; when false every wait is exactly the (capped) base.
   * @defaultValue false
   */
  readonly jitter?: boolean;
  /**
   * Source of uniform random numbers in [0, 1), like `Math.random`; injected so tests are
   * deterministic (upstream `JitterRandSource`).
   */
  readonly random: () => number;
}

/** Successive retry waits of one retry loop; see {@link createExponentialBackoff}. */
export interface Backoff {
  /** Returns the wait before the next retry, in milliseconds, and advances the attempt. */
  next(): number;
  /** Starts again from the initial interval, after a success. */
  reset(): void;
  /** Waits handed out since the last reset (0 before the first). */
  readonly attempt: number;
}

const defaultMultiplier = 2;
const defaultRandomFactor = 0.5;

/**
 * Creates an exponential backoff: the base of attempt n (from 0) is
 * `min(initialIntervalMs × multiplier^n, maxIntervalMs)`; with jitter each wait is the base
 * scaled by a uniform factor in `[1 − randomFactor, 1 + randomFactor)`, capped at
 * `maxIntervalMs`. With the xDS defaults (10 s, 60 s, factor 0.5, jitter on) the bases are
 * 10, 20, 40, 60, 60 … seconds and the waits 5–15, 10–30, 20–60, 30–60 … seconds.
 *
 * Deliberate difference (docs/reference-parity.md#diff-xds-backoff): upstream
 * `xds_grpc_sotw_provider.go` feeds `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` to jpillora/backoff as
 * its growth factor, so the default 0.5 is clamped to a constant 10 s wait. Here the growth is
 * a fixed multiplier and the random factor is what its name says: the spread of the jitter.
 *
 * @throws RangeError when `initialIntervalMs` is not > 0, `maxIntervalMs` or `randomFactor` is
 *   negative, or `multiplier` is below 1 (each message names the option)
 */
export function createExponentialBackoff(options: BackoffOptions): Backoff {
  const initial = options.initialIntervalMs;
  const max = options.maxIntervalMs;
  const multiplier = options.multiplier ?? defaultMultiplier;
  const randomFactor = Math.min(options.randomFactor ?? defaultRandomFactor, 1);
  const jitter = options.jitter ?? false;
  const random = options.random;
  if (!(initial > 0) || !Number.isFinite(initial)) {
    throw new RangeError(
      `invalid initialIntervalMs ${initial}: must be a finite number > 0`,
    );
  }
  if (!(max >= 0)) {
    throw new RangeError(`invalid maxIntervalMs ${max}: must be ≥ 0`);
  }
  if (!(multiplier >= 1) || !Number.isFinite(multiplier)) {
    throw new RangeError(
      `invalid multiplier ${multiplier}: must be a finite number ≥ 1`,
    );
  }
  if (!(randomFactor >= 0)) {
    throw new RangeError(`invalid randomFactor ${randomFactor}: must be ≥ 0`);
  }

  let attempt = 0;
  // The base of the next wait; kept instead of recomputed from `attempt` so that it stops
  // growing at the cap and never overflows to Infinity.
  let base = Math.min(initial, max);
  return {
    get attempt() {
      return attempt;
    },
    next() {
      let wait = base;
      if (jitter && randomFactor > 0) {
        // Uniform in [base·(1−f), base·(1+f)): 2r−1 maps r ∈ [0, 1) onto [−1, 1).
        wait = base * (1 + randomFactor * (2 * random() - 1));
      }
      attempt++;
      base = Math.min(base * multiplier, max);
      return Math.min(Math.max(wait, 0), max);
    },
    reset() {
      attempt = 0;
      base = Math.min(initial, max);
    },
  };
}
