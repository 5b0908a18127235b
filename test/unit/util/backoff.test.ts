import { describe, expect, it } from "vitest";
import { createExponentialBackoff } from "../../../src/util/backoff.js";

/** Returns the given random values in turn. */
const sequence = (...values: number[]) => {
  let i = 0;
  return () => values[i++ % values.length]!;
};

const waits = (next: () => number, count: number): number[] =>
  Array.from({ length: count }, next);

describe("createExponentialBackoff", () => {
  it("doubles the wait from the initial interval up to the maximum, then stays there", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 10_000,
      maxIntervalMs: 60_000,
      random: () => 0.5,
    });
    expect(waits(() => backoff.next(), 6)).toEqual([
      10_000, 20_000, 40_000, 60_000, 60_000, 60_000,
    ]);
    expect(backoff.attempt).toBe(6);
  });

  it("grows with the default random factor 0.5 instead of staying constant (deliberate difference from the reference)", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 10_000,
      maxIntervalMs: 60_000,
      randomFactor: 0.5,
      jitter: false,
      random: () => 0,
    });
    expect(waits(() => backoff.next(), 3)).toEqual([10_000, 20_000, 40_000]);
  });

  it("spreads each wait by ±randomFactor with jitter, using the injected random", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 1_000,
      maxIntervalMs: 60_000,
      randomFactor: 0.5,
      jitter: true,
      // 0 → lowest (1 − f), 0.5 → the base, 0.75 → base × (1 + f/2)
      random: sequence(0, 0.5, 0.75),
    });
    expect(waits(() => backoff.next(), 3)).toEqual([500, 2_000, 5_000]);
  });

  it("never waits longer than the maximum, jitter included", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 40,
      maxIntervalMs: 100,
      randomFactor: 1,
      jitter: true,
      random: () => 0.999,
    });
    expect(waits(() => backoff.next(), 4)).toEqual([
      expect.closeTo(79.92, 5),
      100,
      100,
      100,
    ]);
  });

  it("treats a random factor above 1 as 1, so a wait is never negative", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 100,
      maxIntervalMs: 1_000,
      randomFactor: 3,
      jitter: true,
      random: () => 0,
    });
    expect(backoff.next()).toBe(0);
  });

  it("waits the maximum when it is below the initial interval", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 10_000,
      maxIntervalMs: 5_000,
      random: Math.random,
    });
    expect(waits(() => backoff.next(), 2)).toEqual([5_000, 5_000]);
  });

  it("starts over from the initial interval after reset", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 50,
      maxIntervalMs: 200,
      random: Math.random,
    });
    waits(() => backoff.next(), 3);
    backoff.reset();
    expect(backoff.attempt).toBe(0);
    expect(backoff.next()).toBe(50);
  });

  it("honours a custom multiplier", () => {
    const backoff = createExponentialBackoff({
      initialIntervalMs: 100,
      maxIntervalMs: 10_000,
      multiplier: 1.5,
      random: Math.random,
    });
    expect(waits(() => backoff.next(), 3)).toEqual([100, 150, 225]);
  });

  it.each([
    [{ initialIntervalMs: 0 }, /initialIntervalMs/],
    [{ initialIntervalMs: Number.NaN }, /initialIntervalMs/],
    [{ maxIntervalMs: -1 }, /maxIntervalMs/],
    [{ multiplier: 0.5 }, /multiplier/],
    [{ randomFactor: -0.1 }, /randomFactor/],
  ])("rejects invalid options %o", (override, message) => {
    expect(() =>
      createExponentialBackoff({
        initialIntervalMs: 10,
        maxIntervalMs: 100,
        random: Math.random,
        ...override,
      }),
    ).toThrow(message);
  });
});
