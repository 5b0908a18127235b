// The Explain golden test (issue 32): seeded sequences of ShouldRateLimit and Explain calls,
// against a config with one rule per algorithm kind and variant, replayed against the
// answers recorded from the code before the restructuring. Every Explain answer (its proto3
// JSON and the `ratelimit-client -explain` tree), every ShouldRateLimit response and, every
// 100 steps, the decision's statistics must stay byte-identical; the first difference is
// printed with its seed, step and request.
//
// The service is driven only through its public surfaces (explain-driver.ts: createApp with
// default settings, gRPC and the debug port's Explain), on the memory backend with a hand-moved
// clock, so this file needs no change when the limiter or Explain is rewritten behind them.
//
// The config is test/fixtures/explain-golden/config/*.yaml; the fixtures are
// test/fixtures/explain-golden/seed-<n>.jsonl, one JSON object per line (JSON Lines, so a diff
// shows the step): a call (`step`, `at`, `call`, `request`, then `response` and for Explain its
// `text`, or `error`), or the statistics (`afterStep`, `statistics`). Regenerate them only when
// a change of behaviour is intended, and say so in the commit:
//
//   UPDATE_GOLDEN=1 npx vitest run test/component/explain-golden.test.ts

import { create, type JsonObject } from "@bufbuild/protobuf";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  OverrideRateLimitUnit as Unit,
  type RateLimitRequest,
} from "../../src/proto.js";
import {
  chargeJson,
  explainJson,
  requestJson,
  startExplainDriver,
  type ExplainDriver,
} from "../helpers/explain-driver.js";
import { mulberry32 } from "../helpers/seeded-random.js";

const fixtures = join(
  dirname(fileURLToPath(import.meta.url)),
  "../fixtures/explain-golden",
);
const update = process.env["UPDATE_GOLDEN"] === "1";

/** Config file name → YAML text. */
const configFiles = Object.fromEntries(
  ["golden.yaml", "golden-aon.yaml"].map((name) => [
    name,
    readFileSync(join(fixtures, "config", name), "utf8"),
  ]),
);

/** Steps per seed. */
const stepCount = 300;
/** Steps between two records of the statistics. */
const statisticsEvery = 100;

/**
 * One sequence per seed, each starting at its own instant just before a boundary worth
 * crossing: the Berlin and New York daylight-saving changes, a month's and a year's end.
 */
const sequences: readonly { seed: number; startMs: number }[] = [
  { seed: 1, startMs: Date.UTC(2026, 2, 28, 22, 58, 30) }, // Berlin springs forward at 01:00Z
  { seed: 2, startMs: Date.UTC(2026, 10, 1, 4, 30, 0) }, // New York falls back at 06:00Z
  { seed: 3, startMs: Date.UTC(2026, 11, 31, 22, 55, 0) }, // New Year in Berlin at 23:00Z
  { seed: 4, startMs: Date.UTC(2027, 1, 27, 23, 59, 58) }, // February's end
];

type Random = () => number;

function pick<T>(random: Random, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)]!;
}

/** A random step of the clock, in ms: often none, sometimes across many windows. */
function advanceMs(random: Random): number {
  const r = random();
  if (r < 0.35) return 0;
  if (r < 0.7) return Math.floor(random() * 1000);
  if (r < 0.85) return 1000 + Math.floor(random() * 4000);
  if (r < 0.94) return 5000 + Math.floor(random() * 115_000);
  if (r < 0.98) return 120_000 + Math.floor(random() * 3 * 3_600_000);
  return 3 * 3_600_000 + Math.floor(random() * 2 * 86_400_000);
}

type Entries = readonly (readonly [string, string])[];

/** Descriptor shapes of the `golden` domain: each rule, and requests that match none. */
const goldenShapes: readonly ((random: Random, v: string) => Entries)[] = [
  (_, v) => [["fixed_s", v]],
  (random) => [["fixed_m", pick(random, ["shared", "other"])]],
  (_, v) => [["fixed_mult", v]],
  (_, v) => [["sliding", v]],
  (_, v) => [["sliding_mult", v]],
  (_, v) => [["cal_day", v]],
  (_, v) => [["cal_month", v]],
  (_, v) => [["bucket", v]],
  (_, v) => [["bucket_min", v]],
  (_, v) => [["multi", v]],
  (_, v) => [["shadow", v]],
  (_, v) => [["quota", v]],
  (_, v) => [["unlimited", v]],
  () => [["plan", "free"]],
  () => [["plan_tier", "premium"]],
  (_, v) => [["override", v]],
  (random, v) => [
    ["tenant", v],
    [
      "path",
      pick(random, [
        "/files/a",
        "/files/b",
        "/users/u1/items",
        "/users/u2/items",
        "/health",
        "/other",
      ]),
    ],
  ],
  (_, v) => [["tenant", v]],
  (_, v) => [
    ["tenant", v],
    ["path", "/files/a"],
    ["deeper", "x"],
  ],
  (random) => [["wild", pick(random, ["img-1", "img-2", "img", "doc-1"])]],
  (random) => [["internal", pick(random, ["batch", "other"])]],
  (_, v) => [["nope", v]],
];

