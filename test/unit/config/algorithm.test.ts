import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { calendarOf, fixedEpochWindow } from "../../../src/config/algorithm.js";
import { resolveGcraParams } from "../../../src/config/token-bucket.js";
import { loadConfig } from "../../../src/config/load-config.js";
import { RateLimitDescriptorSchema } from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";

const config = `domain: api
descriptors:
  - key: fixed
    rate_limit: { unit: minute, unit_multiplier: 5, requests_per_unit: 100 }
  - key: sliding
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: sliding_window }
  - key: bucket
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
  - key: month
    rate_limit: { unit: month, requests_per_unit: 1000, time_zone: Europe/Berlin }
`;

function limitFor(key: string) {
  const loaded = loadConfig([{ name: "config.api.yaml", text: config }], {
    statsManager: createStatsManager(),
  });
  const descriptor = create(RateLimitDescriptorSchema, {
    entries: [{ key, value: "v" }],
  });
  const limit = loaded.getLimit("api", descriptor);
  if (limit === undefined) throw new Error(`no limit for ${key}`);
  return limit;
}

describe("config: RateLimit.algorithm", () => {
  it("is one frozen tagged value per kind, as the YAML says", () => {
    const fixed = limitFor("fixed").algorithm;
    expect(fixed).toEqual({
      kind: "fixed_window",
      window: { kind: "epoch", seconds: 300 },
    });
    expect(Object.isFrozen(fixed)).toBe(true);
    expect(limitFor("sliding").algorithm).toEqual({
      kind: "sliding_window",
      window: { kind: "epoch", seconds: 1 },
    });
    const bucket = limitFor("bucket");
    expect(bucket.algorithm).toEqual({
      kind: "token_bucket",
      bucket: resolveGcraParams({
        requestsPerUnit: 10,
        windowSeconds: 1,
        burst: 20,
      }),
    });
    const month = limitFor("month").algorithm;
    expect(month.kind).toBe("fixed_window");
    const period = calendarOf(month);
    expect(period?.unit).toBe("month");
    expect(period?.timeZone).toBe("Europe/Berlin");
    expect(month).toEqual({
      kind: "fixed_window",
      window: { kind: "calendar", period },
    });
  });

  it("shares one fixed epoch window per length", () => {
    expect(fixedEpochWindow(60)).toBe(fixedEpochWindow(60));
    expect(fixedEpochWindow(60)).not.toBe(fixedEpochWindow(3600));
  });
});
