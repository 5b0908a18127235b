import { create, toJson } from "@bufbuild/protobuf";
import fc from "fast-check";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import { createExplainService } from "../../../src/explain/explain-service.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { createLocalCache } from "../../../src/limiter/local-cache.js";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainRequestSchema,
  ExplainResponseSchema,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  type RateLimitResponse_DescriptorStatus,
} from "../../../src/proto.js";
import { createRateLimitService } from "../../../src/service/rate-limit-service.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import { request } from "../../helpers/requests.js";

// Explain on the three kinds of limit of issue 23: token buckets (GCRA), calendar windows and
// rate_limits: lists, over the memory backend, against ShouldRateLimit itself.

interface Setup {
  readonly stop: boolean;
  readonly localCache: boolean;
}

/** 2026-11-27T12:00:00Z: a Friday, Europe/Berlin at +01:00. */
const friday = Date.UTC(2026, 10, 27, 12) / 1000;

/** A fresh service + Explain over a fresh memory backend, config loaded. */
function build(
  configText: string,
  setup: Setup = { stop: false, localCache: false },
) {
  const clock = new FakeClock(friday);
  const statsManager = createStatsManager();
  const decider = createDecider({
    clock,
    expirationJitterMaxSeconds: 0,
    ...(setup.localCache
      ? { localCache: createLocalCache({ maxBytes: 1 << 20, clock }) }
      : {}),
  });
  const cache = memoryLimiter({
    decider,
    clock,
    stopCacheKeyIncrementWhenOverlimit: setup.stop,
  });
  const service = createRateLimitService({
    cache,
    statsManager,
    clock,
    logger: silentLogger(),
  });
  service.applyConfigUpdate({
    ok: true,
    config: loadConfig([{ name: "c.yaml", text: configText }], {
      statsManager,
    }),
  });
  const explain = createExplainService({
    service,
    cache,
    clock,
    backend: "memory",
  });
  return { service, explain, cache, statsManager, clock };
}

const comparable = (s: RateLimitResponse_DescriptorStatus) => ({
  code: s.code,
  limitRemaining: s.limitRemaining,
  limit: s.currentLimit && {
    name: s.currentLimit.name,
    requestsPerUnit: s.currentLimit.requestsPerUnit,
    unit: s.currentLimit.unit,
  },
  reset: s.durationUntilReset?.seconds,
});

