import { create, fromJsonString } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  fromOverrideMessage,
  overrideFromJson,
  overrideToJson,
  ownOverrideJson,
} from "../../../src/overrides/override-message.js";
import type { OverrideRecord } from "../../../src/overrides/override-table.js";
import {
  OverrideLimitSchema,
  OverrideSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";

/** What the message parser makes of a stored value: the record, or the error's class. */
function reference(json: string): OverrideRecord | string {
  try {
    return fromOverrideMessage(
      fromJsonString(OverrideSchema, json, { ignoreUnknownFields: true }),
    );
  } catch (err) {
    return err instanceof RangeError ? "RangeError" : "Error";
  }
}

function parsed(json: string): OverrideRecord | string {
  try {
    return overrideFromJson(json);
  } catch (err) {
    return err instanceof RangeError ? "RangeError" : "Error";
  }
}

const base: OverrideRecord = {
  domain: "api",
  entries: [
    { key: "tenant", value: "acme" },
    { key: "plan", value: "gold*" },
  ],
  limit: create(OverrideLimitSchema, {
    requestsPerUnit: 100,
    unit: Unit.MINUTE,
    unitMultiplier: 1,
    algorithm: "fixed_window",
  }),
  expireMs: 1_800_000_060_123,
  reason: "INC-4711: launch week",
  actor: "alice",
  updateMs: 1_800_000_000_007,
};

describe("overrideFromJson", () => {
  it("reads what overrideToJson writes, every limit field and both times", () => {
    const records: OverrideRecord[] = [
      base,
      { ...base, expireMs: undefined, reason: "", actor: "" },
      {
        ...base,
        limit: create(OverrideLimitSchema, {
          requestsPerUnit: 4294967295,
          unit: Unit.HOUR,
          unitMultiplier: 3,
          algorithm: "token_bucket",
          burst: 7,
          shadowMode: true,
          timeZone: "Europe/Berlin",
          weekStart: "monday",
        }),
      },
      { ...base, limit: create(OverrideLimitSchema, { unlimited: true }) },
      {
        ...base,
        entries: [{ key: 'a"b\\c', value: "é,=\u0001\n" }],
        reason: 'quote " backslash \\ tab \t',
      },
      { ...base, updateMs: 0, expireMs: -62135596800000 },
    ];
    for (const record of records) {
      const json = overrideToJson(record);
      // Read by the direct walk, not the message parser.
      expect(ownOverrideJson(json)).toEqual(record);
      expect(parsed(json)).toEqual(record);
      expect(parsed(json)).toEqual(reference(json));
    }
  });

  it("gives the message parser's result for every other spelling proto3 JSON allows, and its refusals", () => {
    const own = JSON.parse(overrideToJson(base)) as Record<string, unknown>;
    const limit = own["limit"] as Record<string, unknown>;
    const variants: unknown[] = [
      { ...own, rule: "api.tenant" },
      { ...own, limit: { ...limit, unit: "UNKNOWN", burst: 0 } },
      { ...own, extra: 1 },
      { ...own, expire_time: own["expireTime"] },
      { ...own, limit: { ...limit, requests_per_unit: 5 } },
      { ...own, limit: { ...limit, unit: 2 } },
      { ...own, limit: { ...limit, unit: "FORTNIGHT" } },
      { ...own, limit: { ...limit, requestsPerUnit: "7" } },
      { ...own, limit: { ...limit, requestsPerUnit: -1 } },
      { ...own, limit: { ...limit, requestsPerUnit: 4294967296 } },
      { ...own, limit: { ...limit, requestsPerUnit: 1.5 } },
      { ...own, limit: { ...limit, requestsPerUnit: 1e2 } },
      { ...own, limit: { ...limit, shadowMode: "true" } },
      { ...own, limit: { ...limit, unit: null } },
      { ...own, limit: {} },
      { ...own, limit: null },
      { ...own, limit: [] },
      { ...own, domain: "" },
      { ...own, domain: 5 },
      { ...own, entries: [] },
      { ...own, entries: [{ key: "tenant" }] },
      { ...own, entries: [{ key: "tenant", value: 1 }] },
      { ...own, entries: [{ key: "tenant", value: "x", other: "y" }] },
      { ...own, entries: {} },
      { ...own, reason: null },
      { ...own, updateTime: "2027-01-15T08:00:00Z" },
      { ...own, updateTime: "2027-01-15T08:00:00.5Z" },
      { ...own, updateTime: "2027-01-15T08:00:00.123456789Z" },
      { ...own, updateTime: "2027-01-15T08:00:00.9999999Z" },
      { ...own, updateTime: "2027-01-15T08:00:00.123+05:30" },
      { ...own, updateTime: "2027-01-15T08:00:00-01:00" },
      { ...own, updateTime: "2027-02-30T08:00:00Z" },
      { ...own, updateTime: "2027-01-15 08:00:00Z" },
      { ...own, updateTime: "0000-12-31T23:59:59Z" },
      { ...own, updateTime: "9999-12-31T23:59:59.999Z" },
      { ...own, updateTime: 1700000000 },
      [own],
      null,
      "text",
    ];
    for (const variant of variants) {
      const json = JSON.stringify(variant);
      expect(parsed(json), json).toEqual(reference(json));
    }
    for (const text of ["", "{", "{} x", '{"domain":"api",}', "nul"])
      expect(parsed(text), text).toEqual(reference(text));
  });

  it("agrees with the message parser on random values of the stored shape", () => {
    let state = 7;
    const next = (n: number): number => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return state % n;
    };
    const alphabet = [
      "a",
      "Z",
      "0",
      "=",
      ",",
      "\\",
      '"',
      "\u0001",
      "é",
      "😀",
      "\ud800",
      "*",
      " ",
    ];
    const text = (): string =>
      Array.from(
        { length: next(6) },
        () => alphabet[next(alphabet.length)],
      ).join("");
    for (let i = 0; i < 500; i++) {
      const record: OverrideRecord = {
        domain: text() || "d",
        entries: Array.from({ length: 1 + next(3) }, () => ({
          key: text(),
          value: text(),
        })),
        limit: create(OverrideLimitSchema, {
          requestsPerUnit: next(5) === 0 ? 0 : next(4294967295),
          unit:
            [Unit.UNKNOWN, Unit.SECOND, Unit.MINUTE, Unit.YEAR][next(4)] ??
            Unit.UNKNOWN,
          unitMultiplier: next(3),
          algorithm: ["", "fixed_window", "token_bucket"][next(3)] ?? "",
          burst: next(2) * next(1000),
          shadowMode: next(2) === 1,
          timeZone: next(2) === 1 ? text() : "",
        }),
        expireMs: next(2) === 1 ? undefined : next(2 ** 31) * 1000 + next(1000),
        reason: text(),
        actor: text(),
        updateMs: next(2 ** 31) * 1000 + next(1000),
      };
      const json = overrideToJson(record);
      expect(parsed(json), json).toEqual(reference(json));
      // The direct walk reads it, or leaves it to the message parser (a lone surrogate).
      const own = ownOverrideJson(json);
      if (own !== undefined) expect(own, json).toEqual(reference(json));
      else expect(json).toMatch(/\\u[dD][89a-fA-F]/);
    }
  });
});
