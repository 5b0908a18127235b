import { create } from "@bufbuild/protobuf";
import fc from "fast-check";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { explainLimit } from "../../../src/explain/descriptor-explanation.js";
import { explainConfig } from "../../../src/explain/explain-message.js";
import { createExplainService } from "../../../src/explain/explain-service.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { createLocalCache } from "../../../src/limiter/local-cache.js";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainRequestSchema,
  RateLimitRequestSchema,
  RateLimitResponse_Code as Code,
  type RateLimitRequest,
  type RateLimitResponse_DescriptorStatus,
} from "../../../src/proto.js";
import { RequestError } from "../../../src/service/errors.js";
import { createRateLimitService } from "../../../src/service/rate-limit-service.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { peekCounters } from "../../helpers/decisions.js";

interface Setup {
  readonly stop: boolean;
  readonly localCache: boolean;
  readonly shadow: boolean;
}

/** A fresh service + Explain over a fresh memory backend, config loaded. */
function build(configText: string, setup: Setup) {
  const clock = new FakeClock(1_700_000_030);
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
    globalShadowMode: setup.shadow,
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
    globalShadowMode: setup.shadow,
  });
  return { service, explain, cache, statsManager, clock };
}

/** The limits ShouldRateLimit applies to a request (as Explain finds them). */
function limitsOf(
  built: ReturnType<typeof build>,
  request: RateLimitRequest,
): (RateLimit | undefined)[] {
  const config = built.service.currentConfig()!;
  return explainConfig(
    (domain, d) => explainLimit(config.view!, domain, d),
    request,
  ).limits;
}

/** Whether another descriptor reads the same counter as descriptor `i`. */
function sharesKey(
  readings: readonly ({ key: string } | undefined)[],
  i: number,
): boolean {
  const key = readings[i]?.key;
  return readings.some((r, j) => j !== i && r?.key === key);
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

// Random configs over a small alphabet so requests often match.
const keyArb = fc.constantFrom("a", "b", "c");
const valueArb = fc.constantFrom("x", "y", "");
interface Rule {
  key: string;
  value: string;
  rpu: number;
  unit: string;
  limited: boolean;
  unlimited: boolean;
  shadow: boolean;
  share: boolean;
  name: string;
  replaces: string;
  multiplier: number | undefined;
  sliding: boolean;
  children: Rule[];
}
const ruleArb: fc.Arbitrary<Rule> = fc.letrec<{ rule: Rule }>((tie) => ({
  rule: fc.record({
    key: keyArb,
    value: fc.constantFrom("x", "y", "", "x*", "*"),
    rpu: fc.integer({ min: 0, max: 4 }),
    unit: fc.constantFrom("second", "minute", "hour"),
    limited: fc.boolean(),
    unlimited: fc.integer({ min: 0, max: 4 }).map((x) => x === 0),
    shadow: fc.boolean(),
    share: fc.boolean(),
    name: fc.constantFrom("", "n1", "n2"),
    replaces: fc.constantFrom("", "n1", "n2"),
    multiplier: fc.constantFrom(undefined, 1, 2, 3),
    sliding: fc.boolean(),
    children: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      fc.constant<Rule[]>([]),
      fc.array(tie("rule"), { maxLength: 3 }),
    ),
  }),
})).rule;

