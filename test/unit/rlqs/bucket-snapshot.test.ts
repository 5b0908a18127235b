import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import { MemoryQuotaLedger } from "../../../src/rlqs/quota-ledger.js";
import {
  createRlqsService,
  ledgerKeyOf,
} from "../../../src/rlqs/rlqs-service.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
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
    value: trial
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1800 }
  - key: tenant
    value: vip
    rate_limit: { unlimited: true }
  - key: team
    descriptors:
      - key: path
        value: /api
        rate_limit: { unit: second, requests_per_unit: 10 }
`;

const gold = { tenant: "gold" };

/** Subscribes a stream at 0 s and, with `requests`, measures it over the next 5 s. */
async function measured(
  ledger: MemoryQuotaLedger,
  bucket: Record<string, string>,
  stream: string,
  requests: number | undefined,
): Promise<void> {
  const key = ledgerKeyOf("rlqs", bucket);
  await ledger.report(key, stream, { allowed: 0, denied: 0 }, 0);
  if (requests !== undefined)
    await ledger.report(key, stream, { allowed: requests, denied: 0 }, 5_000);
}

function setup(options: { globalShadowMode?: boolean } = {}) {
  const statsManager = createStatsManager();
  let config: RateLimitConfig | undefined = loadConfig(
    [{ name: "rlqs.yaml", text: yaml }],
    { statsManager },
  );
  const ledger = new MemoryQuotaLedger();
  const service = createRlqsService({
    currentConfig: () => config,
    stats: statsManager.store,
    logger: silentLogger(),
    clock: new FakeClock(5),
    ledger,
    ...options,
  });
  const unload = () => {
    config = undefined;
  };
  return { ledger, service, statsManager, unload };
}

describe("RlqsService.describeBucket", () => {
  it("splits L by the ledger's demands: known demands give known shares and token buckets", async () => {
    const { ledger, service } = setup();
    await measured(ledger, gold, "1", 50); // 10/s
    await measured(ledger, gold, "2", undefined); // just subscribed: asks L/3
    await measured(ledger, gold, "3", 1_000); // 200/s
    const s = await service.describeBucket("rlqs", gold);
    expect(s).toBeDefined();
    expect(s!.policy).toEqual({
      kind: "limited",
      ratePerSecond: 100,
      shadow: false,
      rule: "rlqs.tenant_gold",
    });
    expect(s!.ratePerSecond).toBe(100);
    expect(s!.entries).toEqual([["tenant", "gold"]]);
    expect(s!.ledger).toBe("memory");
    expect(s!.replica).toBe("");
    expect(s!.ledgerError).toBeUndefined();
    expect(s!.streams.map((x) => x.streamId)).toEqual(["1", "2", "3"]);
    expect(s!.streams.map((x) => x.demandPerSecond)).toEqual([
      10,
      undefined,
      200,
    ]);
    // Water-filling: 10 is met, the newcomer's fair third is met, the heavy one gets the rest.
    const shares = s!.streams.map((x) => x.sharePerSecond);
    expect(shares[0]).toBeCloseTo(10, 9);
    expect(shares[1]).toBeCloseTo(100 / 3, 9);
    expect(shares[2]).toBeCloseTo(100 - 10 - 100 / 3, 9);
    expect(s!.shareSumPerSecond).toBeCloseTo(100, 9);
    expect(s!.streams.map((x) => x.assignment)).toEqual([
      {
        kind: "token_bucket",
        shape: { tokensPerFill: 10, fillIntervalSeconds: 1, maxTokens: 1 },
      },
      {
        kind: "token_bucket",
        shape: { tokensPerFill: 100, fillIntervalSeconds: 3, maxTokens: 4 },
      },
      {
        kind: "token_bucket",
        shape: { tokensPerFill: 170, fillIntervalSeconds: 3, maxTokens: 6 },
      },
    ]);
    expect(s!.streams.map((x) => x.assignedPerSecond)).toEqual([
      10,
      100 / 3,
      170 / 3,
    ]);
    expect(s!.assignedSumPerSecond).toBeCloseTo(100, 9);
    expect(s!.streams.every((x) => x.shadowAssignment === undefined)).toBe(
      true,
    );
    // Server time of each stream's last report; no stream is open on this service.
    expect(s!.streams.map((x) => x.lastReportMs)).toEqual([5_000, 0, 5_000]);
    expect(s!.streams.every((x) => !x.local && x.replica === undefined)).toBe(
      true,
    );
  });

  it("shows a bucket nobody holds with its policy and no stream", async () => {
    const { service } = setup();
    const s = await service.describeBucket("rlqs", gold);
    expect(s!.streams).toEqual([]);
    expect(s!.shareSumPerSecond).toBe(0);
    expect(s!.assignedSumPerSecond).toBe(0);
    expect(s!.ratePerSecond).toBe(100);
  });

  it("tells ALLOW_ALL in shadow mode and shows what it would assign", async () => {
    const { ledger, service } = setup();
    await measured(ledger, { tenant: "trial" }, "1", 25); // 5/s
    await measured(ledger, { tenant: "trial" }, "2", 500); // 100/s
    const s = await service.describeBucket("rlqs", { tenant: "trial" });
    expect(s!.policy).toMatchObject({ kind: "limited", shadow: true });
    expect(s!.ratePerSecond).toBe(30); // 1800 per minute
    expect(s!.streams.map((x) => x.assignment.kind)).toEqual([
      "allow_all",
      "allow_all",
    ]);
    expect(s!.streams.map((x) => x.shadowAssignment)).toEqual([
      {
        kind: "token_bucket",
        shape: { tokensPerFill: 5, fillIntervalSeconds: 1, maxTokens: 1 },
      },
      {
        kind: "token_bucket",
        shape: { tokensPerFill: 25, fillIntervalSeconds: 1, maxTokens: 3 },
      },
    ]);
    expect(s!.shareSumPerSecond).toBe(30);
    // What the assigned_tokens_per_second statistic counts in shadow mode.
    expect(s!.assignedSumPerSecond).toBe(30);
  });

  it("applies SHADOW_MODE to every limited bucket", async () => {
    const { ledger, service } = setup({ globalShadowMode: true });
    await measured(ledger, gold, "1", undefined);
    const s = await service.describeBucket("rlqs", gold);
    expect(s!.globalShadowMode).toBe(true);
    expect(s!.streams[0]!.assignment).toEqual({ kind: "allow_all" });
    expect(s!.streams[0]!.shadowAssignment).toMatchObject({
      kind: "token_bucket",
      shape: { tokensPerFill: 100, fillIntervalSeconds: 1 },
    });
  });

  it("answers DENY_ALL for a rule of 0, ALLOW_ALL without a rule, for an unknown domain and an unlimited rule", async () => {
    const { ledger, service } = setup();
    await measured(ledger, { tenant: "blocked" }, "1", 10);
    const blocked = await service.describeBucket("rlqs", { tenant: "blocked" });
    expect(blocked!.streams[0]!.assignment).toEqual({ kind: "deny_all" });
    expect(blocked!.streams[0]!.sharePerSecond).toBe(0);
    expect(blocked!.ratePerSecond).toBe(0);

    const none = await service.describeBucket("rlqs", { tenant: "nobody" });
    expect(none!.policy).toEqual({
      kind: "allow_all",
      reason: "no_rule",
      rule: "",
    });
    const vip = await service.describeBucket("rlqs", { tenant: "vip" });
    expect(vip!.policy).toEqual({
      kind: "allow_all",
      reason: "unlimited",
      rule: "rlqs.tenant_vip",
    });
    const elsewhere = await service.describeBucket("other", gold);
    expect(elsewhere!.policy).toMatchObject({ reason: "unknown_domain" });
    expect(elsewhere!.ratePerSecond).toBe(0);
  });

  it("puts the entries in the tree's order, and sorts them when no rule is reached", async () => {
    const { service } = setup();
    const nested = await service.describeBucket("rlqs", {
      path: "/api",
      team: "a",
    });
    expect(nested!.entries).toEqual([
      ["team", "a"],
      ["path", "/api"],
    ]);
    expect(nested!.policy).toMatchObject({
      kind: "limited",
      ratePerSecond: 10,
      rule: "rlqs.team.path_/api",
    });
    const unknown = await service.describeBucket("rlqs", { z: "1", a: "2" });
    expect(unknown!.entries).toEqual([
      ["a", "2"],
      ["z", "1"],
    ]);
  });

  it("answers undefined before the first config load", async () => {
    const { service, unload } = setup();
    unload();
    expect(await service.describeBucket("rlqs", gold)).toBeUndefined();
    expect(await service.listBuckets()).toBeUndefined();
  });

  it("moves no statistic and changes no demand", async () => {
    const { ledger, service, statsManager } = setup();
    await measured(ledger, gold, "1", 50);
    const before = JSON.stringify(
      statsManager.store
        .snapshot()
        .gauges.map((g) => [g.name, g.value()])
        .concat(
          statsManager.store
            .snapshot()
            .counters.map((c) => [c.name, c.value()]),
        ),
    );
    const demands = [...(await ledger.demands(ledgerKeyOf("rlqs", gold)))];
    await service.describeBucket("rlqs", gold);
    await service.listBuckets();
    expect(
      JSON.stringify(
        statsManager.store
          .snapshot()
          .gauges.map((g) => [g.name, g.value()])
          .concat(
            statsManager.store
              .snapshot()
              .counters.map((c) => [c.name, c.value()]),
          ),
      ),
    ).toBe(before);
    expect([...(await ledger.demands(ledgerKeyOf("rlqs", gold)))]).toEqual(
      demands,
    );
  });
});
