// Run-time overrides on the memory backend, against the whole service: the admin API over
// Connect JSON on the debug port (as curl and the console call it) and over gRPC on the gRPC
// port with ADMIN_ENABLED, ShouldRateLimit over gRPC answering with the override's limit and
// counting under the rule's stats key, Explain naming the override, expiry, and the audit log.

import { createClient, type Client } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AdminService,
  ExplainService,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { runClient } from "../../src/cli/client.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";
import { minuteWithRoom } from "../helpers/windows.js";
import { request } from "../helpers/requests.js";

const config = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 2 }
`;

let t: TestApp;
let rls: Client<typeof RateLimitService>;
let grpcAdmin: Client<typeof AdminService>;
let explain: Client<typeof ExplainService>;

/** POSTs a Connect unary JSON call to the debug port, as `curl` does. */
async function adminJson(
  method: string,
  body: unknown,
  actor?: string,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(
    `http://${t.addresses.debug}/ratelimit.admin.v1.AdminService/${method}`,
    {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(actor !== undefined ? { "x-ratelimit-actor": actor } : {}),
      },
      body: JSON.stringify(body),
    },
  );
  return {
    status: response.status,
    json: (await response.json()) as Record<string, unknown>,
  };
}

/** Codes of `n` ShouldRateLimit calls for one tenant. */
async function codes(value: string, n: number): Promise<RlCode[]> {
  const out: RlCode[] = [];
  for (let i = 0; i < n; i++)
    out.push(
      (await rls.shouldRateLimit(request("api", [["tenant", value]])))
        .overallCode,
    );
  return out;
}

function counter(name: string): number {
  return t.app.statsManager.store.counter(name).value();
}

beforeAll(async () => {
  t = await startTestApp({ "api.yaml": config }, { ADMIN_ENABLED: "true" });
  const transport = createGrpcTransport({
    baseUrl: `http://${t.addresses.grpc}`,
  });
  rls = createClient(RateLimitService, transport);
  grpcAdmin = createClient(AdminService, transport);
  explain = createClient(
    ExplainService,
    createConnectTransport({
      baseUrl: `http://${t.addresses.debug}`,
      httpVersion: "1.1",
    }),
  );
});
afterAll(async () => {
  await t.stop();
});

