import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
  type Client,
} from "@connectrpc/connect";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { registerAdmin } from "../../../src/admin/admin-routes.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimitConfig } from "../../../src/config/rate-limit-config.js";
import {
  OverrideLimitSchema,
  RateLimitDescriptorSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  AdminService,
} from "../../../src/proto.js";
import {
  compileOverrideLimit,
  OverrideLimitError,
  resolveOverrideLimit,
} from "../../../src/overrides/override-limit.js";
import { MemoryOverrideStore } from "../../../src/overrides/override-store.js";
import { OverrideTable } from "../../../src/overrides/override-table.js";
import { createOverridesAdmin } from "../../../src/overrides/overrides-admin.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { calendarOf } from "../../../src/config/algorithm.js";

type LimitInit = MessageInitShape<typeof OverrideLimitSchema>;

const yaml = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: bucket
    rate_limit: { unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40 }
  - key: month
    rate_limit: { unit: month, requests_per_unit: 5000, time_zone: Europe/Berlin }
  - key: free
    rate_limit: { unlimited: true }
  - key: path
    descriptors:
      - key: method
        rate_limit: { unit: second, requests_per_unit: 1, unit_multiplier: 3 }
`;

function loaded(): RateLimitConfig {
  return loadConfig([{ name: "config.yaml", text: yaml }], {
    statsManager: createStatsManager(),
  });
}

/** @param config - the config in force; `null`: none loaded */
function setup(config: RateLimitConfig | null = loaded()): {
  client: Client<typeof AdminService>;
  clock: FakeClock;
  store: MemoryOverrideStore;
} {
  const clock = new FakeClock(1_800_000_000);
  const table = new OverrideTable({ clock });
  const logger = silentLogger();
  const store = new MemoryOverrideStore({
    table,
    clock,
    logger,
    auditLogMax: 3,
  });
  const overrides = createOverridesAdmin({
    store,
    currentConfig: () => config ?? undefined,
    clock,
    auditLogMax: 3,
    logger,
  });
  const transport = createRouterTransport((router) => {
    registerAdmin(router, { overrides });
  });
  return { client: createClient(AdminService, transport), clock, store };
}

async function refusal(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("the call was not refused");
}

/** A unit number outside the enum, as a client with a newer proto could send. */
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- deliberately not a member
const unknownUnit: Unit = Number("99");

const tenant = (value: string) => [{ key: "tenant", value }];

describe("SetOverride", () => {
  it("answers the override with its limit resolved, the rule's stats key and the actor header", async () => {
    const { client } = setup();
    const { override } = await client.setOverride(
      {
        domain: "api",
        entries: tenant("acme"),
        limit: { requestsPerUnit: 100 },
        reason: "ticket 42",
        ttl: { seconds: 3600n },
      },
      { headers: { "x-ratelimit-actor": "alice" } },
    );
    expect(override?.rule).toBe("api.tenant");
    expect(override?.actor).toBe("alice");
    expect(override?.reason).toBe("ticket 42");
    expect(override?.limit?.unit).toBe(Unit.MINUTE);
    expect(override?.limit?.unitMultiplier).toBe(1);
    expect(override?.limit?.algorithm).toBe("fixed_window");
    expect(override?.expireTime?.seconds).toBe(1_800_000_000n + 3600n);
  });

  it("records 'anonymous' when no actor header is sent", async () => {
    const { client } = setup();
    const { override } = await client.setOverride({
      domain: "api",
      entries: tenant("acme"),
      limit: { requestsPerUnit: 1, unit: Unit.SECOND },
    });
    expect(override?.actor).toBe("anonymous");
  });

  it.each([
    [{ domain: "", entries: tenant("a") }, Code.InvalidArgument, "domain"],
    [{ domain: "api", entries: [] }, Code.InvalidArgument, "entries"],
    [
      { domain: "api", entries: [{ key: "", value: "a" }] },
      Code.InvalidArgument,
      "entries[0].key",
    ],
    [
      { domain: "api", entries: tenant("a*b") },
      Code.InvalidArgument,
      "entries[0].value",
    ],
    [{ domain: "api", entries: tenant("a") }, Code.InvalidArgument, "limit"],
    [
      { domain: "nope", entries: tenant("a"), limit: { requestsPerUnit: 1 } },
      Code.FailedPrecondition,
      "domain",
    ],
    [
      {
        domain: "api",
        entries: [{ key: "nothing", value: "a" }],
        limit: { requestsPerUnit: 1 },
      },
      Code.FailedPrecondition,
      "entries",
    ],
    [
      // The path rule has no limit of its own; only path + method has.
      {
        domain: "api",
        entries: [{ key: "path", value: "/x" }],
        limit: { requestsPerUnit: 1 },
      },
      Code.FailedPrecondition,
      "entries",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1, unit: unknownUnit },
      },
      Code.InvalidArgument,
      "limit.unit",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1, unit: Unit.SECOND, algorithm: "leaky" },
      },
      Code.InvalidArgument,
      "limit.algorithm",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1, unit: Unit.SECOND, burst: 3 },
      },
      Code.InvalidArgument,
      "limit.burst",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { unlimited: true, requestsPerUnit: 3 },
      },
      Code.InvalidArgument,
      "limit.requests_per_unit",
    ],
    [
      {
        domain: "api",
        entries: [{ key: "bucket", value: "x" }],
        limit: { requestsPerUnit: 0 },
      },
      Code.InvalidArgument,
      "limit.requests_per_unit",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1, unit: Unit.DAY, timeZone: "Mars/Base" },
      },
      Code.InvalidArgument,
      "limit.time_zone",
    ],
    [
      { domain: "api", entries: [{ key: "free", value: "x" }], limit: {} },
      Code.InvalidArgument,
      "limit.unit",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1 },
        ttl: { nanos: -5_000_000 },
      },
      Code.InvalidArgument,
      "ttl",
    ],
    [
      {
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1 },
        reason: "x".repeat(1025),
      },
      Code.InvalidArgument,
      "reason",
    ],
  ])(
    "refuses %j with a message naming the field",
    async (request, code, field) => {
      const { client } = setup();
      const err = await refusal(client.setOverride(request));
      expect(err.code).toBe(code);
      expect(err.rawMessage.startsWith(`${field}:`)).toBe(true);
    },
  );

  it("refuses every change before a config is loaded", async () => {
    const { client } = setup(null);
    const err = await refusal(
      client.setOverride({
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: 1 },
      }),
    );
    expect(err.code).toBe(Code.FailedPrecondition);
  });
});

describe("DeleteOverride, ListOverrides and GetAuditLog", () => {
  it("lists what is in force, deletes it, and logs each change newest first", async () => {
    const { client, clock, store } = setup();
    const set = (value: string, ttlSeconds = 0n) =>
      client.setOverride(
        {
          domain: "api",
          entries: tenant(value),
          limit: { requestsPerUnit: 5, unit: Unit.SECOND },
          reason: `for ${value}`,
          ...(ttlSeconds > 0n ? { ttl: { seconds: ttlSeconds } } : {}),
        },
        { headers: { "x-ratelimit-actor": "bob" } },
      );
    await set("a");
    await set("b", 10n);
    expect(
      (await client.listOverrides({ domain: "api" })).overrides.map(
        (o) => o.entries[0]?.value,
      ),
    ).toEqual(["a", "b"]);
    // A limit returns the first by descriptor text, and the total in force.
    const first = await client.listOverrides({ domain: "api", limit: 1 });
    expect(first.overrides.map((o) => o.entries[0]?.value)).toEqual(["a"]);
    expect(first.total).toBe(2);

    const deleted = await client.deleteOverride(
      { domain: "api", entries: tenant("a"), reason: "done" },
      { headers: { "x-ratelimit-actor": "carol" } },
    );
    expect(deleted.override?.reason).toBe("for a");
    const missing = await refusal(
      client.deleteOverride({ domain: "api", entries: tenant("a") }),
    );
    expect(missing.code).toBe(Code.NotFound);

    clock.seconds += 10;
    store.sweep();
    expect((await client.listOverrides({ domain: "" })).overrides).toEqual([]);
    const { records } = await client.getAuditLog({ domain: "api" });
    // ADMIN_AUDIT_LOG_MAX is 3 here: the first set is dropped.
    expect(records.map((r) => [r.action, r.actor, r.reason])).toEqual([
      ["expire", "ratelimit", "expired"],
      ["delete", "carol", "done"],
      ["set", "bob", "for b"],
    ]);
    expect(records[1]?.before?.entries[0]?.value).toBe("a");
    expect(records[1]?.after).toBeUndefined();
    expect(records[2]?.after?.limit?.requestsPerUnit).toBe(5);
    expect(
      (await client.getAuditLog({ domain: "api", limit: 1 })).records,
    ).toHaveLength(1);
    expect((await client.getAuditLog({ domain: "other" })).records).toEqual([]);
  });

  it("records the override replaced as 'before'", async () => {
    const { client } = setup();
    for (const rpu of [1, 2])
      await client.setOverride({
        domain: "api",
        entries: tenant("a"),
        limit: { requestsPerUnit: rpu },
      });
    const { records } = await client.getAuditLog({ domain: "" });
    expect(records[0]?.before?.limit?.requestsPerUnit).toBe(1);
    expect(records[0]?.after?.limit?.requestsPerUnit).toBe(2);
    expect(records[1]?.before).toBeUndefined();
  });
});

describe("resolveOverrideLimit", () => {
  const config = loaded();
  const rule = (key: string, value = "x") =>
    config.getLimit(
      "api",
      create(RateLimitDescriptorSchema, { entries: [{ key, value }] }),
    )!;
  const resolve = (key: string, init: LimitInit) =>
    resolveOverrideLimit(create(OverrideLimitSchema, init), rule(key));

  it("keeps the rule's whole window when unit is unset", () => {
    const bucket = resolve("bucket", { requestsPerUnit: 50 });
    expect(bucket.unit).toBe(Unit.SECOND);
    expect(bucket.algorithm).toBe("token_bucket");
    // burst 0 is requests_per_unit, as in the YAML, not the rule's burst.
    expect(bucket.burst).toBe(50);
    const month = resolve("month", { requestsPerUnit: 9000 });
    expect(month.timeZone).toBe("Europe/Berlin");
    expect(calendarOf(compileOverrideLimit(month).algorithm)?.timeZone).toBe(
      "Europe/Berlin",
    );
  });

  it("describes its own window when unit is set (the algorithm still the rule's when empty)", () => {
    const month = resolve("month", { requestsPerUnit: 10, unit: Unit.DAY });
    expect(month.timeZone).toBe("");
    expect(month.unitMultiplier).toBe(1);
    const bucket = resolve("bucket", {
      requestsPerUnit: 10,
      unit: Unit.MINUTE,
    });
    expect(bucket.algorithm).toBe("token_bucket");
  });

  it("names the field of a window the compiler refuses", () => {
    expect(() =>
      compileOverrideLimit(
        resolve("tenant", {
          requestsPerUnit: 1,
          unit: Unit.YEAR,
          unitMultiplier: 1000,
        }),
      ),
    ).toThrow(
      expect.objectContaining({ field: "limit.unit_multiplier" }) as Error,
    );
    expect(() => resolve("tenant", { unlimited: true, burst: 2 })).toThrow(
      OverrideLimitError,
    );
  });
});
