import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
} from "@connectrpc/connect";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import { createBucketExplainService } from "../../../src/explain/bucket-explanation.js";
import { createBucketExplainHandlers } from "../../../src/explain/explain-handler.js";
import {
  BucketPolicy,
  BucketPolicyReason,
  ExplainBucketRequestSchema,
  ExplainResponseSchema,
  ExplainService,
  ListBucketsRequestSchema,
  MatchStep_Outcome as Outcome,
  RateLimitStrategy_BlanketRule as BlanketRule,
  type RateLimitStrategy,
} from "../../../src/proto.js";
import { MemoryQuotaLedger } from "../../../src/rlqs/quota-ledger.js";
import {
  createRlqsService,
  ledgerKeyOf,
} from "../../../src/rlqs/rlqs-service.js";
import { NotReadyError, RequestError } from "../../../src/service/errors.js";
import {
  explainDisabledMessage,
  registerExplain,
  rlqsNotServedMessage,
} from "../../../src/server/routes.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";

const yaml = `domain: rlqs
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
    rate_limit: { unit: second, requests_per_unit: 30 }
  - key: tenant
    value: vip
    rate_limit: { unlimited: true }
  - key: team
    descriptors:
      - key: path
        value: /api
        rate_limit: { unit: second, requests_per_unit: 10 }
`;

function setup() {
  const statsManager = createStatsManager();
  let config: RateLimitConfig | undefined = loadConfig(
    [{ name: "rlqs.yaml", text: yaml }],
    { statsManager },
  );
  const ledger = new MemoryQuotaLedger();
  const rlqs = createRlqsService({
    currentConfig: () => config,
    stats: statsManager.store,
    logger: silentLogger(),
    clock: new FakeClock(5),
    ledger,
  });
  const service = createBucketExplainService({
    rlqs,
    currentConfig: () => config,
  });
  /** Subscribes a stream at 0 s and, with `requests`, measures it over the next 5 s. */
  async function measured(
    bucket: Record<string, string>,
    stream: string,
    requests?: number,
  ): Promise<void> {
    const key = ledgerKeyOf("rlqs", bucket);
    await ledger.report(key, stream, { allowed: 0, denied: 0 }, 0);
    if (requests !== undefined)
      await ledger.report(key, stream, { allowed: requests, denied: 0 }, 5_000);
  }
  const unload = () => {
    config = undefined;
  };
  return { service, measured, unload };
}

const request = (domain: string, bucket: Record<string, string>) =>
  create(ExplainBucketRequestSchema, { domain, bucket });

/** `tokens_per_fill/fill_interval max max_tokens`, or the blanket rule's name. */
function strategyText(s: RateLimitStrategy | undefined): string {
  const strategy = s?.strategy;
  if (strategy?.case === "tokenBucket")
    return `${strategy.value.tokensPerFill ?? 0}/${strategy.value.fillInterval?.seconds ?? 0n}s max ${strategy.value.maxTokens}`;
  if (strategy?.case === "blanketRule") return BlanketRule[strategy.value];
  return "unset";
}

