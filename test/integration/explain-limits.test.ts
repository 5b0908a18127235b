import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runClient } from "../../src/cli/client.js";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainResponseSchema,
  RateLimitResponse_Code as Code,
  type ExplainResponse,
} from "../../src/proto.js";
import type { ConsoleState } from "../../src/server/console.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

// Explain of token buckets, calendar windows and rate_limits: lists through the real service on
// the memory backend: POST /explain (proto3 JSON) against POST /json (ShouldRateLimit), the
// ratelimit-client tree over gRPC, and the console's rule tree, at a fixed time.

const config = `domain: api
descriptors:
  - key: user
    rate_limits:
      - { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
      - { unit: hour, requests_per_unit: 3 }
      - { name: monthly, unit: month, requests_per_unit: 1000, time_zone: Europe/Berlin }
  - key: key
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
  - key: tenant
    rate_limit: { unit: week, requests_per_unit: 1000, time_zone: America/New_York, week_start: sunday }
`;

/** 2026-11-27T12:00:00Z, a Friday. */
const noon = Date.UTC(2026, 10, 27, 12) / 1000;

const body = (hitsAddend: number, ...labels: string[]) =>
  JSON.stringify({
    domain: "api",
    hitsAddend,
    descriptors: labels.map((label) => {
      const [key, value] = label.split("=");
      return { entries: [{ key, value }] };
    }),
  });

describe("Explain of token buckets, calendar windows and rate_limits: lists on the memory backend", () => {
  let t: TestApp;
  const clock = new FakeClock(noon);
  beforeAll(async () => {
    t = await startTestApp(
      { "api.yaml": config },
      { EXPLAIN_ENABLED: "true" },
      undefined,
      { clock },
    );
  });
  afterAll(async () => {
    await t.stop();
  });

  async function explain(request: string): Promise<ExplainResponse> {
    const res = await fetch(`http://${t.addresses.http}/explain`, {
      method: "POST",
      body: `{"request":${request}}`,
    });
    expect(res.status).toBe(200);
    return fromJson(ExplainResponseSchema, (await res.json()) as JsonObject);
  }

  async function shouldRateLimit(request: string) {
    const res = await fetch(`http://${t.addresses.http}/json`, {
      method: "POST",
      body: request,
    });
    return (await res.json()) as {
      overallCode: string;
      statuses: {
        code: string;
        limitRemaining?: number;
        durationUntilReset?: string;
      }[];
    };
  }

  it("predicts over POST /explain what POST /json then answers", async () => {
    await shouldRateLimit(body(2, "user=alice", "key=k1", "tenant=acme"));
    const request = body(1, "user=alice", "key=k1", "tenant=acme");
    const r = await explain(request);
    const actual = await shouldRateLimit(request);
    expect(Code[r.overallCode]).toBe(actual.overallCode);
    expect(
      r.descriptors.map((d) => ({
        code: Code[d.status!.code],
        limitRemaining: d.status!.limitRemaining,
        durationUntilReset: `${d.status!.durationUntilReset!.seconds}s`,
      })),
    ).toEqual(
      actual.statuses.map((s) => ({
        code: s.code,
        limitRemaining: s.limitRemaining ?? 0,
        durationUntilReset: s.durationUntilReset,
      })),
    );
    const [user, key, tenant] = r.descriptors as [
      (typeof r.descriptors)[number],
      (typeof r.descriptors)[number],
      (typeof r.descriptors)[number],
    ];
    // The list: the hourly limit (3 per hour, 2 used) is the tightest and decides.
    expect(user.limits.map((l) => [l.index, l.deciding])).toEqual([
      [0, false],
      [1, true],
      [2, false],
    ]);
    expect(user.limits[0]!.bucket).toMatchObject({
      key: "api_user_alice_tb1_10_20",
      remaining: 18n,
      remainingAfter: 17n,
      admitted: true,
    });
    expect(user.limits[1]!.verdict).toBe(Verdict.NEAR_LIMIT);
    expect(user.limits[2]!.counter?.period).toMatchObject({
      label: "2026-11",
      timeZone: "Europe/Berlin",
      end: "2026-12-01T00:00:00+01:00",
    });
    expect(key.rule?.tokenBucket?.burst).toBe(20);
    expect(key.bucket?.untilFull).toMatchObject({
      seconds: 0n,
      nanos: 300_000_000,
    });
    expect(tenant.counter?.period).toMatchObject({
      label: "2026-11-22/P1W",
      start: "2026-11-22T00:00:00-05:00",
      end: "2026-11-29T00:00:00-05:00",
      secondsLeft: BigInt(Date.UTC(2026, 10, 29, 5) / 1000 - noon),
    });
  });

  it("prints the tree with ratelimit-client -explain over gRPC", async () => {
    const out: string[] = [];
    const code = await runClient(
      [
        "-dial_string",
        t.addresses.grpc,
        "-explain",
        "-domain",
        "api",
        "-descriptors",
        "user=bob",
        "-descriptors",
        "tenant=initech",
      ],
      (line) => out.push(line),
      (line) => out.push(line),
    );
    expect(code).toBe(0);
    const lines = out.join("\n").split("\n");
    expect(lines).toContain(
      "│  ├─ limits[0] per_second: 10 per SECOND token_bucket burst 20",
    );
    expect(lines).toContain(
      "│  │  ├─ token bucket: api_user_bob_tb1_10_20 10 per SECOND, burst 20: 20 left → 19, full in 100ms (TAT 2026-11-27T12:00:00.000Z → 2026-11-27T12:00:00.100Z; one hit every 100ms)",
    );
    expect(lines).toContain(
      "│  ├─ limits[1] per_hour: 3 per HOUR  ◀ this limit decides",
    );
    expect(lines).toContain(
      "   ├─ calendar: week from sunday in America/New_York (2026-11-22/P1W, resets 2026-11-29T00:00:00-05:00, in 1d 17h 00m)",
    );
  });

  it("serves every limit of a rule in the console's rule tree", async () => {
    const res = await fetch(`http://${t.addresses.debug}/console/state.json`);
    const state = (await res.json()) as ConsoleState;
    const rules = state.domains[0]!.rules;
    expect(rules.map((r) => [r.fullKey, r.list, r.limits.length])).toEqual([
      ["api.user", true, 3],
      ["api.key", false, 1],
      ["api.tenant", false, 1],
    ]);
    expect(rules[0]!.limits).toEqual([
      {
        name: "",
        unit: "SECOND",
        requestsPerUnit: 10,
        unitMultiplier: 1,
        windowSeconds: 1,
        algorithm: "token_bucket",
        burst: 20,
        emissionIntervalUs: 100_000,
        statsKeySuffix: "_per_second",
      },
      {
        name: "",
        unit: "HOUR",
        requestsPerUnit: 3,
        unitMultiplier: 1,
        windowSeconds: 3600,
        algorithm: "fixed_window",
        statsKeySuffix: "_per_hour",
      },
      {
        name: "monthly",
        unit: "MONTH",
        requestsPerUnit: 1000,
        unitMultiplier: 1,
        windowSeconds: 2592000,
        algorithm: "fixed_window",
        timeZone: "Europe/Berlin",
        statsKeySuffix: "_monthly",
      },
    ]);
    expect(rules[2]!.limits[0]).toMatchObject({
      timeZone: "America/New_York",
      weekStart: "sunday",
    });
  });
});
