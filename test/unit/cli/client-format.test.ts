import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  defaultDialString,
  formatResponse,
  runClient,
  windowOf,
} from "../../../src/cli/client.js";
import {
  DescriptorExplanationSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";

const response = create(RateLimitResponseSchema, {
  overallCode: Code.OK,
  statuses: [
    {
      code: Code.OK,
      currentLimit: { requestsPerUnit: 3, unit: Unit.SECOND },
      limitRemaining: 2,
      durationUntilReset: { seconds: 5n },
    },
    {
      code: Code.OK,
      currentLimit: { requestsPerUnit: 10, unit: Unit.MINUTE, name: "api" },
      limitRemaining: 9,
      durationUntilReset: { seconds: 6n },
    },
    { code: Code.OK },
  ],
});

describe("formatResponse", () => {
  it("prints a unit_multiplier window and a sliding window from the rules", () => {
    const text = formatResponse(
      response,
      ["a=1", "b=2", "c=3"],
      [
        { unitMultiplier: 10, windowSeconds: 10, slidingWindow: false },
        { unitMultiplier: 1, windowSeconds: 60, slidingWindow: true },
        undefined,
      ],
    );
    expect(text.split("\n")).toEqual([
      "descriptor a=1: OK, limit 3 per 10 SECOND (10s window), 2 remaining, resets in 5s",
      "descriptor b=2: OK, limit 10 per MINUTE (api), sliding window, 9 remaining, count falls by one in 6s",
      "descriptor c=3: OK, no limit applies",
      "overall: OK",
    ]);
  });

  it("says the window is the unit alone when the rules are unknown", () => {
    const text = formatResponse(response, ["a=1", "b=2", "c=3"]);
    expect(text).toContain(
      "descriptor a=1: OK, limit 3 per SECOND, 2 remaining, resets in 5s",
    );
    expect(text.split("\n").at(-1)).toMatch(
      /^note: window shown as the unit alone/,
    );
  });
});

describe("formatResponse of token buckets, calendar windows and rate_limits: lists", () => {
  const statuses = create(RateLimitResponseSchema, {
    overallCode: Code.OVER_LIMIT,
    statuses: [
      {
        code: Code.OK,
        currentLimit: { requestsPerUnit: 10, unit: Unit.SECOND },
        limitRemaining: 12,
        durationUntilReset: { seconds: 1n },
      },
      {
        code: Code.OK,
        currentLimit: { requestsPerUnit: 1000, unit: Unit.MONTH },
        limitRemaining: 997,
        durationUntilReset: { seconds: 298800n },
      },
      {
        code: Code.OVER_LIMIT,
        currentLimit: { requestsPerUnit: 3, unit: Unit.HOUR },
        limitRemaining: 0,
        durationUntilReset: { seconds: 3600n },
      },
    ],
  });
  const explanations = [
    create(DescriptorExplanationSchema, {
      rule: {
        requestsPerUnit: 10,
        unit: Unit.SECOND,
        unitMultiplier: 1,
        windowSeconds: 1,
        tokenBucket: { burst: 20 },
      },
    }),
    create(DescriptorExplanationSchema, {
      rule: {
        requestsPerUnit: 1000,
        unit: Unit.MONTH,
        unitMultiplier: 1,
        windowSeconds: 2592000,
        timeZone: "Europe/Berlin",
      },
    }),
    create(DescriptorExplanationSchema, {
      rule: {
        requestsPerUnit: 10,
        unit: Unit.SECOND,
        unitMultiplier: 1,
        windowSeconds: 1,
        tokenBucket: { burst: 20 },
      },
      limits: [
        {
          rule: {
            requestsPerUnit: 10,
            unit: Unit.SECOND,
            unitMultiplier: 1,
            windowSeconds: 1,
            tokenBucket: { burst: 20 },
          },
        },
        {
          index: 1,
          rule: {
            requestsPerUnit: 3,
            unit: Unit.HOUR,
            unitMultiplier: 1,
            windowSeconds: 3600,
          },
        },
      ],
    }),
  ];

  it("prints the bucket's burst and time until full, the zone, and the list's tightest limit", () => {
    const windows = explanations.map((d, i) =>
      windowOf(d, statuses.statuses[i]),
    );
    expect(
      formatResponse(statuses, ["k=1", "t=a", "u=b"], windows).split("\n"),
    ).toEqual([
      "descriptor k=1: OK, limit 10 per SECOND, token bucket burst 20, 12 remaining, full in 1s",
      "descriptor t=a: OK, limit 1000 per MONTH in Europe/Berlin, 997 remaining, resets in 298800s",
      "descriptor u=b: OVER_LIMIT, limit 3 per HOUR, tightest of 2 limits, 0 remaining, resets in 3600s",
      "overall: OVER_LIMIT",
    ]);
  });
});

describe("defaultDialString", () => {
  it("is GRPC_HOST:GRPC_PORT, localhost:8081 for what is unset", () => {
    expect(defaultDialString({})).toBe("localhost:8081");
    expect(defaultDialString({ GRPC_PORT: "9081" })).toBe("localhost:9081");
    expect(defaultDialString({ GRPC_HOST: "10.1.2.3", GRPC_PORT: "1" })).toBe(
      "10.1.2.3:1",
    );
  });

  it("dials localhost for a wildcard listen address and brackets IPv6", () => {
    expect(defaultDialString({ GRPC_HOST: "0.0.0.0" })).toBe("localhost:8081");
    expect(defaultDialString({ GRPC_HOST: "::" })).toBe("localhost:8081");
    expect(defaultDialString({ GRPC_HOST: "::1", GRPC_PORT: "7" })).toBe(
      "[::1]:7",
    );
  });
});

describe("runClient arguments", () => {
  const run = async (...argv: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runClient(
      argv,
      (l) => out.push(l),
      (l) => err.push(l),
    );
    return { code, out: out.join("\n"), err: err.join("\n") };
  };

  it("prints the version with -version", async () => {
    const r = await run("-version");
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^ratelimit-client \d+\.\d+\.\d+/);
  });

  it("refuses a non-flag argument with the usage and exit code 2", async () => {
    const r = await run("-domain", "rl", "stray");
    expect(r.code).toBe(2);
    expect(r.err).toContain('unexpected argument: "stray"');
    expect(r.err).toContain("usage of ratelimit-client:");
  });
});
