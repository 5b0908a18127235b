// `replaces` with the limit groups of `rate_limits:` lists (issue 23): a group is replaced as a
// whole when any of its limits is named in another matched rule's `replaces`.
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { applyLimitRules } from "../../../src/limiter/decision-rules.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { create } from "@bufbuild/protobuf";
import { RateLimitDescriptorSchema } from "../../../src/proto.js";

const stats = createStatsManager();
const limit = (key: string, extra: Partial<RateLimit> = {}): RateLimit =>
  testRateLimit(stats, key, 10, undefined, extra);

/** A group as the loader builds it: the first limit with the others as extraLimits. */
const group = (key: string, ...names: string[]): RateLimit =>
  limit(key, {
    name: names[0] ?? "",
    extraLimits: names.slice(1).map((name) => limit(key, { name })),
  });

describe("applyLimitRules with rate_limits groups", () => {
  it("drops a whole group when its first limit's name is replaced", () => {
    const limits: (RateLimit | undefined)[] = [
      group("g", "a", "b"),
      limit("r", { replaces: ["a"] }),
    ];
    applyLimitRules(limits);
    expect(limits.map((l) => l?.fullKey)).toEqual([undefined, "r"]);
  });

  it("drops a whole group when another limit of it is named", () => {
    const limits: (RateLimit | undefined)[] = [
      group("g", "", "b", "c"),
      limit("r", { replaces: ["c"] }),
    ];
    applyLimitRules(limits);
    expect(limits.map((l) => l?.fullKey)).toEqual([undefined, "r"]);
  });

  it("keeps a group none of whose names is replaced", () => {
    const g = group("g", "a", "b");
    const limits: (RateLimit | undefined)[] = [
      g,
      limit("r", { replaces: ["x"] }),
    ];
    applyLimitRules(limits);
    expect(limits[0]).toBe(g);
  });

  it("lets a group replace others through its limits' replaces", () => {
    const g = limit("g", {
      extraLimits: [limit("g", { replaces: ["old"] })],
    });
    const limits: (RateLimit | undefined)[] = [
      g,
      limit("old", { name: "old" }),
    ];
    applyLimitRules(limits);
    expect(limits.map((l) => l?.fullKey)).toEqual(["g", undefined]);
  });

  it("keeps single limits as before: an unnamed one is never replaced", () => {
    const limits: (RateLimit | undefined)[] = [
      limit("u"),
      limit("r", { replaces: [""] }),
    ];
    applyLimitRules(limits);
    expect(limits.map((l) => l?.fullKey)).toEqual(["u", "r"]);
  });

  it("replaces a group loaded from YAML by the name of its second entry", () => {
    const config = loadConfig(
      [
        {
          name: "a.yaml",
          text: [
            "domain: d",
            "descriptors:",
            "  - key: user",
            "    rate_limits:",
            "      - {unit: second, requests_per_unit: 5}",
            "      - {unit: day, requests_per_unit: 500, name: user_daily}",
            "  - key: vip",
            "    rate_limit:",
            "      unit: second",
            "      requests_per_unit: 50",
            "      replaces: [{name: user_daily}]",
            "",
          ].join("\n"),
        },
      ],
      { statsManager: createStatsManager() },
    );
    const get = (key: string) =>
      config.getLimit(
        "d",
        create(RateLimitDescriptorSchema, { entries: [{ key, value: "x" }] }),
      );
    const limits: (RateLimit | undefined)[] = [get("user"), get("vip")];
    expect(limits[0]?.extraLimits).toHaveLength(1);
    applyLimitRules(limits);
    expect(limits.map((l) => l?.fullKey)).toEqual([undefined, "d.vip"]);
  });
});