describe("Explain of a token bucket", () => {
  const config = `domain: d
descriptors:
  - key: u
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
`;

  it("shows the bucket's parameters and GCRA state, and predicts ShouldRateLimit", async () => {
    const { explain, service } = build(config);
    for (let i = 0; i < 7; i++)
      await service.shouldRateLimit(
        request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
      );
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
      }),
    );
    const d = r.descriptors[0]!;
    expect(d.rule?.tokenBucket?.burst).toBe(20);
    expect(d.rule?.tokenBucket?.emissionInterval).toMatchObject({
      seconds: 0n,
      nanos: 100_000_000,
    });
    expect(d.counter).toBeUndefined();
    const b = d.bucket!;
    expect(b.key).toBe("d_u_a_tb1_10_20");
    expect(b.remaining).toBe(13n);
    expect(b.remainingAfter).toBe(12n);
    expect(b.admitted).toBe(true);
    // 7 hits taken at `friday`: the TAT is 0.7 s ahead, 0.8 s after this one.
    expect(b.tat).toMatchObject({
      seconds: BigInt(friday),
      nanos: 700_000_000,
    });
    expect(b.tatAfter).toMatchObject({
      seconds: BigInt(friday),
      nanos: 800_000_000,
    });
    expect(b.untilFull).toMatchObject({ seconds: 0n, nanos: 800_000_000 });
    expect(b.retryAfter).toBeUndefined();
    expect(d.verdict).toBe(Verdict.WITHIN_LIMIT);
    expect(d.notes).toEqual([]);
    const actual = await service.shouldRateLimit(
      request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
    );
    expect(comparable(d.status!)).toEqual(comparable(actual.statuses[0]!));
  });

  it("reports a refusal with the time until the same request fits", async () => {
    const { explain, service } = build(config);
    await service.shouldRateLimit(
      request({ domain: "d", hitsAddend: 18 }, [["u", "a"]]),
    );
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d", hitsAddend: 5 }, [["u", "a"]]),
      }),
    );
    const d = r.descriptors[0]!;
    expect(r.overallCode).toBe(Code.OVER_LIMIT);
    expect(d.verdict).toBe(Verdict.OVER_LIMIT);
    expect(d.deciding).toBe(true);
    const b = d.bucket!;
    expect(b.admitted).toBe(false);
    expect(b.remaining).toBe(2n);
    expect(b.remainingAfter).toBe(2n);
    expect(b.tatAfter).toEqual(b.tat);
    // 18 × 100 ms taken; 5 more need 2300 ms − 2000 ms of room: 300 ms.
    expect(b.retryAfter).toMatchObject({ seconds: 0n, nanos: 300_000_000 });
    expect(d.notes.join("\n")).toContain(
      "token bucket: 5 hit(s) wanted, 2 left: refused, nothing taken; the same request fits in 300ms",
    );
    const actual = await service.shouldRateLimit(
      request({ domain: "d", hitsAddend: 5 }, [["u", "a"]]),
    );
    expect(comparable(d.status!)).toEqual(comparable(actual.statuses[0]!));
  });

  it("says when the hits exceed the burst", async () => {
    const { explain } = build(config);
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d", hitsAddend: 21 }, [["u", "a"]]),
      }),
    );
    const b = r.descriptors[0]!.bucket!;
    expect(b.exceedsBurst).toBe(true);
    expect(b.retryAfter).toBeUndefined();
    expect(r.descriptors[0]!.notes[0]).toBe(
      "token bucket: 21 hits are more than the burst 20: never admitted, nothing taken",
    );
  });

  it("sees an earlier descriptor's hits on the same bucket", async () => {
    const { explain, service } = build(config);
    const req = request(
      { domain: "d", hitsAddend: 12 },
      [["u", "a"]],
      [["u", "a"]],
    );
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req }),
    );
    expect(r.descriptors[1]!.notes[0]).toBe(
      "an earlier descriptor of this request takes from the same bucket first",
    );
    const actual = await service.shouldRateLimit(req);
    expect(r.descriptors.map((d) => comparable(d.status!))).toEqual(
      actual.statuses.map(comparable),
    );
    expect(r.overallCode).toBe(actual.overallCode);
  });
});

describe("Explain of a calendar window", () => {
  const config = `domain: d
descriptors:
  - key: m
    rate_limit: { unit: month, requests_per_unit: 1000, time_zone: Europe/Berlin }
  - key: w
    rate_limit: { unit: week, requests_per_unit: 5, time_zone: America/New_York, week_start: sunday }
`;

  it("shows the local period, its bounds with the zone's offsets and the seconds left", async () => {
    const { explain, service } = build(config);
    const req = request(
      { domain: "d", hitsAddend: 1 },
      [["m", "x"]],
      [["w", "y"]],
    );
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req }),
    );
    const month = r.descriptors[0]!;
    expect(month.rule?.timeZone).toBe("Europe/Berlin");
    expect(month.rule?.weekStart).toBe("");
    const c = month.counter!;
    expect(c.key).toBe("d_m_x_2026-11@Europe/Berlin");
    expect(c.period).toMatchObject({
      label: "2026-11",
      timeZone: "Europe/Berlin",
      start: "2026-11-01T00:00:00+01:00",
      end: "2026-12-01T00:00:00+01:00",
    });
    const end = Date.UTC(2026, 10, 30, 23) / 1000;
    expect(c.period?.secondsLeft).toBe(BigInt(end - friday));
    expect(c.windowStart?.seconds).toBe(
      BigInt(Date.UTC(2026, 9, 31, 23) / 1000),
    );
    expect(c.windowEnd?.seconds).toBe(BigInt(end));
    expect(month.status?.durationUntilReset?.seconds).toBe(
      BigInt(end - friday),
    );
    const week = r.descriptors[1]!;
    expect(week.rule?.weekStart).toBe("sunday");
    expect(week.counter?.period).toMatchObject({
      label: "2026-11-22/P1W",
      start: "2026-11-22T00:00:00-05:00",
      end: "2026-11-29T00:00:00-05:00",
    });
    const actual = await service.shouldRateLimit(req);
    expect(r.descriptors.map((d) => comparable(d.status!))).toEqual(
      actual.statuses.map(comparable),
    );
  });
});