function yamlRules(rules: Rule[]): unknown[] {
  const seen = new Set<string>();
  const out: unknown[] = [];
  for (const r of rules) {
    const ck = r.value === "" ? r.key : `${r.key}_${r.value}`;
    if (seen.has(ck)) continue;
    seen.add(ck);
    const wildcard = ck.includes("*");
    const rateLimit = !r.limited
      ? undefined
      : r.unlimited
        ? { unlimited: true, ...(r.name !== "" ? { name: r.name } : {}) }
        : {
            unit: r.unit,
            requests_per_unit: r.rpu,
            ...(r.multiplier !== undefined
              ? { unit_multiplier: r.multiplier }
              : {}),
            ...(r.sliding ? { algorithm: "sliding_window" } : {}),
            ...(r.name !== "" ? { name: r.name } : {}),
            ...(r.replaces !== "" && r.replaces !== r.name
              ? { replaces: [{ name: r.replaces }] }
              : {}),
          };
    out.push({
      key: r.key,
      ...(r.value !== "" ? { value: r.value } : {}),
      ...(rateLimit !== undefined ? { rate_limit: rateLimit } : {}),
      ...(r.shadow ? { shadow_mode: true } : {}),
      ...(wildcard && r.share ? { share_threshold: true } : {}),
      ...(r.children.length > 0 ? { descriptors: yamlRules(r.children) } : {}),
    });
  }
  return out;
}

const requestArb = fc
  .record({
    descriptors: fc.array(
      fc.array(fc.tuple(keyArb, valueArb), { minLength: 1, maxLength: 3 }),
      { minLength: 1, maxLength: 3 },
    ),
    hitsAddend: fc.integer({ min: 0, max: 3 }),
  })
  .map(({ descriptors, hitsAddend }) =>
    create(RateLimitRequestSchema, {
      domain: "d",
      hitsAddend,
      descriptors: descriptors.map((entries) => ({
        entries: entries.map(([key, value]) => ({ key, value })),
      })),
    }),
  );

// Seeded sequences of hundreds of calls: seconds on a loaded machine, so not the 5 s default.
describe(
  "Explain agrees with ShouldRateLimit (property)",
  { timeout: 30_000 },
  () => {
    it("predicts the decision without charging, and with charge equals ShouldRateLimit on an identical fresh backend", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(ruleArb, { minLength: 1, maxLength: 5 }),
          // Each request of the history comes some seconds after the previous one, so sliding
          // windows see previous windows' counters fade.
          fc.array(
            fc.tuple(
              requestArb,
              fc.oneof(
                fc.integer({ min: 0, max: 3 }),
                fc.integer({ min: 0, max: 120 }),
              ),
            ),
            {
              maxLength: 6,
            },
          ),
          requestArb,
          fc.record({
            stop: fc.boolean(),
            localCache: fc.boolean(),
            shadow: fc.boolean(),
            allOrNothing: fc.boolean(),
          }),
          async (rules, history, request, setup) => {
            const text = JSON.stringify({
              domain: "d",
              ...(setup.allOrNothing ? { charge: "all_or_nothing" } : {}),
              descriptors: yamlRules(rules),
            });
            const a = build(text, setup);
            const b = build(text, setup);
            for (const [r, wait] of history) {
              a.clock.seconds += wait;
              b.clock.seconds += wait;
              await a.service.shouldRateLimit(r);
              await b.service.shouldRateLimit(r);
            }
            const limits = limitsOf(a, request);
            const peekBefore = await peekCounters(
              a.cache,
              limitRequest("d", request.descriptors, limits),
            );
            const countersBefore = a.statsManager.store
              .snapshot()
              .counters.map((c) => [c.name, c.value()]);
            const sizeBefore = a.cache.backend.size;
            const predicted = await a.explain.explain(
              create(ExplainRequestSchema, { request, charge: false }),
            );
            // Reading changed nothing: no counter, no statistic.
            expect(a.cache.backend.size).toBe(sizeBefore);
            expect(
              await peekCounters(
                a.cache,
                limitRequest("d", request.descriptors, limits),
              ),
            ).toEqual(peekBefore);
            expect(
              a.statsManager.store
                .snapshot()
                .counters.map((c) => [c.name, c.value()]),
            ).toEqual(countersBefore);
            const charged = await a.explain.explain(
              create(ExplainRequestSchema, { request, charge: true }),
            );
            const reference = await b.service.shouldRateLimit(request);
            const actual = charged.response!;
            expect(actual.overallCode).toBe(reference.overallCode);
            expect(actual.statuses.map(comparable)).toEqual(
              reference.statuses.map(comparable),
            );
            expect(charged.overallCode).toBe(reference.overallCode);
            expect(predicted.overallCode).toBe(reference.overallCode);
            expect(
              predicted.descriptors.map((d) => comparable(d.status!)),
            ).toEqual(reference.statuses.map(comparable));
            // The predicted counters are what the charge left behind.
            const peekAfter = await peekCounters(
              a.cache,
              limitRequest("d", request.descriptors, limits),
            );
            predicted.descriptors.forEach((d, i) => {
              const after = peekAfter[i];
              if (d.counter === undefined || after === undefined) return;
              if (after.key !== d.counter.key) return;
              expect(d.counter.previousValue).toBe(
                BigInt(after.previousValue ?? 0),
              );
              if (!d.counter.localCacheHit && !sharesKey(peekAfter, i))
                expect(d.counter.valueAfter).toBe(BigInt(after.value));
            });
            // A refused all-or-nothing request charged no counter (the charge may have entered
            // a key in the local cache).
            const values = (rs: typeof peekAfter) =>
              rs.map((r) => r && [r.key, r.value, r.previousValue]);
            if (predicted.allOrNothingRefused)
              expect(values(peekAfter)).toEqual(values(peekBefore));
          },
        ),
        { numRuns: 300 },
      );
    });
  },
);

