import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import {
  bucketKey,
  bucketPolicy,
  orderBucketEntries,
  parseBucketKey,
} from "../../../src/rlqs/bucket-lookup.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { create } from "@bufbuild/protobuf";
import { OverrideTable } from "../../../src/overrides/override-table.js";
import {
  OverrideLimitSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { FakeClock } from "../../helpers/fake-clock.js";

const yaml = `
domain: rlqs
descriptors:
  - key: tenant
    value: gold
    rate_limit: { unit: second, requests_per_unit: 100 }
  - key: tenant
    value: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: tenant
    value: free
    rate_limit: { unlimited: true }
  - key: tenant
    value: trial
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 60 }
  - key: tenant
    value: shared
    rate_limit: { unit: second, requests_per_unit: 10, unit_multiplier: 4 }
  - key: tenant
    value: tb
    rate_limit: { unit: minute, requests_per_unit: 300, algorithm: token_bucket }
  - key: tenant
    descriptors:
      - key: path
        value: /api
        rate_limit: { unit: second, requests_per_unit: 7 }
  - key: user
    value: "vip*"
    rate_limit: { unit: hour, requests_per_unit: 3600 }
`;

function config(): RateLimitConfig {
  return loadConfig([{ name: "rlqs.yaml", text: yaml }], {
    statsManager: createStatsManager(),
  });
}

describe("bucket lookup", () => {
  it("orders an unordered map by the tree's own nesting", () => {
    const root = config().view!.domainRules("rlqs")!;
    expect(orderBucketEntries(root, { path: "/api", tenant: "x" })).toEqual([
      ["tenant", "x"],
      ["path", "/api"],
    ]);
    expect(orderBucketEntries(root, { nope: "1" })).toBeUndefined();
    expect(
      orderBucketEntries(root, { tenant: "gold", extra: "1" }),
    ).toBeUndefined();
  });

  it("gives the rule's rate per second for each algorithm", () => {
    const c = config();
    const rate = (bucket: Record<string, string>) => {
      const policy = bucketPolicy(c, "rlqs", bucket);
      return policy.kind === "limited" ? policy.ratePerSecond : policy.kind;
    };
    expect(rate({ tenant: "gold" })).toBe(100);
    expect(rate({ tenant: "shared" })).toBe(10 / 4);
    expect(rate({ tenant: "tb" })).toBe(5);
    expect(rate({ tenant: "blocked" })).toBe(0);
    expect(rate({ path: "/api", tenant: "anyone" })).toBe(7);
    expect(rate({ user: "vip-1" })).toBe(1);
  });

  it("answers ALLOW_ALL for no rule, an unknown domain and unlimited", () => {
    const c = config();
    expect(bucketPolicy(c, "rlqs", { user: "nobody" })).toMatchObject({
      kind: "allow_all",
      reason: "no_rule",
    });
    expect(bucketPolicy(c, "other", { tenant: "gold" })).toMatchObject({
      kind: "allow_all",
      reason: "unknown_domain",
    });
    expect(bucketPolicy(c, "rlqs", { tenant: "free" })).toMatchObject({
      kind: "allow_all",
      reason: "unlimited",
    });
  });

  it("keeps shadow mode (rule or global) with the rate", () => {
    const c = config();
    expect(bucketPolicy(c, "rlqs", { tenant: "trial" })).toMatchObject({
      kind: "limited",
      ratePerSecond: 1,
      shadow: true,
    });
    expect(bucketPolicy(c, "rlqs", { tenant: "gold" }, true)).toMatchObject({
      shadow: true,
    });
  });

  it("keys a bucket the same whatever its key order", () => {
    expect(bucketKey({ a: "A", b: "B" })).toBe(bucketKey({ b: "B", a: "A" }));
    expect(bucketKey({ a: "x&b=y" })).not.toBe(bucketKey({ a: "x", b: "y" }));
  });

  it("splits at a run-time override's rate, while it is in force", () => {
    const c = config();
    const clock = new FakeClock(1_800_000_000);
    const table = new OverrideTable({ clock });
    const override = table.find.bind(table);
    const set = (
      value: string,
      init: Record<string, unknown>,
      expireMs?: number,
    ) =>
      table.put({
        domain: "rlqs",
        entries: [{ key: "tenant", value }],
        limit: create(OverrideLimitSchema, {
          unitMultiplier: 1,
          algorithm: "fixed_window",
          ...init,
        }),
        expireMs,
        reason: "",
        actor: "test",
        updateMs: clock.nowMs(),
      });
    set(
      "gold",
      { requestsPerUnit: 500, unit: Unit.SECOND },
      clock.nowMs() + 10_000,
    );
    set("shared", { unlimited: true, unitMultiplier: 0, algorithm: "" });
    set("tb", { requestsPerUnit: 0, unit: Unit.MINUTE });
    expect(
      bucketPolicy(c, "rlqs", { tenant: "gold" }, false, override),
    ).toMatchObject({
      kind: "limited",
      ratePerSecond: 500,
      rule: "rlqs.tenant_gold",
    });
    expect(
      bucketPolicy(c, "rlqs", { tenant: "shared" }, false, override),
    ).toMatchObject({
      kind: "allow_all",
      reason: "unlimited",
    });
    expect(
      bucketPolicy(c, "rlqs", { tenant: "tb" }, false, override),
    ).toMatchObject({
      kind: "limited",
      ratePerSecond: 0,
    });
    // Without the table, or once the override expired: the rule's rate.
    expect(bucketPolicy(c, "rlqs", { tenant: "gold" })).toMatchObject({
      ratePerSecond: 100,
    });
    clock.seconds += 11;
    expect(
      bucketPolicy(c, "rlqs", { tenant: "gold" }, false, override),
    ).toMatchObject({
      ratePerSecond: 100,
    });
  });

  it("reads a canonical bucket key back into its entries", () => {
    for (const bucket of [
      { tenant: "gold" },
      { b: "B", a: "A" },
      { "k=&%": "v=1&w=%26", "": "" },
    ])
      expect(parseBucketKey(bucketKey(bucket))).toEqual(bucket);
    expect(parseBucketKey("")).toBeUndefined();
    expect(parseBucketKey("novalue")).toBeUndefined();
  });
});
