import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import {
  BucketIdSchema,
  RateLimitQuotaUsageReportsSchema,
  RateLimitQuotaUsageReports_BucketQuotaUsageSchema,
  RateLimitStrategy_BlanketRule,
  type RateLimitQuotaResponse,
  type RateLimitQuotaUsageReports,
} from "../../../src/proto.js";
import { createRlqsService } from "../../../src/rlqs/rlqs-service.js";
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
    rate_limit: { unit: second, requests_per_unit: 30 }
`;

/** A client side of one stream: reports pushed by hand, responses read in order. */
class Client {
  private readonly pending: RateLimitQuotaUsageReports[] = [];
  private wake: (() => void) | undefined;
  private closed = false;
  readonly responses: RateLimitQuotaResponse[] = [];
  readonly done: Promise<unknown>;

  constructor(
    stream: (
      requests: AsyncIterable<RateLimitQuotaUsageReports>,
    ) => AsyncIterable<RateLimitQuotaResponse>,
  ) {
    const requests = this.requests();
    this.done = (async () => {
      try {
        for await (const response of stream(requests))
          this.responses.push(response);
        return undefined;
      } catch (err) {
        return err;
      }
    })();
  }

  report(
    bucket: Record<string, string>,
    allowed = 0,
    denied = 0,
    domain = "rlqs",
  ): void {
    this.send(
      create(RateLimitQuotaUsageReportsSchema, {
        domain,
        bucketQuotaUsages: [
          create(RateLimitQuotaUsageReports_BucketQuotaUsageSchema, {
            bucketId: create(BucketIdSchema, { bucket }),
            numRequestsAllowed: BigInt(allowed),
            numRequestsDenied: BigInt(denied),
          }),
        ],
      }),
    );
  }

  send(reports: RateLimitQuotaUsageReports): void {
    this.pending.push(reports);
    this.wake?.();
  }

  end(): void {
    this.closed = true;
    this.wake?.();
  }

  /** The token-bucket rate (tokens / fill seconds) or blanket rule last pushed for a bucket. */
  last(tenant: string): string | number | undefined {
    for (let i = this.responses.length - 1; i >= 0; i--) {
      for (const action of this.responses[i]!.bucketAction) {
        if (action.bucketId?.bucket["tenant"] !== tenant) continue;
        if (action.bucketAction.case === "abandonAction") return "abandon";
        const strategy = action.bucketAction.value?.rateLimitStrategy?.strategy;
        if (strategy?.case === "tokenBucket") {
          return (
            (strategy.value.tokensPerFill ?? 0) /
            Number(strategy.value.fillInterval?.seconds ?? 0)
          );
        }
        if (strategy?.case === "blanketRule")
          return strategy.value === RateLimitStrategy_BlanketRule.DENY_ALL
            ? "DENY_ALL"
            : "ALLOW_ALL";
      }
    }
    return undefined;
  }

  private async *requests(): AsyncGenerator<RateLimitQuotaUsageReports> {
    for (;;) {
      const next = this.pending.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.closed) return;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
  }
}

/** Lets the streams' async generators and the service's handlers run (no timer: a few turns). */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++)
    await new Promise<void>((resolve) => setImmediate(resolve));
}

function setup() {
  const clock = new FakeClock(1_000);
  const statsManager = createStatsManager();
  const config = loadConfig([{ name: "rlqs.yaml", text: yaml }], {
    statsManager,
  });
  const service = createRlqsService({
    currentConfig: () => config,
    stats: statsManager.store,
    logger: silentLogger(),
    clock,
    abandonAfterMs: 20_000,
  });
  const gauge = (name: string) => statsManager.store.gauge(name).value();
  const counter = (name: string) => statsManager.store.counter(name).value();
  return { clock, service, gauge, counter };
}

describe("RLQS service", () => {
  it("splits a bucket max-min fairly by measured demand and re-splits on subscription", async () => {
    const { clock, service, gauge, counter } = setup();
    const a = new Client((r) => service.stream(r));
    const b = new Client((r) => service.stream(r));
    a.report({ tenant: "gold" });
    await settle();
    expect(a.last("gold")).toBe(100); // alone: all of L at once
    b.report({ tenant: "gold" });
    await settle();
    // The newcomer gets a fair share at once and the first stream shrinks in the same turn.
    expect(a.last("gold")).toBe(50);
    expect(b.last("gold")).toBe(50);
    clock.seconds += 5;
    a.report({ tenant: "gold" }, 300, 300); // 120/s
    b.report({ tenant: "gold" }, 100, 0); // 20/s
    await settle();
    await service.tick();
    expect(b.last("gold")).toBeCloseTo(20 + 0, 0);
    expect(a.last("gold")).toBe(80);
    expect(
      gauge("ratelimit.rlqs.bucket.rlqs.tenant_gold.subscribed_streams"),
    ).toBe(2);
    expect(
      gauge(
        "ratelimit.rlqs.bucket.rlqs.tenant_gold.assigned_tokens_per_second",
      ),
    ).toBeLessThanOrEqual(100);
    expect(
      counter("ratelimit.rlqs.bucket.rlqs.tenant_gold.reported_allowed"),
    ).toBe(400);
    expect(
      counter("ratelimit.rlqs.bucket.rlqs.tenant_gold.reported_denied"),
    ).toBe(300);
    expect(gauge("ratelimit.rlqs.streams")).toBe(2);
    a.end();
    await a.done;
    expect(gauge("ratelimit.rlqs.streams")).toBe(1);
    await service.tick();
    expect(b.last("gold")).toBe(100);
    b.end();
    expect(await b.done).toBeUndefined();
    service.close();
  });

  it("answers ALLOW_ALL without a rule and DENY_ALL for a zero rule", async () => {
    const { service } = setup();
    const a = new Client((r) => service.stream(r));
    a.report({ tenant: "nobody-rule" });
    a.report({ tenant: "blocked" });
    await settle();
    expect(a.last("nobody-rule")).toBe("ALLOW_ALL");
    expect(a.last("blocked")).toBe("DENY_ALL");
    a.end();
    await a.done;
  });

  it("tells ALLOW_ALL in shadow mode and for an unknown domain, but counts the shadow split", async () => {
    const { service, gauge } = setup();
    const a = new Client((r) => service.stream(r));
    a.report({ tenant: "trial" });
    await settle();
    expect(a.last("trial")).toBe("ALLOW_ALL");
    expect(
      gauge(
        "ratelimit.rlqs.bucket.rlqs.tenant_trial.assigned_tokens_per_second",
      ),
    ).toBe(30);
    const b = new Client((r) => service.stream(r));
    b.report({ tenant: "gold" }, 0, 0, "elsewhere");
    await settle();
    expect(b.last("gold")).toBe("ALLOW_ALL");
    a.end();
    b.end();
    await Promise.all([a.done, b.done]);
  });

  it("abandons a bucket with no requests for RLQS_ABANDON_AFTER", async () => {
    const { clock, service, gauge } = setup();
    const a = new Client((r) => service.stream(r));
    a.report({ tenant: "gold" });
    await settle();
    clock.seconds += 10;
    a.report({ tenant: "gold" }, 0, 0);
    await settle();
    await service.tick();
    expect(a.last("gold")).toBe(100);
    clock.seconds += 11;
    a.report({ tenant: "gold" }, 0, 0);
    await settle();
    await service.tick();
    expect(a.last("gold")).toBe("abandon");
    expect(
      gauge("ratelimit.rlqs.bucket.rlqs.tenant_gold.subscribed_streams"),
    ).toBe(0);
    // Reporting it again subscribes afresh.
    a.report({ tenant: "gold" }, 1, 0);
    await settle();
    expect(a.last("gold")).toBe(100);
    a.end();
    await a.done;
  });

  it("describes each bucket with the split it pushed, and lists the buckets its streams hold", async () => {
    const { clock, service } = setup();
    const a = new Client((r) => service.stream(r));
    const b = new Client((r) => service.stream(r));
    a.report({ tenant: "gold" });
    b.report({ tenant: "gold" });
    b.report({ tenant: "trial" });
    await settle();
    clock.seconds += 5;
    a.report({ tenant: "gold" }, 300, 300); // 120/s
    b.report({ tenant: "gold" }, 100, 0); // 20/s
    await settle();
    // B's report came in the same instant as A's re-split: it is pushed by the tick.
    await service.tick();
    const gold = await service.describeBucket("rlqs", { tenant: "gold" });
    expect(gold!.streams.map((s) => s.local)).toEqual([true, true]);
    expect(gold!.streams.map((s) => s.demandPerSecond)).toEqual([120, 20]);
    // Each stream's token bucket is the rate it was pushed last.
    const rates = gold!.streams.map((s) => s.assignedPerSecond);
    expect(rates).toEqual([a.last("gold"), b.last("gold")]);
    expect(rates).toEqual([80, 20]);
    expect(gold!.streams.map((s) => s.lastReportMs)).toEqual([
      1_005_000, 1_005_000,
    ]); // clock at 1005 s

    const list = await service.listBuckets();
    expect(list!.truncated).toBe(false);
    expect(list!.buckets.map((x) => [x.domain, x.entries])).toEqual([
      ["rlqs", [["tenant", "gold"]]],
      ["rlqs", [["tenant", "trial"]]],
    ]);
    expect(list!.buckets[0]).toEqual(gold);
    expect(list!.buckets[1]!.streams.map((s) => s.streamId)).toEqual(["2"]);
    expect((await service.listBuckets("other"))!.buckets).toEqual([]);
    const first = await service.listBuckets("rlqs", 1);
    expect(first!.buckets).toHaveLength(1);
    expect(first!.truncated).toBe(true);
    a.end();
    b.end();
    await Promise.all([a.done, b.done]);
    // Closed streams leave their buckets.
    expect((await service.listBuckets())!.buckets).toEqual([]);
    service.close();
  });

  it("pushes about 5N actions per bucket per interval to N reporting streams, not N²", async () => {
    const { clock, service } = setup();
    const n = 40;
    const clients = Array.from(
      { length: n },
      () => new Client((r) => service.stream(r)),
    );
    for (const c of clients) c.report({ tenant: "gold" });
    await settle();
    await service.tick();
    const pushed = () =>
      clients.reduce((sum, c) => sum + c.responses.length, 0);
    const before = pushed();
    // One interval (5 s): each stream reports its demand once, the reports spread evenly. The
    // demands add up to less than L, so the surplus spread over all streams moves with each
    // report: every re-split changes every stream's share.
    for (let i = 0; i < n; i++) {
      clock.seconds += 5 / n;
      clients[i]!.report({ tenant: "gold" }, 1 + (i % 4), 0);
      await settle();
    }
    await service.tick();
    const perInterval = pushed() - before;
    expect(perInterval).toBeGreaterThanOrEqual(n); // the tick reaches every stream
    // Each report's shrunk share at once (N), the grown ones at most 5 times, the tick (N).
    expect(perInterval).toBeLessThanOrEqual(7 * n);
    // The shares pushed last add up to at most L.
    const rates = clients.map((c) => c.last("gold") as number);
    expect(rates.reduce((x, y) => x + y, 0)).toBeLessThanOrEqual(100);
    for (const c of clients) c.end();
    await Promise.all(clients.map((c) => c.done));
    service.close();
  });

  it("ends a stream without a domain with INVALID_ARGUMENT and ignores empty bucket ids", async () => {
    const { service, counter } = setup();
    const a = new Client((r) => service.stream(r));
    a.report({ tenant: "gold" }, 0, 0, "");
    const err = await a.done;
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    const b = new Client((r) => service.stream(r));
    b.report({});
    b.send(
      create(RateLimitQuotaUsageReportsSchema, {
        bucketQuotaUsages: [
          create(RateLimitQuotaUsageReports_BucketQuotaUsageSchema, {}),
        ],
      }),
    );
    await settle();
    expect(b.responses).toEqual([]);
    expect(counter("ratelimit.rlqs.ignored_buckets")).toBe(2);
    b.end();
    expect(await b.done).toBeUndefined();
    expect(service.streamCount).toBe(0);
  });
});
