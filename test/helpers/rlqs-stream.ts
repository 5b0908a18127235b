// A test's stand-in for an Envoy on an RLQS stream: reports sent by hand, every pushed
// assignment recorded per tenant (the `tenant` entry of the bucket id). Used by the RLQS
// integration tests over real gRPC.

import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  BucketIdSchema,
  RateLimitQuotaService,
  RateLimitQuotaUsageReportsSchema,
  RateLimitQuotaUsageReports_BucketQuotaUsageSchema,
  RateLimitStrategy_BlanketRule,
  type RateLimitQuotaResponse,
  type RateLimitQuotaUsageReports,
} from "../../src/proto.js";
import type { TestApp } from "./rls-app.js";

/** What a stream was last told for a tenant: tokens per second, a blanket rule, or abandon. */
export type Seen = number | "ALLOW_ALL" | "DENY_ALL" | "abandon";

/** One Envoy's stream: reports sent by hand, every pushed action recorded per tenant. */
export class FakeEnvoy {
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
