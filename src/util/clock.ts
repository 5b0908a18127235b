/** Source of the current time; injected everywhere so tests control windows. */
export interface Clock {
  /** Whole seconds since the Unix epoch (UTC), rounded down. */
  nowSeconds(): number;
  /** Milliseconds since the Unix epoch (UTC). */
  nowMs(): number;
}

/** The real clock. */
export const systemClock: Clock = {
  nowSeconds: () => Math.floor(Date.now() / 1000),
  nowMs: () => Date.now(),
};
