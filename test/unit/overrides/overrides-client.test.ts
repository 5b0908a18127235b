import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { FlagError } from "../../../src/cli/go-flags.js";
import {
  defaultAdminUrl,
  formatAuditRecord,
  formatOverride,
  overrideCommandOf,
  parseLimitFlag,
} from "../../../src/cli/overrides-client.js";
import {
  AuditRecordSchema,
  OverrideSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";

describe("ratelimit-client override flags", () => {
  it.each([
    ["unlimited", { unlimited: true }],
    ["100", { requestsPerUnit: 100 }],
    ["0/second", { requestsPerUnit: 0, unit: Unit.SECOND }],
    ["100/Minutes", { requestsPerUnit: 100, unit: Unit.MINUTE }],
    [
      "300/5minute",
      { requestsPerUnit: 300, unit: Unit.MINUTE, unitMultiplier: 5 },
    ],
  ])("parses -limit %s", (text, limit) => {
    expect(parseLimitFlag(text)).toEqual(limit);
  });

  it.each(["", "ten", "10/fortnight", "-1/second", "10/", "5000000000"])(
    "refuses -limit %j",
    (text) => {
      expect(() => parseLimitFlag(text)).toThrow(FlagError);
    },
  );

  it("takes one command at a time", () => {
    const flags = (...on: string[]) =>
      new Map(on.map((name) => [name, "true"] as const));
    expect(overrideCommandOf(flags())).toBeUndefined();
    expect(overrideCommandOf(flags("list-overrides"))).toBe("list");
    expect(() =>
      overrideCommandOf(flags("set-override", "delete-override")),
    ).toThrow("only one of -set-override, -delete-override at a time");
  });

  it("calls the debug port of the environment by default", () => {
    expect(defaultAdminUrl({})).toBe("http://localhost:6070");
    expect(defaultAdminUrl({ DEBUG_HOST: "::1", DEBUG_PORT: "7000" })).toBe(
      "http://[::1]:7000",
    );
  });

  it("prints an override and an audit record on one line each", () => {
    const override = create(OverrideSchema, {
      domain: "api",
      entries: [{ key: "tenant", value: "acme*" }],
      limit: {
        requestsPerUnit: 20,
        unit: Unit.SECOND,
        unitMultiplier: 1,
        algorithm: "token_bucket",
        burst: 40,
      },
      expireTime: timestampFromMs(1_800_000_090_000),
      reason: "launch",
      actor: "alice",
      rule: "api.tenant",
    });
    expect(formatOverride(override, 1_800_000_000_000)).toBe(
      'api tenant=acme*: 20 per SECOND (token_bucket, burst 40), expires 2027-01-15T08:01:30.000Z (in 1m30s), set by alice, reason "launch"; rule api.tenant',
    );
    const record = create(AuditRecordSchema, {
      time: timestampFromMs(1_800_000_000_000),
      actor: "bob",
      action: "delete",
      reason: "done",
      domain: "api",
      before: override,
    });
    expect(formatAuditRecord(record)).toBe(
      '2027-01-15T08:00:00.000Z delete bob api tenant=acme*: 20 per SECOND (token_bucket, burst 40) -> none "done"',
    );
  });
});
