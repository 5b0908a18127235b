// RLQS over real gRPC on both HTTP/2 engines: the in-process service on the memory backend,
// Connect bidi streams from the test standing in for Envoys (issue 24).

import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { FakeEnvoy } from "../helpers/rlqs-stream.js";
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
        // B's shrunk share is pushed at once, A's grown one up to a fifth of the report
        // interval later: wait for both.
        return ra !== undefined && rb !== undefined && rb < 40 && ra + rb >= 99
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

    it("splits at a run-time override's rate from the next split on, and at the rule's once it is deleted", async () => {
      const a = new FakeEnvoy(t);
      a.report("gold");
      await waitFor(() => a.rate("gold") === 100, "the rule's L");
      const admin = async (method: string, body: unknown): Promise<void> => {
        const res = await fetch(
          `http://${t.addresses.debug}/ratelimit.admin.v1.AdminService/${method}`,
          {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body),
          },
        );
        expect(res.status).toBe(200);
      };
      const entries = [{ key: "tenant", value: "gold" }];
      await admin("SetOverride", {
        domain: "rlqs",
        entries,
        limit: { requestsPerUnit: 40 },
      });
      await waitFor(() => a.rate("gold") === 40, "the override's L");
      await admin("DeleteOverride", { domain: "rlqs", entries });
      await waitFor(() => a.rate("gold") === 100, "the rule's L again");
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