describe("Explain of a rate_limits: list", () => {
  const config = `domain: d
descriptors:
  - key: u
    rate_limits:
      - { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
      - { unit: hour, requests_per_unit: 3 }
      - { name: monthly, unit: month, requests_per_unit: 1000, time_zone: Europe/Berlin }
`;

  it("checks every limit on its own and marks the deciding one", async () => {
    const { explain, service } = build(config);
    await service.shouldRateLimit(
      request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
    );
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
      }),
    );
    const d = r.descriptors[0]!;
    expect(d.limits).toHaveLength(3);
    expect(d.limits.map((l) => l.index)).toEqual([0, 1, 2]);
    expect(d.limits.map((l) => l.rule?.statsKeySuffix)).toEqual([
      "_per_second",
      "_per_hour",
      "_monthly",
    ]);
    expect(d.limits.map((l) => l.deciding)).toEqual([false, true, false]);
    expect(d.limits[0]!.bucket?.remaining).toBe(19n);
    expect(d.limits[1]!.counter).toMatchObject({ value: 1n, valueAfter: 2n });
    expect(d.limits[2]!.counter?.period?.label).toBe("2026-11");
    expect(d.limits.map((l) => l.status?.limitRemaining)).toEqual([18, 1, 998]);
    // The descriptor's fields are the deciding limit's.
    expect(d.counter).toEqual(d.limits[1]!.counter);
    expect(d.bucket).toBeUndefined();
    expect(d.verdict).toBe(d.limits[1]!.verdict);
    expect(d.notes).toContain(
      "rate_limits: 3 limits, each checked on its own; limits[1] decides with the fewest remaining (1)",
    );
    const actual = await service.shouldRateLimit(
      request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
    );
    expect(comparable(d.status!)).toEqual(comparable(actual.statuses[0]!));
  });

  it("names the over-limit limit as deciding", async () => {
    const { explain, service } = build(config);
    for (let i = 0; i < 3; i++)
      await service.shouldRateLimit(
        request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
      );
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
      }),
    );
    const d = r.descriptors[0]!;
    expect(r.overallCode).toBe(Code.OVER_LIMIT);
    expect(d.limits.map((l) => l.verdict)).toEqual([
      Verdict.WITHIN_LIMIT,
      Verdict.OVER_LIMIT,
      Verdict.WITHIN_LIMIT,
    ]);
    expect(d.limits[1]!.deciding).toBe(true);
    expect(d.notes).toContain(
      "rate_limits: 3 limits, each checked on its own; limits[1] is over its limit and decides",
    );
  });

  it("lists the limits offline too, without counters", async () => {
    const { explainConfig } =
      await import("../../../src/explain/explain-message.js");
    const { explainLimit } =
      await import("../../../src/explain/descriptor-explanation.js");
    const { service } = build(config);
    const view = service.currentConfig()!.view!;
    const e = explainConfig(
      (domain, descriptor) => explainLimit(view, domain, descriptor),
      request({ domain: "d", hitsAddend: 1 }, [["u", "a"]]),
    );
    const d = e.descriptors[0]!;
    expect(d.limits.map((l) => l.rule?.requestsPerUnit)).toEqual([10, 3, 1000]);
    expect(d.limits[0]!.rule?.tokenBucket?.burst).toBe(20);
    expect(d.limits[2]!.rule?.name).toBe("monthly");
    expect(d.limits.every((l) => l.verdict === Verdict.UNSPECIFIED)).toBe(true);
  });

  it("leaves a reference rule's answer without the new fields", async () => {
    const { explain } = build(`domain: d
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 5 }
`);
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d", hitsAddend: 1 }, [["k", "v"]]),
      }),
    );
    const json = JSON.stringify(toJson(ExplainResponseSchema, r));
    for (const field of [
      "limits",
      "bucket",
      "period",
      "tokenBucket",
      "timeZone",
      "weekStart",
      "statsKeySuffix",
    ])
      expect(json).not.toContain(`"${field}"`);
  });
});

