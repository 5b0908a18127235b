import { describe, expect, it } from "vitest";
import { CanaryLedger } from "../../../src/canary/canary-ledger.js";
import { resolveGcraParams } from "../../../src/limiter/gcra.js";

describe("CanaryLedger", () => {
  it("counts a key as the live count last seen plus its extra, never below 0", () => {
    const ledger = new CanaryLedger();
    expect(ledger.count("k")).toBe(0);
    const entry = ledger.entry("k", 120);
    entry.seen = 5;
    entry.extra = -2;
    expect(ledger.count("k")).toBe(3);
    entry.extra = -9;
    expect(ledger.count("k")).toBe(0);
    expect(ledger.extra("k")).toBe(-9);
    expect(ledger.extra(undefined)).toBe(0);
  });

  it("drops keys whose window ended at the sweep, keeps the others", () => {
    const ledger = new CanaryLedger();
    ledger.entry("a", 60).extra = 1;
    ledger.entry("b", 120).extra = 1;
    ledger.sweep(59);
    expect(ledger.size).toBe(2);
    ledger.sweep(60);
    expect(ledger.get("a")).toBeUndefined();
    expect(ledger.get("b")?.extra).toBe(1);
  });

  it("keeps a token bucket until it is full again, a later TAT moving that later", () => {
    const ledger = new CanaryLedger();
    // 1 hit per second, burst 1: each take moves the TAT one second on.
    const params = resolveGcraParams({ requestsPerUnit: 1, windowSeconds: 1 });
    const now = 1_000_000_000_000;
    expect(ledger.takeTokens("tb", params, 1, now).allowed).toBe(true);
    expect(ledger.takeTokens("tb", params, 1, now).allowed).toBe(false);
    expect(ledger.get("tb")?.expiresAtSeconds).toBe(1_000_001);
    ledger.sweep(1_000_000);
    expect(ledger.takeTokens("tb", params, 1, now + 1_000_000).allowed).toBe(
      true,
    );
    expect(ledger.get("tb")?.expiresAtSeconds).toBe(1_000_002);
    ledger.sweep(1_000_001);
    expect(ledger.get("tb")).toBeDefined();
  });

  it("holds at most maxKeys, dropping the keys whose windows end first", () => {
    const ledger = new CanaryLedger({ maxKeys: 2 });
    ledger.entry("late", 300);
    ledger.entry("soon", 60);
    ledger.entry("new", 120);
    expect(ledger.size).toBe(2);
    expect(ledger.get("soon")).toBeUndefined();
    expect(ledger.get("late")).toBeDefined();
    expect(ledger.dropped).toBe(1);
    expect(() => new CanaryLedger({ maxKeys: 0 })).toThrow(RangeError);
  });
});