/**
 * One `golden` descriptor: mostly one of the sequence's `hot` shapes (indexes into
 * {@link goldenShapes}), so that its counters reach their limits, else any shape.
 */
function goldenEntries(random: Random, hot: readonly number[]): Entries {
  const v = pick(random, ["a", "a", "b"]);
  const index =
    random() < 0.7
      ? pick(random, hot)
      : Math.floor(random() * goldenShapes.length);
  return goldenShapes[index]!(random, v);
}

/**
 * The hot shapes of the `part`-th of `parts` sequences: every `parts`-th shape, so that each
 * shape is hot in one sequence.
 */
function hotShapes(part: number, parts: number): number[] {
  return goldenShapes.map((_, i) => i).filter((i) => i % parts === part);
}

/** Descriptor shapes of the `golden_aon` (all-or-nothing) domain. */
function aonEntries(random: Random): Entries {
  const v = pick(random, ["a", "a", "b"]);
  const key = pick(random, [
    "fixed",
    "sliding",
    "bucket",
    "cal",
    "multi",
    "shadow",
    "nope",
  ]);
  return [[key, v]];
}

/**
 * A random request: 1 to 3 descriptors, random hits, refunds and request-supplied limits; now
 * and then an unknown domain, or an empty one (refused as INVALID_ARGUMENT).
 */
function randomRequest(
  random: Random,
  hot: readonly number[],
): RateLimitRequest {
  const r = random();
  const domain =
    r < 0.72 ? "golden" : r < 0.95 ? "golden_aon" : r < 0.98 ? "unknown" : "";
  // `replaces` needs both rules in one request.
  const pair = domain === "golden" && random() < 0.06;
  const n = pair ? 2 : pick(random, [1, 1, 1, 2, 2, 3]);
  const descriptors = [];
  for (let i = 0; i < n; i++) {
    const entries: Entries = pair
      ? [i === 0 ? ["plan", "free"] : ["plan_tier", "premium"]]
      : domain === "golden_aon"
        ? aonEntries(random)
        : goldenEntries(random, hot);
    const descriptor: {
      entries: { key: string; value: string }[];
      hitsAddend?: bigint;
      isNegativeHits?: boolean;
      limit?: { requestsPerUnit: number; unit: Unit };
    } = { entries: entries.map(([key, value]) => ({ key, value })) };
    const h = random();
    if (h < 0.08) {
      descriptor.isNegativeHits = true;
      descriptor.hitsAddend = BigInt(pick(random, [1, 1, 2]));
    } else if (h < 0.22) {
      descriptor.hitsAddend = BigInt(pick(random, [0, 1, 2, 3, 5]));
    }
    if (entries[0]?.[0] === "override" && random() < 0.6) {
      descriptor.limit = {
        requestsPerUnit: pick(random, [2, 4]),
        unit: pick(random, [Unit.SECOND, Unit.MINUTE]),
      };
    }
    descriptors.push(descriptor);
  }
  return create(RateLimitRequestSchema, {
    domain,
    descriptors,
    hitsAddend: pick(random, [0, 0, 1, 1, 1, 2, 3]),
  });
}

/** One recorded step: the call, its request and its answer (proto3 JSON, tree text). */
type Step = JsonObject;

async function runStep(
  driver: ExplainDriver,
  random: Random,
  step: number,
  recent: RateLimitRequest[],
  hot: readonly number[],
): Promise<Step> {
  driver.clock.advance(advanceMs(random));
  // Clients repeat themselves: reusing one of the last requests drives counters to their
  // limits and over them, and lets Explain look at a counter ShouldRateLimit just moved.
  const request =
    recent.length > 0 && random() < 0.45
      ? pick(random, recent)
      : randomRequest(random, hot);
  recent.unshift(request);
  if (recent.length > 3) recent.pop();
  const r = random();
  const head = {
    step,
    at: new Date(driver.clock.nowMs()).toISOString(),
  };
  if (r < 0.55) {
    const result = await driver.shouldRateLimit(request);
    return {
      ...head,
      call: "ShouldRateLimit",
      request: requestJson(request),
      ...chargeJson(result),
    };
  }
  const charge = r > 0.93;
  const result = await driver.explain(request, charge);
  return {
    ...head,
    call: charge ? "Explain charge" : "Explain",
    request: requestJson(request),
    ...explainJson(result),
  };
}