describe("run-time overrides (memory backend)", () => {
  it("sets an override over Connect JSON; ShouldRateLimit answers with its limit and counts under the rule's stats key", async () => {
    const set = await adminJson(
      "SetOverride",
      {
        domain: "api",
        entries: [{ key: "tenant", value: "acme" }],
        limit: { requestsPerUnit: 5, unit: "MINUTE" },
        reason: "ticket 42",
      },
      "alice",
    );
    expect(set.status).toBe(200);
    expect(set.json).toMatchObject({
      override: {
        domain: "api",
        entries: [{ key: "tenant", value: "acme" }],
        limit: {
          requestsPerUnit: 5,
          unit: "MINUTE",
          unitMultiplier: 1,
          algorithm: "fixed_window",
        },
        reason: "ticket 42",
        actor: "alice",
        rule: "api.tenant",
      },
    });

    // Ten hits counted in one minute window. Waited for, not a shifted clock: the CLI test
    // below prints expiries against the wall clock ("in 1h").
    await minuteWithRoom(2);
    const hitsBefore = counter(
      "ratelimit.service.rate_limit.api.tenant.total_hits",
    );
    const overBefore = counter(
      "ratelimit.service.rate_limit.api.tenant.over_limit",
    );
    expect(await codes("acme", 6)).toEqual([
      ...Array<RlCode>(5).fill(RlCode.OK),
      RlCode.OVER_LIMIT,
    ]);
    const answer = await rls.shouldRateLimit(
      request("api", [["tenant", "acme"]]),
    );
    expect(answer.statuses[0]?.currentLimit?.requestsPerUnit).toBe(5);
    // Another tenant keeps the rule's limit.
    expect(await codes("other", 3)).toEqual([
      RlCode.OK,
      RlCode.OK,
      RlCode.OVER_LIMIT,
    ]);
    expect(
      counter("ratelimit.service.rate_limit.api.tenant.total_hits") -
        hitsBefore,
    ).toBe(10);
    expect(
      counter("ratelimit.service.rate_limit.api.tenant.over_limit") -
        overBefore,
    ).toBe(3);
    // No statistic per overridden value.
    expect(
      t.app.statsManager.store
        .counter("ratelimit.service.rate_limit.api.tenant_acme.total_hits")
        .value(),
    ).toBe(0);

    // Explain (debug port) names the override that decided.
    const explained = await explain.explain({
      request: request("api", [["tenant", "acme"]]),
    });
    expect(explained.descriptors[0]?.rule?.requestsPerUnit).toBe(5);
    expect(explained.descriptors[0]?.rule?.runtimeOverride?.actor).toBe(
      "alice",
    );
    expect(explained.descriptors[0]?.rule?.runtimeOverride?.reason).toBe(
      "ticket 42",
    );
  });

  it("serves the same API over gRPC on the gRPC port with ADMIN_ENABLED", async () => {
    const { overrides } = await grpcAdmin.listOverrides({ domain: "api" });
    expect(overrides.map((o) => [o.entries[0]?.value, o.rule])).toEqual([
      ["acme", "api.tenant"],
    ]);
    const unlimited = await grpcAdmin.setOverride(
      {
        domain: "api",
        entries: [{ key: "tenant", value: "vip-*" }],
        limit: { unlimited: true },
      },
      { headers: { "x-ratelimit-actor": "bob" } },
    );
    expect(unlimited.override?.actor).toBe("bob");
    const answer = await rls.shouldRateLimit(
      request("api", [["tenant", "vip-7"]]),
    );
    expect(answer.statuses[0]?.limitRemaining).toBe(4294967295);
    await grpcAdmin.deleteOverride({
      domain: "api",
      entries: [{ key: "tenant", value: "vip-*" }],
      reason: "done",
    });
    expect(
      (await rls.shouldRateLimit(request("api", [["tenant", "vip-8"]])))
        .statuses[0]?.currentLimit?.requestsPerUnit,
    ).toBe(2);
  });

  it("refuses a descriptor no rule limits, with a message naming the field (HTTP 400 / failed_precondition)", async () => {
    const refused = await adminJson("SetOverride", {
      domain: "api",
      entries: [{ key: "path", value: "/x" }],
      limit: { requestsPerUnit: 1, unit: "SECOND" },
    });
    expect(refused.status).toBe(400);
    expect(refused.json["code"]).toBe("failed_precondition");
    expect(refused.json["message"]).toMatch(
      /^entries: the descriptor path=\/x matches no rule/,
    );
    const badUnit = await adminJson("SetOverride", {
      domain: "api",
      entries: [{ key: "tenant", value: "x" }],
      limit: { requestsPerUnit: 1, unit: "SECOND", burst: 4 },
    });
    expect(badUnit.json["code"]).toBe("invalid_argument");
    expect(badUnit.json["message"]).toMatch(/^limit\.burst: /);
  });

  it("stops applying an expired override at once, and the audit log holds each change", async () => {
    await adminJson(
      "SetOverride",
      {
        domain: "api",
        entries: [{ key: "tenant", value: "brief" }],
        limit: { requestsPerUnit: 100, unit: "MINUTE" },
        ttl: "1.5s",
        reason: "short test",
      },
      "carol",
    );
    expect(await codes("brief", 3)).toEqual([RlCode.OK, RlCode.OK, RlCode.OK]);
    await waitFor(
      async () =>
        (await rls.shouldRateLimit(request("api", [["tenant", "brief"]])))
          .overallCode === RlCode.OVER_LIMIT,
      "the expired override to stop applying",
      3_000,
    );
    const listed = await adminJson("ListOverrides", { domain: "api" });
    expect(
      (listed.json["overrides"] as { entries: { value: string }[] }[]).map(
        (o) => o.entries[0]?.value,
      ),
    ).toEqual(["acme"]);
    // The sweep writes the expire record within a second.
    const log = await waitFor(async () => {
      const { json } = await adminJson("GetAuditLog", { domain: "api" });
      const records = json["records"] as { action: string }[];
      return records[0]?.action === "expire" ? records : undefined;
    }, "the expiry's audit record");
    expect(
      log.map((r) => {
        const record = r as {
          action: string;
          actor: string;
          before?: { entries: { value: string }[] };
          after?: { entries: { value: string }[] };
        };
        return [
          record.action,
          record.actor,
          (record.after ?? record.before)?.entries[0]?.value,
        ];
      }),
    ).toEqual([
      ["expire", "ratelimit", "brief"],
      ["set", "carol", "brief"],
      ["delete", "anonymous", "vip-*"],
      ["set", "bob", "vip-*"],
      ["set", "alice", "acme"],
    ]);
  });

  it("is driven by ratelimit-client -set-override, -list-overrides, -delete-override and -audit-log", async () => {
    const run = async (...args: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runClient(
        [...args, "-admin_url", `http://${t.addresses.debug}`],
        (line) => out.push(line),
        (line) => err.push(line),
        { USER: "dave" },
      );
      return { code, out: out.join("\n"), err: err.join("\n") };
    };
    const set = await run(
      "-set-override",
      "-domain",
      "api",
      "-descriptors",
      "tenant=cli",
      "-limit",
      "30/5minute",
      "-algorithm",
      "sliding_window",
      "-ttl",
      "1h",
      "-reason",
      "from the CLI",
    );
    expect(set.err).toBe("");
    expect(set.code).toBe(0);
    expect(set.out).toMatch(
      /^override set: api tenant=cli: 30 per 5 MINUTE \(sliding_window\), expires \S+ \(in 1h\), set by dave, reason "from the CLI"; rule api\.tenant$/,
    );
    const listed = await run("-list-overrides", "-domain", "api");
    expect(listed.out.split("\n").map((l) => l.split(":")[0])).toEqual([
      "api tenant=acme",
      "api tenant=cli",
    ]);
    const deleted = await run(
      "-delete-override",
      "-domain",
      "api",
      "-descriptors",
      "tenant=cli",
      "-actor",
      "erin",
    );
    expect(deleted.out).toMatch(
      /^override deleted: api tenant=cli: 30 per 5 MINUTE/,
    );
    const log = await run("-audit-log", "-domain", "api");
    expect(
      log.out
        .split("\n")
        .slice(0, 2)
        .map((l) => l.split(/\s+/).slice(1, 3)),
    ).toEqual([
      ["delete", "erin"],
      ["set", "dave"],
    ]);
    const refused = await run(
      "-set-override",
      "-domain",
      "api",
      "-descriptors",
      "nothing=here",
      "-limit",
      "1/second",
    );
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      /^request error: \[failed_precondition\] entries: /,
    );
    const badFlag = await run(
      "-set-override",
      "-domain",
      "api",
      "-descriptors",
      "tenant=x",
      "-limit",
      "7/fortnight",
    );
    expect(badFlag.code).toBe(2);
    expect(badFlag.err).toMatch(/^invalid -limit: "7\/fortnight"/);
  });
});