// Property: Explain predicts ShouldRateLimit on random configs mixing the three kinds.
const kindArb = fc.constantFrom(
  "fixed-second",
  "fixed-minute",
  "multi-second",
  "sliding-minute",
  "bucket-second",
  "bucket-minute",
  "day-berlin",
  "week-newyork",
  "month-utc",
);
type Kind = typeof kindArb extends fc.Arbitrary<infer K> ? K : never;

function limitYaml(kind: Kind, rpu: number, burst: number | undefined) {
  switch (kind) {
    case "fixed-second":
      return { unit: "second", requests_per_unit: rpu };
    case "fixed-minute":
      return { unit: "minute", requests_per_unit: rpu };
    case "multi-second":
      return { unit: "second", unit_multiplier: 5, requests_per_unit: rpu };
    case "sliding-minute":
      return {
        unit: "minute",
        requests_per_unit: rpu,
        algorithm: "sliding_window",
      };
    case "bucket-second":
    case "bucket-minute":
      return {
        unit: kind === "bucket-second" ? "second" : "minute",
        requests_per_unit: Math.max(1, rpu),
        algorithm: "token_bucket",
        ...(burst !== undefined ? { burst } : {}),
      };
    case "day-berlin":
      return {
        unit: "day",
        requests_per_unit: rpu,
        time_zone: "Europe/Berlin",
      };
    case "week-newyork":
      return {
        unit: "week",
        requests_per_unit: rpu,
        time_zone: "America/New_York",
        week_start: "sunday",
      };
    case "month-utc":
      return { unit: "month", requests_per_unit: rpu, time_zone: "UTC" };
  }
}

const ruleArb = fc.record({
  key: fc.constantFrom("a", "b", "c"),
  shadow: fc.integer({ min: 0, max: 5 }).map((x) => x === 0),
  limits: fc.uniqueArray(
    fc.record({
      kind: kindArb,
      rpu: fc.integer({ min: 0, max: 6 }),
      burst: fc.option(fc.integer({ min: 1, max: 6 }), { nil: undefined }),
    }),
    // Two token buckets of one unit would share a bucket when their bursts agree.
    { minLength: 1, maxLength: 3, selector: (l) => l.kind },
  ),
  list: fc.boolean(),
});

const requestArb = fc
  .record({
    keys: fc.array(
      fc.tuple(fc.constantFrom("a", "b", "c"), fc.constantFrom("x", "y")),
      {
        minLength: 1,
        maxLength: 3,
      },
    ),
    hitsAddend: fc.integer({ min: 0, max: 3 }),
  })
  .map(({ keys, hitsAddend }) =>
    request({ domain: "d", hitsAddend: hitsAddend }, ...keys.map((k) => [k])),
  );