/** Runs one seeded sequence on a fresh service; one JSON text per step or statistics record. */
async function record(
  seed: number,
  startMs: number,
  hot: readonly number[],
): Promise<string[]> {
  const driver = await startExplainDriver(configFiles, startMs);
  try {
    const random = mulberry32(seed);
    const lines: string[] = [];
    const recent: RateLimitRequest[] = [];
    for (let step = 0; step < stepCount; step++) {
      lines.push(
        JSON.stringify(await runStep(driver, random, step, recent, hot)),
      );
      // The statistics too, now and then: Explain moves none, ShouldRateLimit its own.
      if ((step + 1) % statisticsEvery === 0)
        lines.push(
          JSON.stringify({
            afterStep: step,
            statistics: await driver.statistics(),
          }),
        );
    }
    return lines;
  } finally {
    await driver.stop();
  }
}

function fixturePath(seed: number): string {
  return join(fixtures, `seed-${seed}.jsonl`);
}

/** The first differing line of two texts, with a few characters of context, for a failure. */
function firstDifference(expected: string, actual: string): string {
  const e = expected.split("\n");
  const a = actual.split("\n");
  for (let i = 0; i < Math.max(e.length, a.length); i++) {
    if (e[i] !== a[i])
      return `line ${i + 1}:\n  expected: ${e[i] ?? "(none)"}\n  actual:   ${a[i] ?? "(none)"}`;
  }
  return "(no difference)";
}

/** The first differing field of two recorded steps, by JSON path. */
function firstFieldDifference(
  expected: unknown,
  actual: unknown,
  path = "",
): string | undefined {
  if (JSON.stringify(expected) === JSON.stringify(actual)) return undefined;
  if (
    typeof expected === "object" &&
    expected !== null &&
    typeof actual === "object" &&
    actual !== null
  ) {
    const e = expected as Record<string, unknown>;
    const a = actual as Record<string, unknown>;
    for (const key of new Set([...Object.keys(e), ...Object.keys(a)])) {
      const found = firstFieldDifference(e[key], a[key], `${path}.${key}`);
      if (found !== undefined) return found;
    }
  }
  if (typeof expected === "string" && typeof actual === "string")
    return `${path}: ${firstDifference(expected, actual)}`;
  return `${path}:\n  expected: ${shown(expected)}\n  actual:   ${shown(actual)}`;
}

function shown(value: unknown): string {
  return value === undefined ? "(absent)" : JSON.stringify(value);
}

/** A field of a recorded step (the expected one's, else the actual one's), for a failure. */
function field(e: JsonObject, a: JsonObject, key: string): string {
  const value = e[key] ?? a[key];
  return typeof value === "string" ? value : shown(value);
}

/** Describes the first step whose record differs, or undefined when all agree. */
function describeMismatch(
  seed: number,
  expected: readonly string[],
  actual: readonly string[],
): string | undefined {
  for (let i = 0; i < Math.max(expected.length, actual.length); i++) {
    if (expected[i] === actual[i]) continue;
    const e =
      expected[i] === undefined ? {} : (JSON.parse(expected[i]!) as JsonObject);
    const a =
      actual[i] === undefined ? {} : (JSON.parse(actual[i]!) as JsonObject);
    const where = firstFieldDifference(e, a) ?? "(the JSON texts differ)";
    const head =
      (e["statistics"] ?? a["statistics"]) !== undefined
        ? [
            `seed ${seed}, the statistics after step ${field(e, a, "afterStep")}:`,
          ]
        : [
            `seed ${seed}, step ${field(e, a, "step")} (${field(e, a, "call")} at ${field(e, a, "at")}):`,
            `request: ${shown(e["request"] ?? a["request"])}`,
          ];
    return [
      ...head,
      `line ${i + 1} of ${fixturePath(seed)}, first difference at ${where}`,
      `(the recorded answers of earlier steps agree; regenerate only for an intended change: see the file's header)`,
    ].join("\n");
  }
  return undefined;
}

describe("Explain and ShouldRateLimit over seeded sequences (golden answers)", () => {
  sequences.forEach(({ seed, startMs }, part) => {
    it(`answers seed ${seed} exactly as recorded`, async () => {
      const actual = await record(
        seed,
        startMs,
        hotShapes(part, sequences.length),
      );
      const path = fixturePath(seed);
      if (update) writeFileSync(path, actual.join("\n") + "\n");
      const expected = readFileSync(path, "utf8")
        .replace(/\n$/, "")
        .split("\n");
      const mismatch = describeMismatch(seed, expected, actual);
      if (mismatch !== undefined) expect.fail(mismatch);
      expect(actual.length).toBe(
        stepCount + Math.floor(stepCount / statisticsEvery),
      );
    }, 60_000);
  });
});
