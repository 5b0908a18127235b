import { describe, expect, it } from "vitest";
import { CircuitBreaker } from "../../../src/limiter/circuit-breaker.js";
import { FakeClock } from "../../helpers/fake-clock.js";

function breaker(
  failureThreshold = 3,
  probeIntervalMs = 2000,
): { clock: FakeClock; breaker: CircuitBreaker } {
  const clock = new FakeClock(60_000);
  return {
    clock,
    breaker: new CircuitBreaker({ failureThreshold, probeIntervalMs, clock }),
  };
}

describe("CircuitBreaker", () => {
  it("opens after the threshold of consecutive failures, once", () => {
    const { breaker: b } = breaker(3);
    expect(b.recordFailure()).toBe(false);
    expect(b.recordFailure()).toBe(false);
    expect(b.open).toBe(false);
    expect(b.recordFailure()).toBe(true);
    expect(b.open).toBe(true);
    expect(b.consecutiveFailures).toBe(3);
    // A concurrent call failing while open counts but does not open it again.
    expect(b.recordFailure()).toBe(false);
    expect(b.consecutiveFailures).toBe(4);
  });

  it("needs consecutive failures: a success resets the count", () => {
    const { breaker: b } = breaker(3);
    for (let round = 0; round < 3; round++) {
      b.recordFailure();
      b.recordFailure();
      b.recordSuccess();
    }
    expect(b.open).toBe(false);
    expect(b.consecutiveFailures).toBe(0);
  });

  it("starts no probe while closed", () => {
    const { clock, breaker: b } = breaker(1);
    clock.seconds += 10;
    expect(b.startProbe()).toBe(false);
  });

  it("probes one interval after opening, one probe at a time", () => {
    const { clock, breaker: b } = breaker(1, 2000);
    b.recordFailure();
    expect(b.startProbe()).toBe(false);
    clock.seconds += 1;
    expect(b.startProbe()).toBe(false);
    clock.seconds += 1;
    expect(b.startProbe()).toBe(true);
    // The probe runs: nobody else probes, even long after.
    clock.seconds += 10;
    expect(b.startProbe()).toBe(false);
  });

  it("schedules the next probe one interval after the failed probe started", () => {
    const { clock, breaker: b } = breaker(1, 2000);
    b.recordFailure();
    clock.seconds += 2;
    expect(b.startProbe()).toBe(true);
    // The probe's round trip takes a second before it fails.
    clock.seconds += 1;
    b.probeFailed();
    expect(b.open).toBe(true);
    expect(b.consecutiveFailures).toBe(2);
    expect(b.startProbe()).toBe(false);
    clock.seconds += 1;
    expect(b.startProbe()).toBe(true);
  });

  it("closes on a good probe and needs the threshold again to reopen", () => {
    const { clock, breaker: b } = breaker(2, 2000);
    b.recordFailure();
    b.recordFailure();
    clock.seconds += 2;
    expect(b.startProbe()).toBe(true);
    expect(b.probeSucceeded()).toBe(true);
    expect(b.open).toBe(false);
    expect(b.consecutiveFailures).toBe(0);
    expect(b.recordFailure()).toBe(false);
    expect(b.open).toBe(false);
    expect(b.recordFailure()).toBe(true);
    // Reopened: the next probe is one interval from now, not from the last one.
    clock.seconds += 1;
    expect(b.startProbe()).toBe(false);
    clock.seconds += 1;
    expect(b.startProbe()).toBe(true);
  });

  it("abandons a probe that ended in an error not the backend's, counting nothing", () => {
    const { clock, breaker: b } = breaker(1, 2000);
    b.recordFailure();
    clock.seconds += 2;
    expect(b.startProbe()).toBe(true);
    b.abandonProbe();
    expect(b.open).toBe(true);
    expect(b.consecutiveFailures).toBe(1);
    // Still due: the next request probes at once.
    expect(b.startProbe()).toBe(true);
  });

  it("checks its numbers", () => {
    const clock = new FakeClock(0);
    expect(() => new CircuitBreaker({ failureThreshold: 0, clock })).toThrow(
      "invalid failureThreshold 0: expected an integer ≥ 1",
    );
    expect(() => new CircuitBreaker({ failureThreshold: 1.5, clock })).toThrow(
      /failureThreshold/,
    );
    expect(() => new CircuitBreaker({ probeIntervalMs: 0, clock })).toThrow(
      "invalid probeIntervalMs 0: expected > 0",
    );
    const defaults = new CircuitBreaker({ clock });
    expect(defaults.threshold).toBe(3);
    expect(defaults.probeIntervalMs).toBe(500);
  });
});