// Seeded sequences of hundreds of calls: seconds on a loaded machine, so not the 5 s default.
describe(
  "Explain agrees with ShouldRateLimit on windows extensions (property)",
  { timeout: 30_000 },
  () => {
    // Flat configs where every request matches, long histories with short waits: sliding
    // windows see their previous window, multi-unit windows roll over, all-or-nothing domains
    // refuse and admit.
    const flatRuleArb = fc.record({
      key: keyArb,
      rpu: fc.integer({ min: 0, max: 6 }),
      unit: fc.constantFrom("second", "minute"),
      multiplier: fc.constantFrom(undefined, 1, 2, 5),
      sliding: fc.boolean(),
      shadow: fc.integer({ min: 0, max: 5 }).map((x) => x === 0),
    });
    const flatRequestArb = fc
      .record({
        keys: fc.array(fc.tuple(keyArb, fc.constantFrom("x", "y")), {
          minLength: 1,
          maxLength: 3,
        }),
        hitsAddend: fc.integer({ min: 0, max: 3 }),
      })
      .map(({ keys, hitsAddend }) =>
        create(RateLimitRequestSchema, {
          domain: "d",
          hitsAddend,
          descriptors: keys.map(([key, value]) => ({
            entries: [{ key, value }],
          })),
        }),
      );

    it("predicts every status, reset and counter without charging", async () => {
      let slidingWithPrevious = 0;
      let refusedSeen = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.uniqueArray(flatRuleArb, {
            minLength: 1,
            maxLength: 3,
            selector: (r) => r.key,
          }),
          fc.array(
            fc.tuple(
              flatRequestArb,
              fc.oneof(
                fc.integer({ min: 0, max: 2 }),
                fc.integer({ min: 0, max: 150 }),
              ),
            ),
            { maxLength: 12 },
          ),
          flatRequestArb,
          fc.record({
            stop: fc.boolean(),
            localCache: fc.boolean(),
            shadow: fc.constant(false),
            allOrNothing: fc.boolean(),
          }),
          async (rules, history, request, setup) => {
            const text = JSON.stringify({
              domain: "d",
              ...(setup.allOrNothing ? { charge: "all_or_nothing" } : {}),
              descriptors: rules.map((r) => ({
                key: r.key,
                ...(r.shadow ? { shadow_mode: true } : {}),
                rate_limit: {
                  unit: r.unit,
                  requests_per_unit: r.rpu,
                  ...(r.multiplier !== undefined
                    ? { unit_multiplier: r.multiplier }
                    : {}),
                  ...(r.sliding ? { algorithm: "sliding_window" } : {}),
                },
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
            const limits = limitsOf(a, request);
            const before = await peekCounters(
              a.cache,
              limitRequest("d", request.descriptors, limits),
            );
            const predicted = await a.explain.explain(
              create(ExplainRequestSchema, { request }),
            );
            expect(
              await peekCounters(
                a.cache,
                limitRequest("d", request.descriptors, limits),
              ),
            ).toEqual(before);
            const reference = await b.service.shouldRateLimit(request);
            expect(predicted.overallCode).toBe(reference.overallCode);
            expect(
              predicted.descriptors.map((d) => comparable(d.status!)),
            ).toEqual(reference.statuses.map(comparable));
            const after = await peekCounters(
              b.cache,
              limitRequest("d", request.descriptors, limits),
            );
            predicted.descriptors.forEach((d, i) => {
              const c = d.counter;
              const found = after[i];
              if (c === undefined || found === undefined) return;
              expect(c.previousKey).toBe(found.previousKey ?? "");
              expect(c.previousValue).toBe(BigInt(found.previousValue ?? 0));
              if ((found.previousValue ?? 0) > 0) slidingWithPrevious++;
              if (!c.localCacheHit && !sharesKey(after, i))
                expect(c.valueAfter).toBe(BigInt(found.value));
            });
            if (predicted.allOrNothingRefused) {
              refusedSeen++;
              expect(after.map((r) => r && [r.key, r.value])).toEqual(
                before.map((r) => r && [r.key, r.value]),
              );
            }
          },
        ),
        { numRuns: 300 },
      );
      // The generators reach the cases this property is about.
      expect(slidingWithPrevious).toBeGreaterThan(0);
      expect(refusedSeen).toBeGreaterThan(0);
    });
  },
);

describe("Explain answers", () => {
  const config = `domain: d
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: s
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
`;
  const req = (key: string, hitsAddend: number): RateLimitRequest =>
    create(RateLimitRequestSchema, {
      domain: "d",
      hitsAddend,
      descriptors: [{ entries: [{ key, value: "v" }] }],
    });
  const setup = { stop: false, localCache: false, shadow: false };

  it("reports near limit with the threshold", async () => {
    const { explain } = build(config, setup);
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req("k", 5) }),
    );
    expect(r.descriptors[0]!.verdict).toBe(Verdict.NEAR_LIMIT);
    expect(r.descriptors[0]!.notes.join("\n")).toContain("threshold 4");
    expect(r.descriptors[0]!.counter?.value).toBe(0n);
    expect(r.descriptors[0]!.counter?.valueAfter).toBe(5n);
  });

  it("reports shadow mode and names the deciding descriptor", async () => {
    const { explain, service } = build(config, setup);
    await service.shouldRateLimit(req("s", 1));
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req("s", 1) }),
    );
    expect(r.overallCode).toBe(Code.OK);
    expect(r.descriptors[0]!.verdict).toBe(Verdict.OVER_LIMIT_SHADOW);
    expect(r.decidingDescriptor).toBeUndefined();
  });

  it("reports the window of the counter in RFC 3339 bounds", async () => {
    const { explain } = build(config, setup);
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req("k", 1) }),
    );
    const c = r.descriptors[0]!.counter!;
    expect(c.key).toBe("d_k_v_1699999980");
    expect(c.windowStart?.seconds).toBe(1_699_999_980n);
    expect(c.windowEnd?.seconds).toBe(1_700_000_040n);
  });

  it("refuses a missing request and bad requests like ShouldRateLimit", async () => {
    const { explain } = build(config, setup);
    await expect(
      explain.explain(create(ExplainRequestSchema, {})),
    ).rejects.toThrow(RequestError);
    await expect(
      explain.explain(
        create(ExplainRequestSchema, {
          request: { domain: "d", descriptors: [{ entries: [] }] },
        }),
      ),
    ).rejects.toThrow("descriptors[0].entries must not be empty");
  });
});