describe("Explain agrees with ShouldRateLimit on token buckets, calendar windows and rate_limits: lists (property)", () => {
  it("predicts every status without charging, and changes nothing", async () => {
    let buckets = 0;
    let lists = 0;
    let over = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(ruleArb, {
          minLength: 1,
          maxLength: 3,
          selector: (r) => r.key,
        }),
        fc.array(
          fc.tuple(
            requestArb,
            fc.oneof(
              fc.integer({ min: 0, max: 2 }),
              fc.integer({ min: 0, max: 150 }),
              fc.integer({ min: 0, max: 200_000 }),
            ),
          ),
          { maxLength: 12 },
        ),
        requestArb,
        fc.record({
          stop: fc.boolean(),
          localCache: fc.boolean(),
          allOrNothing: fc.boolean(),
        }),
        async (rules, history, req, setup) => {
          const text = JSON.stringify({
            domain: "d",
            ...(setup.allOrNothing ? { charge: "all_or_nothing" } : {}),
            descriptors: rules.map((r) => ({
              key: r.key,
              ...(r.shadow ? { shadow_mode: true } : {}),
              ...(r.list || r.limits.length > 1
                ? {
                    // Named: two limits of one unit would share a stats key.
                    rate_limits: r.limits.map((l, k) => ({
                      name: `l${k}`,
                      ...limitYaml(l.kind, l.rpu, l.burst),
                    })),
                  }
                : {
                    rate_limit: limitYaml(
                      r.limits[0]!.kind,
                      r.limits[0]!.rpu,
                      r.limits[0]!.burst,
                    ),
                  }),
            })),
          });
          const a = build(text, setup);
          const b = build(text, setup);
          for (const [r, wait] of history) {
            a.clock.seconds += wait;
            b.clock.seconds += wait;
            await a.service.shouldRateLimit(r);
            await b.service.shouldRateLimit(r);
          }
          const sizeBefore = a.cache.backend.size;
          const stats = () =>
            a.statsManager.store
              .snapshot()
              .counters.map((c) => [c.name, c.value()]);
          const statsBefore = stats();
          const predicted = await a.explain.explain(
            create(ExplainRequestSchema, { request: req }),
          );
          const again = await a.explain.explain(
            create(ExplainRequestSchema, { request: req }),
          );
          // Reading changed nothing: no counter, no bucket, no statistic.
          expect(a.cache.backend.size).toBe(sizeBefore);
          expect(stats()).toEqual(statsBefore);
          expect(toJson(ExplainResponseSchema, again)).toEqual(
            toJson(ExplainResponseSchema, predicted),
          );
          const reference = await b.service.shouldRateLimit(req);
          expect(predicted.overallCode).toBe(reference.overallCode);
          expect(
            predicted.descriptors.map((d) => comparable(d.status!)),
          ).toEqual(reference.statuses.map(comparable));
          // What the charge left behind is what was predicted: read back with hits 0 on
          // descriptors with a key of their own.
          const check = create(RateLimitRequestSchema, {
            domain: "d",
            descriptors: req.descriptors.map((d) => ({
              entries: d.entries,
              hitsAddend: 0n,
            })),
          });
          const after = await b.explain.explain(
            create(ExplainRequestSchema, { request: check }),
          );
          const label = (i: number) =>
            JSON.stringify(
              req.descriptors[i]!.entries.map((e) => [e.key, e.value]),
            );
          predicted.descriptors.forEach((d, i) => {
            if (
              predicted.descriptors.some(
                (_o, j) => j !== i && label(j) === label(i),
              )
            )
              return;
            // A list's own fields are its deciding limit's, which differs with hits 0.
            const pairs = [
              ...(d.limits.length > 0
                ? []
                : [
                    {
                      p: d.counter,
                      a: after.descriptors[i]!.counter,
                      b: d.bucket,
                      c: after.descriptors[i]!.bucket,
                    },
                  ]),
              ...d.limits.map((l, k) => ({
                p: l.counter,
                a: after.descriptors[i]!.limits[k]?.counter,
                b: l.bucket,
                c: after.descriptors[i]!.limits[k]?.bucket,
              })),
            ];
            for (const { p, a, b: pb, c } of pairs) {
              if (
                p !== undefined &&
                a !== undefined &&
                !p.localCacheHit &&
                !a.localCacheHit
              )
                expect(a.value).toBe(p.valueAfter);
              if (pb !== undefined && c !== undefined)
                expect(c.tat).toEqual(pb.tatAfter);
            }
          });
          for (const d of predicted.descriptors) {
            if (d.bucket !== undefined) buckets++;
            if (d.limits.length > 1) lists++;
            if (d.verdict === Verdict.OVER_LIMIT) over++;
            // The deciding limit's status is the descriptor's.
            const deciding = d.limits.filter((l) => l.deciding);
            if (d.limits.length > 0 && d.verdict !== Verdict.UNSPECIFIED) {
              expect(deciding).toHaveLength(1);
              expect(comparable(deciding[0]!.status!)).toEqual(
                comparable(d.status!),
              );
            }
          }
        },
      ),
      { numRuns: 300 },
    );
    expect(buckets).toBeGreaterThan(0);
    expect(lists).toBeGreaterThan(0);
    expect(over).toBeGreaterThan(0);
  }, 60_000);
});

describe("Explain of a leased window", () => {
  it("says that the limit takes leases and that the counter includes unspent ones", async () => {
    const { explain } = build(
      "domain: d\ndescriptors:\n  - key: u\n    rate_limit: { unit: minute, requests_per_unit: 500, lease: true }\n",
    );
    const r = await explain.explain(
      create(ExplainRequestSchema, {
        request: request({ domain: "d" }, [["u", "a"]]),
      }),
    );
    expect(r.descriptors[0]!.notes).toContain(
      "lease: true: each worker takes up to 5 hits (lease_max) of this window with one increment and admits from them in process; the counter includes leased hits not admitted yet, at most 5 per worker",
    );
  });
});
