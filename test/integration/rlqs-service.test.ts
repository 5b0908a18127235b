// RLQS over real gRPC on both HTTP/2 engines: the in-process service on the memory backend,
// Connect bidi streams from the test standing in for Envoys (issue 24).

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BucketIdSchema,
  RateLimitQuotaService,
  RateLimitQuotaUsageReportsSchema,
  RateLimitQuotaUsageReports_BucketQuotaUsageSchema,
  RateLimitStrategy_BlanketRule,
  type RateLimitQuotaResponse,
  type RateLimitQuotaUsageReports,
} from "../../src/proto.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: rlqs
descriptors:
  - key: tenant
    value: gold
    rate_limit: { unit: second, requests_per_unit: 100 }
  - key: tenant
    value: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
`;

type Seen = number | "ALLOW_ALL" | "DENY_ALL" | "abandon";

/** One Envoy's stream: reports sent by hand, every pushed action recorded per tenant. */
class FakeEnvoy {
  readonly latest = new Map<string, Seen>();
  readonly ttls: bigint[] = [];
  readonly intervals: bigint[] = [];
  readonly done: Promise<unknown>;
  private readonly pending: RateLimitQuotaUsageReports[] = [];
  private wake: (() => void) | undefined;
  private closed = false;

  constructor(t: TestApp) {
    const client = createClient(
      RateLimitQuotaService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const responses = client.streamRateLimitQuotas(this.requests());
    this.done = (async () => {
      try {
        for await (const response of responses) this.record(response);
        return undefined;
      } catch (err) {
        return err;
      }
    })();
  }

  report(tenant: string, allowed = 0, denied = 0, domain = "rlqs"): void {
    this.pending.push(
      create(RateLimitQuotaUsageReportsSchema, {
        domain,
        bucketQuotaUsages: [
          create(RateLimitQuotaUsageReports_BucketQuotaUsageSchema, {
            bucketId: create(BucketIdSchema, { bucket: { tenant } }),
            numRequestsAllowed: BigInt(allowed),
            numRequestsDenied: BigInt(denied),
          }),
        ],
      }),
    );
    this.wake?.();
  }

  end(): void {
    this.closed = true;
    this.wake?.();
  }

  rate(tenant: string): number | undefined {
    const seen = this.latest.get(tenant);
    return typeof seen === "number" ? seen : undefined;
  }

  private record(response: RateLimitQuotaResponse): void {
    for (const action of response.bucketAction) {
      const tenant = action.bucketId?.bucket["tenant"] ?? "";
      if (action.bucketAction.case === "abandonAction") {
        this.latest.set(tenant, "abandon");
        continue;
      }
      const assignment = action.bucketAction.value;
      if (assignment === undefined) continue;
      this.ttls.push(assignment.assignmentTimeToLive?.seconds ?? 0n);
      const strategy = assignment.rateLimitStrategy?.strategy;
      if (strategy?.case === "tokenBucket") {
        const seconds = strategy.value.fillInterval?.seconds ?? 0n;
        this.intervals.push(seconds);
        this.latest.set(
          tenant,
          (strategy.value.tokensPerFill ?? 0) / Number(seconds),
        );
      } else if (strategy?.case === "blanketRule") {
        this.latest.set(
          tenant,
          strategy.value === RateLimitStrategy_BlanketRule.DENY_ALL
            ? "DENY_ALL"
            : "ALLOW_ALL",
        );
      }
    }
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(["builtin", "node"] as const)(
  "RLQS StreamRateLimitQuotas over gRPC (%s HTTP/2 engine)",
  (engine) => {
    let t: TestApp;

    beforeAll(async () => {
      t = await startTestApp(
        { "rlqs.yaml": config },
        {
          GRPC_HTTP2_ENGINE: engine,
          RLQS_REPORT_INTERVAL: "1s",
          RLQS_ASSIGNMENT_TTL: "3s",
        },
      );
    });
    afterAll(async () => {
      await t.stop();
    });

    it("splits one bucket between two streams max-min fairly, within L", async () => {
      const a = new FakeEnvoy(t);
      const b = new FakeEnvoy(t);
      a.report("gold");
      await waitFor(() => a.rate("gold") === 100, "A alone holds all of L");
      b.report("gold");
      // The newcomer gets a fair share at once, and A shrinks in the same turn.
      await waitFor(
        () => b.rate("gold") === 50 && a.rate("gold") === 50,
        "a 50/50 split on subscription",
      );
      await sleep(2_000);
      // Two seconds of load: A 120/s (half denied), B 20/s.
      a.report("gold", 120, 120);
      b.report("gold", 40, 0);
      const [rateA, rateB] = await waitFor(() => {
        const ra = a.rate("gold");
        const rb = b.rate("gold");
        return ra !== undefined && rb !== undefined && rb < 40
          ? [ra, rb]
          : undefined;
      }, "the split by measured demand");
      // B's demand (about 20/s, measured with the server's clock) is met; A gets the rest.
      expect(rateB).toBeGreaterThanOrEqual(15);
      expect(rateB).toBeLessThanOrEqual(22);
      expect(rateA).toBeGreaterThanOrEqual(100 - rateB - 1);
      expect(rateA + rateB).toBeLessThanOrEqual(100);
      expect(a.ttls.every((ttl) => ttl === 3n)).toBe(true);
      expect([...a.intervals, ...b.intervals].every((s) => s >= 1n)).toBe(true);
      // Assignments keep flowing every interval on the long-lived stream.
      const pushes = a.ttls.length;
      await waitFor(() => a.ttls.length >= pushes + 2, "two more ticks");
      a.end();
      b.end();
      expect(await a.done).toBeUndefined();
      expect(await b.done).toBeUndefined();
    });

    it("answers ALLOW_ALL for a bucket without a rule and DENY_ALL for a 0 rule", async () => {
      const a = new FakeEnvoy(t);
      a.report("no-such-rule");
      a.report("blocked");
      await waitFor(
        () =>
          a.latest.get("no-such-rule") === "ALLOW_ALL" &&
          a.latest.get("blocked") === "DENY_ALL",
        "blanket rules",
      );
      a.end();
      expect(await a.done).toBeUndefined();
    });

    it("ends a stream whose first report has no domain with INVALID_ARGUMENT", async () => {
      const a = new FakeEnvoy(t);
      a.report("gold", 0, 0, "");
      const err = await a.done;
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      a.end();
      // The service goes on serving other streams.
      const b = new FakeEnvoy(t);
      b.report("gold");
      await waitFor(() => b.rate("gold") === 100, "a fresh stream served");
      b.end();
      expect(await b.done).toBeUndefined();
    });

    it("keeps a stream open across several report intervals with no client message", async () => {
      const a = new FakeEnvoy(t);
      a.report("gold");
      await waitFor(() => a.rate("gold") === 100, "subscribed");
      const pushes = a.ttls.length;
      await sleep(3_500);
      expect(a.ttls.length).toBeGreaterThanOrEqual(pushes + 2);
      a.end();
      expect(await a.done).toBeUndefined();
    });
  },
);
