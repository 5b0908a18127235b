import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type {
  RateLimit,
  RateLimitConfig,
} from "../../../src/config/rate-limit-config.js";
import { resolveRequest } from "../../../src/limiter/limit-request.js";
import {
  OverrideLimitSchema,
  OverrideRateLimitUnit,
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type OverrideLimit,
  type RateLimitDescriptor,
} from "../../../src/proto.js";
import {
  descriptorText,
  parseDescriptorText,
  parseProbeKey,
  probeKey,
} from "../../../src/overrides/override-key.js";
import {
  OverrideTable,
  type OverrideRecord,
} from "../../../src/overrides/override-table.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { bucketOfLimit } from "../../helpers/rate-limit.js";
import { descriptor } from "../../helpers/requests.js";

type LimitInit = MessageInitShape<typeof OverrideLimitSchema>;

const yaml = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
    descriptors:
      - key: plan
        rate_limit: { unit: second, requests_per_unit: 5 }
  - key: path
    value: "/v1/*"
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: sliding_window }
  - key: detailed
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 3 }
`;

function setup(): {
  config: RateLimitConfig;
  table: OverrideTable;
  clock: FakeClock;
} {
  const config = loadConfig([{ name: "config.yaml", text: yaml }], {
    statsManager: createStatsManager(),
  });
  const clock = new FakeClock(1_800_000_000);
  return { config, table: new OverrideTable({ clock }), clock };
}

function limit(init: LimitInit): OverrideLimit {
  return create(OverrideLimitSchema, {
    unitMultiplier: 1,
    algorithm: "fixed_window",
    ...init,
  });
}

function record(
  entries: [string, string][],
  init: LimitInit,
  extra: Partial<OverrideRecord> = {},
): OverrideRecord {
  return {
    domain: "api",
    entries: entries.map(([key, value]) => ({ key, value })),
    limit: limit(init),
    expireMs: undefined,
    reason: "",
    actor: "test",
    updateMs: 0,
    ...extra,
  };
}

/** The limit ShouldRateLimit would count for one descriptor. */
function decided(
  config: RateLimitConfig,
  table: OverrideTable,
  d: RateLimitDescriptor,
): RateLimit | undefined {
  return resolveRequest(config, "api", [d], 1, table).limits[0];
}

describe("OverrideTable", () => {
  it("replaces the matched rule's limit for the exact descriptor only", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "acme"]], {
        requestsPerUnit: 1000,
        unit: Unit.HOUR,
      }),
    );
    const acme = decided(config, table, descriptor(["tenant", "acme"]));
    expect(acme?.requestsPerUnit).toBe(1000);
    expect(acme?.unit).toBe(Unit.HOUR);
    expect(acme?.windowSeconds).toBe(3600);
    const other = decided(config, table, descriptor(["tenant", "other"]));
    expect(other?.requestsPerUnit).toBe(10);
    expect(other?.unit).toBe(Unit.MINUTE);
  });

  it("keeps the rule's stats handles, full key and name (one stats key, never one per value)", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "acme"]], { requestsPerUnit: 7, unit: Unit.MINUTE }),
    );
    const rule = config.getLimit("api", descriptor(["tenant", "acme"]))!;
    const overridden = decided(config, table, descriptor(["tenant", "acme"]))!;
    expect(overridden.stats).toBe(rule.stats);
    expect(overridden.stats.key).toBe("api.tenant");
    expect(overridden.fullKey).toBe(rule.fullKey);
    // Fixed one-unit window: the cache key stays the rule's format (no suffix).
    expect(overridden.cacheKeySuffix).toBe("");
  });

  it("builds the window of any algorithm with the config's compiler", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "tb"]], {
        requestsPerUnit: 60,
        unit: Unit.MINUTE,
        algorithm: "token_bucket",
        burst: 5,
      }),
    );
    table.put(
      record([["tenant", "sw"]], {
        requestsPerUnit: 9,
        unit: Unit.MINUTE,
        unitMultiplier: 5,
        algorithm: "sliding_window",
      }),
    );
    const tb = decided(config, table, descriptor(["tenant", "tb"]))!;
    expect(bucketOfLimit(tb)?.burst).toBe(5);
    expect(tb.cacheKeySuffix).toBe("tb60_60_5");
    const sw = decided(config, table, descriptor(["tenant", "sw"]))!;
    expect(sw.algorithm.kind).toBe("sliding_window");
    expect(sw.windowSeconds).toBe(300);
    expect(sw.cacheKeySuffix).toBe("_s300");
  });

  it("makes a descriptor unlimited, or refuses everything with 0", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "free"]], {
        unlimited: true,
        unitMultiplier: 0,
        algorithm: "",
      }),
    );
    table.put(
      record([["tenant", "blocked"]], {
        requestsPerUnit: 0,
        unit: Unit.MINUTE,
      }),
    );
    const { limits, unlimited } = resolveRequest(
      config,
      "api",
      [descriptor(["tenant", "free"]), descriptor(["tenant", "blocked"])],
      1,
      table,
    );
    expect(unlimited).toEqual([true, false]);
    expect(limits[0]).toBeUndefined();
    expect(limits[1]?.requestsPerUnit).toBe(0);
  });

  it("matches a prefix wildcard, the most specific first, and an exact override before any", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "ac*"]], { requestsPerUnit: 1, unit: Unit.MINUTE }),
    );
    table.put(
      record([["tenant", "acme-*"]], { requestsPerUnit: 2, unit: Unit.MINUTE }),
    );
    table.put(
      record([["tenant", "acme-gold"]], {
        requestsPerUnit: 3,
        unit: Unit.MINUTE,
      }),
    );
    const rpu = (value: string) =>
      decided(config, table, descriptor(["tenant", value]))?.requestsPerUnit;
    expect(rpu("acme-gold")).toBe(3);
    expect(rpu("acme-silver")).toBe(2);
    expect(rpu("acorn")).toBe(1);
    expect(rpu("beta")).toBe(10);
  });

  it("matches a wildcard only on the same keys in the same order and count", () => {
    const { config, table } = setup();
    table.put(
      record(
        [
          ["tenant", "*"],
          ["plan", "gold"],
        ],
        { requestsPerUnit: 50, unit: Unit.SECOND },
      ),
    );
    const nested = decided(
      config,
      table,
      descriptor(["tenant", "x"], ["plan", "gold"]),
    );
    expect(nested?.requestsPerUnit).toBe(50);
    expect(nested?.stats.key).toBe("api.tenant.plan");
    expect(
      decided(config, table, descriptor(["tenant", "x"], ["plan", "free"]))
        ?.requestsPerUnit,
    ).toBe(5);
    expect(
      decided(config, table, descriptor(["tenant", "x"]))?.requestsPerUnit,
    ).toBe(10);
  });

  it("prefers fewer wildcard entries, then longer prefixes; '*' alone matches any value", () => {
    const { config, table } = setup();
    const nested = (tenant: string, plan: string, rpu: number) =>
      table.put(
        record(
          [
            ["tenant", tenant],
            ["plan", plan],
          ],
          { requestsPerUnit: rpu, unit: Unit.SECOND },
        ),
      );
    nested("acme-*", "gold", 1);
    nested("acme-gold-*", "*", 2);
    nested("*", "*", 3);
    const rpu = (tenant: string, plan: string) =>
      decided(config, table, descriptor(["tenant", tenant], ["plan", plan]))
        ?.requestsPerUnit;
    expect(rpu("acme-gold-1", "gold")).toBe(1);
    expect(rpu("acme-gold-1", "free")).toBe(2);
    expect(rpu("other", "")).toBe(3);
    table.remove("api", [
      { key: "tenant", value: "acme-*" },
      { key: "plan", value: "gold" },
    ]);
    expect(rpu("acme-gold-1", "gold")).toBe(2);
    table.remove("api", [
      { key: "tenant", value: "*" },
      { key: "plan", value: "*" },
    ]);
    expect(rpu("other", "x")).toBe(5);
  });

  it("stops applying an override at its expiry, and takes it once", () => {
    const { config, table, clock } = setup();
    const expireMs = clock.nowMs() + 60_000;
    table.put(
      record(
        [["tenant", "acme"]],
        { requestsPerUnit: 99, unit: Unit.MINUTE },
        { expireMs },
      ),
    );
    expect(
      decided(config, table, descriptor(["tenant", "acme"]))?.requestsPerUnit,
    ).toBe(99);
    clock.seconds += 59;
    expect(table.takeExpired(clock.nowMs())).toEqual([]);
    clock.seconds += 1;
    // Not yet swept, already not applied.
    expect(
      decided(config, table, descriptor(["tenant", "acme"]))?.requestsPerUnit,
    ).toBe(10);
    expect(table.list("api", clock.nowMs())).toEqual([]);
    const taken = table.takeExpired(clock.nowMs());
    expect(taken.map((r) => r.expireMs)).toEqual([expireMs]);
    expect(table.takeExpired(clock.nowMs())).toEqual([]);
    expect(table.size).toBe(0);
  });

  it("falls back to a wildcard when the exact override has expired", () => {
    const { config, table, clock } = setup();
    table.put(
      record([["tenant", "a*"]], { requestsPerUnit: 1, unit: Unit.MINUTE }),
    );
    table.put(
      record(
        [["tenant", "acme"]],
        { requestsPerUnit: 2, unit: Unit.MINUTE },
        { expireMs: clock.nowMs() + 1000 },
      ),
    );
    clock.seconds += 1;
    expect(
      decided(config, table, descriptor(["tenant", "acme"]))?.requestsPerUnit,
    ).toBe(1);
  });

  it("does not expire an override replaced before its expiry", () => {
    const { table, clock } = setup();
    table.put(
      record(
        [["tenant", "acme"]],
        { requestsPerUnit: 1, unit: Unit.MINUTE },
        { expireMs: clock.nowMs() + 1000 },
      ),
    );
    table.put(
      record([["tenant", "acme"]], { requestsPerUnit: 2, unit: Unit.MINUTE }),
    );
    clock.seconds += 5;
    expect(table.takeExpired(clock.nowMs())).toEqual([]);
    expect(
      table.list("api", clock.nowMs()).map((r) => r.limit.requestsPerUnit),
    ).toEqual([2]);
  });

  it("keeps applying across a config reload, over the new rule", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "acme"]], { requestsPerUnit: 7, unit: Unit.MINUTE }),
    );
    const before = decided(config, table, descriptor(["tenant", "acme"]))!;
    const reloaded = loadConfig(
      [
        {
          name: "config.yaml",
          text: yaml.replace("requests_per_unit: 10", "requests_per_unit: 11"),
        },
      ],
      { statsManager: createStatsManager() },
    );
    const after = decided(reloaded, table, descriptor(["tenant", "acme"]))!;
    expect(after.requestsPerUnit).toBe(7);
    expect(after.stats).toBe(
      reloaded.getLimit("api", descriptor(["tenant", "acme"]))!.stats,
    );
    expect(after.stats).not.toBe(before.stats);
  });

  it("lets the request's own limit override win", () => {
    const { config, table } = setup();
    table.put(
      record([["tenant", "acme"]], { requestsPerUnit: 1000, unit: Unit.HOUR }),
    );
    const d = create(RateLimitDescriptorSchema, {
      entries: [{ key: "tenant", value: "acme" }],
      limit: { requestsPerUnit: 42, unit: OverrideRateLimitUnit.MINUTE },
    });
    expect(decided(config, table, d)?.requestsPerUnit).toBe(42);
  });

  it("treats entry order as part of the descriptor", () => {
    const { table } = setup();
    table.put(
      record(
        [
          ["tenant", "a"],
          ["plan", "b"],
        ],
        { requestsPerUnit: 1, unit: Unit.MINUTE },
      ),
    );
    expect(
      table.get("api", [
        { key: "plan", value: "b" },
        { key: "tenant", value: "a" },
      ]),
    ).toBeUndefined();
    expect(
      table.get("api", [
        { key: "tenant", value: "a" },
        { key: "plan", value: "b" },
      ])?.limit.requestsPerUnit,
    ).toBe(1);
  });

  it("keeps the rule's per-value stats key of a detailed_metric rule", () => {
    const { config, table } = setup();
    table.put(
      record([["detailed", "x"]], { requestsPerUnit: 30, unit: Unit.MINUTE }),
    );
    const overridden = decided(config, table, descriptor(["detailed", "x"]))!;
    expect(overridden.requestsPerUnit).toBe(30);
    expect(overridden.stats.key).toBe("api.detailed_x");
  });

  it("shares one compiled limit between overrides, and a hit allocates nothing new", () => {
    const { config, table } = setup();
    for (let i = 0; i < 100; i++)
      table.put(
        record([["tenant", `t${String(i)}`]], {
          requestsPerUnit: 5,
          unit: Unit.MINUTE,
        }),
      );
    const a = decided(config, table, descriptor(["tenant", "t1"]));
    const b = decided(config, table, descriptor(["tenant", "t2"]));
    expect(a).toBe(b);
    expect(Object.isFrozen(a)).toBe(true);
  });

  it("replaces a domain's overrides on resync, keeping unchanged ones", () => {
    const { table, clock } = setup();
    table.put(
      record([["tenant", "a"]], { requestsPerUnit: 1, unit: Unit.MINUTE }),
    );
    table.put(
      record([["tenant", "b"]], { requestsPerUnit: 2, unit: Unit.MINUTE }),
    );
    const failed = table.replaceDomain("api", [
      record([["tenant", "b"]], { requestsPerUnit: 2, unit: Unit.MINUTE }),
      record([["tenant", "c"]], { requestsPerUnit: 3, unit: Unit.MINUTE }),
      record([["tenant", "d"]], {
        requestsPerUnit: 0,
        unit: Unit.MINUTE,
        algorithm: "token_bucket",
      }),
    ]);
    expect(failed).toHaveLength(1);
    expect(
      table.list(undefined, clock.nowMs()).map((r) => r.entries[0]?.value),
    ).toEqual(["b", "c"]);
  });
});

describe("OverrideTable storage", () => {
  const rpu = (table: OverrideTable, value: string): number | undefined =>
    table.get("api", [{ key: "tenant", value }])?.limit.requestsPerUnit;

  it("resyncs a domain in chunks, keeping what was set meanwhile and dropping what the store no longer holds", () => {
    const { table, clock } = setup();
    const minute = (n: number) => ({ requestsPerUnit: n, unit: Unit.MINUTE });
    for (const [value, n] of [
      ["kept", 1],
      ["changed", 2],
      ["gone", 3],
      ["bad", 4],
    ] as const)
      table.put(record([["tenant", value]], minute(n)));
    const resync = table.beginResync("api");
    resync.put(record([["tenant", "kept"]], minute(1)));
    resync.put(record([["tenant", "changed"]], minute(20)));
    // Set through the table while the resync runs (an announcement heard between chunks).
    table.put(record([["tenant", "meanwhile"]], minute(5)));
    table.remove("api", [{ key: "tenant", value: "kept" }]);
    resync.put(record([["tenant", "kept"]], minute(1)));
    resync.put(record([["tenant", "new"]], minute(6)));
    resync.put(record([["tenant", "new"]], minute(6))); // HSCAN may return a field twice
    expect(() => {
      resync.put(
        record([["tenant", "bad"]], {
          ...minute(0),
          algorithm: "token_bucket",
        }),
      );
    }).toThrow(/limit\./);
    expect(() => {
      resync.put({ ...record([["tenant", "x"]], minute(1)), domain: "other" });
    }).toThrow(RangeError);
    expect(resync.finish()).toBe(2); // gone, bad
    expect(
      table
        .list("api", clock.nowMs())
        .map((r) => [r.entries[0]?.value, r.limit.requestsPerUnit]),
    ).toEqual([
      ["changed", 20],
      ["kept", 1],
      ["meanwhile", 5],
      ["new", 6],
    ]);
    expect(table.size).toBe(4);
  });

  it("reuses a removed override's slot, and its expiry takes only the override it was set for", () => {
    const { config, table, clock } = setup();
    table.put(
      record(
        [["tenant", "a"]],
        { requestsPerUnit: 1, unit: Unit.MINUTE },
        { expireMs: clock.nowMs() + 1000, reason: "first", actor: "alice" },
      ),
    );
    table.remove("api", [{ key: "tenant", value: "a" }]);
    // Takes the freed slot.
    table.put(
      record(
        [["tenant", "b"]],
        { requestsPerUnit: 2, unit: Unit.MINUTE },
        { reason: "second", actor: "bob", updateMs: 5 },
      ),
    );
    clock.seconds += 2;
    expect(table.takeExpired(clock.nowMs())).toEqual([]);
    expect(rpu(table, "a")).toBeUndefined();
    expect(table.get("api", [{ key: "tenant", value: "b" }])).toMatchObject({
      reason: "second",
      actor: "bob",
      updateMs: 5,
      expireMs: undefined,
    });
    expect(
      decided(config, table, descriptor(["tenant", "b"]))?.requestsPerUnit,
    ).toBe(2);
    expect(table.size).toBe(1);
  });

  it("holds as many overrides as are put, through growth and removal", () => {
    const { config, table } = setup();
    for (let i = 0; i < 5000; i++)
      table.put(
        record([["tenant", `t${String(i)}`]], {
          requestsPerUnit: i,
          unit: Unit.MINUTE,
        }),
      );
    for (let i = 0; i < 5000; i += 2)
      table.remove("api", [{ key: "tenant", value: `t${String(i)}` }]);
    for (let i = 5000; i < 6000; i++)
      table.put(
        record([["tenant", `t${String(i)}`]], {
          requestsPerUnit: i,
          unit: Unit.MINUTE,
        }),
      );
    expect(table.size).toBe(3500);
    for (const i of [0, 1, 2, 4999, 5000, 5999])
      expect(
        decided(config, table, descriptor(["tenant", `t${String(i)}`]))
          ?.requestsPerUnit,
      ).toBe(i < 5000 && i % 2 === 0 ? 10 : i);
  });
});

describe("override keys", () => {
  it("spells a descriptor canonically, in entry order, escaping separators", () => {
    const entries = [
      { key: "tenant", value: "a,b=c\\d" },
      { key: "plan", value: "gold*" },
    ];
    const text = descriptorText(entries);
    expect(text).toBe("tenant=a\\,b\\=c\\\\d,plan=gold*");
    expect(parseDescriptorText(text)).toEqual(entries);
    expect(descriptorText([...entries].reverse())).not.toBe(text);
  });

  it("refuses a malformed descriptor text", () => {
    expect(() => parseDescriptorText("a")).toThrow(RangeError);
    expect(() => parseDescriptorText("a=b=c")).toThrow(RangeError);
    expect(() => parseDescriptorText("a=b\\")).toThrow(RangeError);
  });

  it("builds probe keys that no choice of keys and values can make collide, and reads them back", () => {
    const cases: { key: string; value: string }[][] = [
      [{ key: "a", value: "b" }],
      [{ key: "ab", value: "" }],
      [
        { key: "a", value: "b" },
        { key: "c", value: "" },
      ],
      [{ key: "a", value: "b\u0001c\u0001" }],
      [
        { key: "a", value: "b" },
        { key: "c", value: "\u0001" },
      ],
      [{ key: "\u0000x", value: "" }],
      [{ key: "\u00001:x", value: "" }],
      [],
    ];
    const keys = cases.map((entries) => probeKey(entries));
    expect(new Set(keys).size).toBe(cases.length);
    for (const [i, entries] of cases.entries())
      expect(parseProbeKey(keys[i]!)).toEqual(entries);
  });
});