describe("createBucketExplainService", () => {
  it("explains a shared limit: rule with source, L, and per stream demand, share and token bucket", async () => {
    const { service, measured } = setup();
    await measured({ tenant: "gold" }, "1", 100); // 20/s
    await measured({ tenant: "gold" }, "2", 600); // 120/s
    const r = await service.explainBucket(request("rlqs", { tenant: "gold" }));
    expect(r.policy).toBe(BucketPolicy.SHARED_LIMIT);
    expect(r.reason).toBe(BucketPolicyReason.LIMIT);
    expect(r.domainFound).toBe(true);
    expect(r.entries.map((e) => [e.key, e.value])).toEqual([
      ["tenant", "gold"],
    ]);
    expect(r.path.map((p) => [p.outcome, p.node])).toEqual([
      [Outcome.EXACT, "rlqs.tenant_gold"],
    ]);
    expect(r.rule?.fullKey).toBe("rlqs.tenant_gold");
    expect(r.rule?.requestsPerUnit).toBe(100);
    expect(r.rule?.source).toMatchObject({ name: "rlqs.yaml", line: 3 });
    expect(r.limitPerSecond).toBe(100);
    expect(r.ledger).toBe("memory");
    expect(
      r.streams.map((s) => [
        s.streamId,
        s.demandPerSecond,
        s.sharePerSecond,
        strategyText(s.assignment),
        s.assignedPerSecond,
        s.shadowAssignment,
      ]),
    ).toEqual([
      ["1", 20, 20, "20/1s max 2", 20, undefined],
      ["2", 120, 80, "80/1s max 8", 80, undefined],
    ]);
    expect(r.streams[0]!.lastReportTime?.seconds).toBe(5n);
    expect(r.shareSumPerSecond).toBe(100);
    expect(r.assignedSumPerSecond).toBe(100);
    expect(r.summary).toBe(
      "SHARED_LIMIT: L = 100/s (rlqs.tenant_gold) shared by 2 streams, shares sum to 100/s",
    );
  });

  it("leaves demand unset for a stream not measured yet", async () => {
    const { service, measured } = setup();
    await measured({ tenant: "gold" }, "1");
    const r = await service.explainBucket(request("rlqs", { tenant: "gold" }));
    expect(r.streams[0]!.demandPerSecond).toBeUndefined();
    expect(r.streams[0]!.sharePerSecond).toBe(100);
  });

  it("names each policy's reason", async () => {
    const { service, measured } = setup();
    await measured({ tenant: "trial" }, "1", 50); // 10/s
    await measured({ tenant: "blocked" }, "1", 50);
    const cases: [
      string,
      Record<string, string>,
      BucketPolicy,
      BucketPolicyReason,
      string,
    ][] = [
      [
        "rlqs",
        { tenant: "trial" },
        BucketPolicy.ALLOW_ALL,
        BucketPolicyReason.SHADOW_MODE,
        "ALLOW_ALL: shadow mode; L = 30/s (rlqs.tenant_trial) would be shared by 1 stream",
      ],
      [
        "rlqs",
        { tenant: "blocked" },
        BucketPolicy.DENY_ALL,
        BucketPolicyReason.ZERO,
        "DENY_ALL: rlqs.tenant_blocked allows 0 requests",
      ],
      [
        "rlqs",
        { tenant: "vip" },
        BucketPolicy.ALLOW_ALL,
        BucketPolicyReason.UNLIMITED,
        "ALLOW_ALL: rlqs.tenant_vip is unlimited",
      ],
      [
        "rlqs",
        { tenant: "nobody" },
        BucketPolicy.ALLOW_ALL,
        BucketPolicyReason.NO_RULE,
        "ALLOW_ALL: no rule of domain rlqs is reached by tenant=nobody",
      ],
      [
        "elsewhere",
        { tenant: "gold" },
        BucketPolicy.ALLOW_ALL,
        BucketPolicyReason.UNKNOWN_DOMAIN,
        "ALLOW_ALL: domain elsewhere is not loaded",
      ],
    ];
    for (const [domain, bucket, policy, reason, summary] of cases) {
      const r = await service.explainBucket(request(domain, bucket));
      expect([r.policy, r.reason, r.summary]).toEqual([
        policy,
        reason,
        summary,
      ]);
    }
    const trial = await service.explainBucket(
      request("rlqs", { tenant: "trial" }),
    );
    expect(trial.rule?.shadowMode).toBe(true);
    expect(strategyText(trial.streams[0]!.assignment)).toBe("ALLOW_ALL");
    expect(strategyText(trial.streams[0]!.shadowAssignment)).toBe(
      "30/1s max 3",
    );
    const blocked = await service.explainBucket(
      request("rlqs", { tenant: "blocked" }),
    );
    expect(strategyText(blocked.streams[0]!.assignment)).toBe("DENY_ALL");
    const unknown = await service.explainBucket(
      request("elsewhere", { tenant: "gold" }),
    );
    expect(unknown.domainFound).toBe(false);
    expect(unknown.rule).toBeUndefined();
    expect(unknown.path.map((p) => p.outcome)).toEqual([
      Outcome.UNKNOWN_DOMAIN,
    ]);
  });

  it("walks the tree with the entries in its order", async () => {
    const { service } = setup();
    const r = await service.explainBucket(
      request("rlqs", { path: "/api", team: "a" }),
    );
    expect(r.entries.map((e) => e.key)).toEqual(["team", "path"]);
    expect(r.path.map((p) => [p.outcome, p.node])).toEqual([
      [Outcome.KEY_ONLY, "rlqs.team"],
      [Outcome.EXACT, "rlqs.team.path_/api"],
    ]);
    expect(r.limitPerSecond).toBe(10);
  });

  it("refuses a request without a domain or an entry, and answers not ready before the config", async () => {
    const { service, unload } = setup();
    await expect(
      service.explainBucket(request("", { tenant: "gold" })),
    ).rejects.toThrow(new RequestError("domain must not be empty"));
    await expect(service.explainBucket(request("rlqs", {}))).rejects.toThrow(
      RequestError,
    );
    const wide = Object.fromEntries(
      Array.from({ length: 101 }, (_, i) => [`k${i}`, "v"]),
    );
    await expect(service.explainBucket(request("rlqs", wide))).rejects.toThrow(
      new RequestError("bucket has 101 entries; at most 100 are explained"),
    );
    unload();
    await expect(
      service.explainBucket(request("rlqs", { tenant: "gold" })),
    ).rejects.toThrow(NotReadyError);
    await expect(
      service.listBuckets(create(ListBucketsRequestSchema)),
    ).rejects.toThrow(NotReadyError);
  });
});

