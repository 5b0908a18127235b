import { describe, expect, it } from "vitest";
import {
  CanaryReport,
  descriptorText,
  otherRules,
} from "../../../src/canary/canary-report.js";
import { descriptor } from "../../helpers/requests.js";

describe("CanaryReport", () => {
  it("orders rules by changes, then name, with top values heaviest first", () => {
    const report = new CanaryReport();
    report.record("admit", "rl.b", "rl", descriptor(["b", "1"]));
    for (let i = 0; i < 3; i++)
      report.record("refuse", "rl.a", "rl", descriptor(["a", "x"]));
    report.record("admit", "rl.a", "rl", descriptor(["a", "y"]));
    report.record("refuse", "rl.c", "rl", descriptor(["c", "1"]));
    report.requests = 10;
    const message = report.toMessage(true, 1_700_000_000_000, "inline");
    expect(message.changedRequests).toBe(6n);
    expect(
      message.rules.map((r) => [r.rule, r.wouldRefuse, r.wouldAdmit]),
    ).toEqual([
      ["rl.a", 3n, 1n],
      ["rl.b", 0n, 1n],
      ["rl.c", 1n, 0n],
    ]);
    expect(
      message.rules[0]?.top.map((o) => [o.descriptor, o.hits, o.overLimit]),
    ).toEqual([
      ["a=x", 3n, 3n],
      ["a=y", 1n, 0n],
    ]);
  });

  it("keeps memory bounded: rules beyond maxRules add up under one name, values beyond the sketch estimated", () => {
    const report = new CanaryReport({
      maxRules: 2,
      topValues: 2,
      trackedValues: 2,
    });
    report.record("refuse", "r1", "d", descriptor(["k", "1"]));
    report.record("refuse", "r2", "d", descriptor(["k", "2"]));
    report.record("refuse", "r3", "d", descriptor(["k", "3"]));
    report.record("admit", "r4", "d", descriptor(["k", "4"]));
    for (const value of ["a", "a", "a", "b", "c", "c"])
      report.record("refuse", "r1", "d", descriptor(["v", value]));
    const message = report.toMessage(false, 0, "");
    expect(message.rules.map((r) => r.rule).sort()).toEqual(
      ["r1", "r2", otherRules].sort(),
    );
    const other = message.rules.find((r) => r.rule === otherRules);
    expect([other?.wouldRefuse, other?.wouldAdmit]).toEqual([1n, 1n]);
    const top = message.rules.find((r) => r.rule === "r1")?.top ?? [];
    expect(top).toHaveLength(2);
    // Space-Saving: every estimate is at least the truth and at most its error above it.
    const truth: Record<string, number> = { "v=a": 3, "v=c": 2, "v=b": 1 };
    for (const o of top) {
      expect(Number(o.hits)).toBeGreaterThanOrEqual(truth[o.descriptor] ?? 0);
      expect(Number(o.hits - o.error)).toBeLessThanOrEqual(
        truth[o.descriptor] ?? 0,
      );
    }
    expect(() => new CanaryReport({ trackedValues: 1, topValues: 2 })).toThrow(
      RangeError,
    );
  });

  it("writes a descriptor as k=v,k2=v2, cut to the bound", () => {
    expect(descriptorText(descriptor(["a", "1"], ["b", "2"]), 100)).toBe(
      "a=1,b=2",
    );
    expect(descriptorText(descriptor(["key", "x".repeat(50)]), 10)).toBe(
      "key=xxxxx…",
    );
  });
});