describe("ExplainBucket and ListBuckets on a Connect router", () => {
  const logger = silentLogger();
  const explain = () => Promise.resolve(create(ExplainResponseSchema));

  it("maps errors to codes and answers FAILED_PRECONDITION without RLQS, UNIMPLEMENTED while Explain is off", async () => {
    const { service, unload } = setup();
    const handlers = createBucketExplainHandlers(service, logger);
    const client = (routes: Parameters<typeof createRouterTransport>[0]) =>
      createClient(ExplainService, createRouterTransport(routes));
    const served = client((router) => {
      registerExplain(router, explain, handlers);
    });
    const bad = await served
      .explainBucket({ domain: "", bucket: { tenant: "gold" } })
      .catch((err: unknown) => err);
    expect(bad).toBeInstanceOf(ConnectError);
    expect((bad as ConnectError).code).toBe(Code.InvalidArgument);
    expect((await served.listBuckets({})).buckets).toEqual([]);

    const withoutRlqs = client((router) => {
      registerExplain(router, explain);
    });
    for (const call of [
      () => withoutRlqs.explainBucket({ domain: "rlqs", bucket: { a: "b" } }),
      () => withoutRlqs.listBuckets({}),
    ]) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
      expect((err as ConnectError).rawMessage).toBe(rlqsNotServedMessage);
    }

    const disabled = client((router) => {
      registerExplain(router, undefined, handlers);
    });
    const off = await disabled.listBuckets({}).catch((e: unknown) => e);
    expect((off as ConnectError).code).toBe(Code.Unimplemented);
    expect((off as ConnectError).rawMessage).toBe(explainDisabledMessage);

    unload();
    const notReady = await served
      .explainBucket({ domain: "rlqs", bucket: { tenant: "gold" } })
      .catch((e: unknown) => e);
    expect((notReady as ConnectError).code).toBe(Code.Unavailable);
  });
});
