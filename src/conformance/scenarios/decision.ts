// Sections on the answer: several descriptors and their OR, hits_addend, the response fields,
// `/json`, the custom response headers, health, and windows with their resets.
import { secondsToWindowEnd } from "../expect.js";
import {
  Mismatch,
  type Scenario,
  type ScenarioContext,
  type Section,
  type UnitName,
} from "../model.js";
import { delay } from "../processes.js";
import { countdown, d, hit, hits, none, ok, over, per, rule } from "./dsl.js";

const several: Scenario[] = [
  {
    id: "all-ok",
    title: "two descriptors within their limits: OK, a status each, in order",
    spec: "What the service does 5; Decision",
    config: [
      rule("a", undefined, per(2, "day")),
      rule("b", undefined, per(5, "day")),
    ],
    steps: [hits([d("a=1"), d("b=1")], [ok(1, [2, "DAY"]), ok(4, [5, "DAY"])])],
  },
  {
    id: "one-over",
    title: "one descriptor over its limit makes the whole answer OVER_LIMIT",
    spec: "What the service does 5",
    config: [
      rule("a", undefined, per(1, "day")),
      rule("b", undefined, per(5, "day")),
    ],
    steps: [
      hits([d("a=1"), d("b=1")], [ok(0, [1, "DAY"]), ok(4, [5, "DAY"])]),
      hits([d("a=1"), d("b=1")], [over([1, "DAY"]), ok(3, [5, "DAY"])]),
    ],
  },
  {
    id: "order",
    title: "statuses follow the order of the request's descriptors",
    spec: "Decision (statuses)",
    config: [
      rule("a", undefined, per(1, "day")),
      rule("b", undefined, per(2, "hour")),
      rule("c", undefined, per(3, "minute")),
    ],
    steps: [
      hits(
        [d("c=1"), d("a=1"), d("b=1")],
        [ok(2, [3, "MINUTE"]), ok(0, [1, "DAY"]), ok(1, [2, "HOUR"])],
      ),
    ],
  },
  {
    id: "with-unmatched",
    title: "a descriptor that matches nothing answers OK beside a limited one",
    spec: "What the service does 5",
    config: [rule("a", undefined, per(1, "day"))],
    steps: [
      hits([d("zz=1"), d("a=1")], [none, ok(0, [1, "DAY"])]),
      hits([d("zz=1"), d("a=1")], [none, over([1, "DAY"])]),
    ],
  },
  {
    id: "each-counted",
    title: "each descriptor is evaluated, also beside one over its limit",
    spec: "What the service does 5",
    config: [
      rule("a", undefined, per(0, "day")),
      rule("b", undefined, per(3, "day")),
    ],
    steps: [
      hits([d("a=1"), d("b=1")], [over([0, "DAY"]), ok(2, [3, "DAY"])]),
      hits([d("a=1"), d("b=1")], [over([0, "DAY"]), ok(1, [3, "DAY"])]),
    ],
  },
  {
    id: "both-over",
    title:
      "two descriptors over their limits: OVER_LIMIT with two over statuses",
    spec: "What the service does 5",
    config: [
      rule("a", undefined, per(0, "day")),
      rule("b", undefined, per(0, "hour")),
    ],
    steps: [hits([d("a=1"), d("b=1")], [over([0, "DAY"]), over([0, "HOUR"])])],
  },
  {
    id: "five",
    title: "five descriptors, the last over: OVER_LIMIT",
    spec: "What the service does 5",
    config: [
      rule("k", undefined, per(10, "day")),
      rule("z", undefined, per(0, "day")),
    ],
    steps: [
      hits(
        [d("k=1"), d("k=2"), d("k=3"), d("k=4"), d("z=1")],
        [ok(9), ok(9), ok(9), ok(9), over([0, "DAY"])],
      ),
    ],
  },
  {
    id: "depths",
    title: "descriptors of different depths in one request",
    spec: "What the service does 5; Matching rules 1",
    config: [
      rule("a", undefined, per(2, "day")),
      {
        key: "a",
        value: "x",
        descriptors: [rule("b", undefined, per(1, "day"))],
      },
    ],
    steps: [
      hits([d("a=y"), d("a=x", "b=1")], [ok(1, [2, "DAY"]), ok(0, [1, "DAY"])]),
      hits([d("a=y"), d("a=x", "b=1")], [ok(0, [2, "DAY"]), over([1, "DAY"])]),
    ],
  },
];

const hitsAddend: Scenario[] = [
  {
    id: "request-level",
    title: "a request hits_addend of 3 takes 3",
    spec: "Decision (limitRemaining); rls.proto hits_addend",
    config: [rule("k", undefined, per(10, "day"))],
    steps: [
      hit(d("k=v"), ok(7, [10, "DAY"]), { hitsAddend: 3 }),
      hit(d("k=v"), ok(4, [10, "DAY"]), { hitsAddend: 3 }),
    ],
  },
  {
    id: "exactly",
    title: "hits_addend equal to the limit is still OK",
    spec: "States (over when hits exceed requests_per_unit)",
    config: [rule("k", undefined, per(5, "day"))],
    steps: [
      hit(d("k=v"), ok(0, [5, "DAY"]), { hitsAddend: 5 }),
      hit(d("k=v"), over([5, "DAY"])),
    ],
  },
  {
    id: "beyond",
    title: "hits_addend above the limit is OVER_LIMIT at once",
    spec: "States (over when hits exceed requests_per_unit)",
    config: [rule("k", undefined, per(5, "day"))],
    steps: [hit(d("k=v"), over([5, "DAY"]), { hitsAddend: 6 })],
  },
  {
    id: "zero-is-one",
    title: "a request hits_addend of 0 counts as 1",
    spec: "rls.proto hits_addend",
    config: [rule("k", undefined, per(3, "day"))],
    steps: [hit(d("k=v"), ok(2, [3, "DAY"]), { hitsAddend: 0 })],
  },
  {
    id: "every-descriptor",
    title: "the request hits_addend applies to every descriptor",
    spec: "rls.proto hits_addend; What the service does 5",
    config: [
      rule("a", undefined, per(10, "day")),
      rule("b", undefined, per(4, "day")),
    ],
    steps: [hits([d("a=1"), d("b=1")], [ok(6), ok(0)], { hitsAddend: 4 })],
  },
  {
    id: "descriptor-level",
    title: "a descriptor's hits_addend takes that many",
    spec: "rls.proto RateLimitDescriptor.hits_addend",
    config: [rule("k", undefined, per(10, "day"))],
    steps: [hits([{ ...d("k=v"), hitsAddend: 4 }], [ok(6, [10, "DAY"])])],
  },
  {
    id: "descriptor-zero",
    title: "a descriptor's hits_addend of 0 checks without taking",
    spec: "rls.proto RateLimitDescriptor.hits_addend",
    config: [rule("k", undefined, per(2, "day"))],
    steps: [
      hit(d("k=v"), ok(1, [2, "DAY"])),
      hits([{ ...d("k=v"), hitsAddend: 0 }], [ok(1, [2, "DAY"])]),
      hits([{ ...d("k=v"), hitsAddend: 0 }], [ok(1, [2, "DAY"])]),
      hit(d("k=v"), ok(0, [2, "DAY"])),
    ],
  },
  {
    id: "descriptor-wins",
    title: "a descriptor's hits_addend wins over the request's",
    spec: "rls.proto RateLimitDescriptor.hits_addend",
    config: [rule("a", undefined, per(10, "day"))],
    steps: [
      hits([{ ...d("a=1"), hitsAddend: 1 }, d("a=2")], [ok(9), ok(5)], {
        hitsAddend: 5,
      }),
    ],
  },
];

const units: readonly [UnitName, "second" | "minute" | "hour" | "day"][] = [
  ["SECOND", "second"],
  ["MINUTE", "minute"],
  ["HOUR", "hour"],
  ["DAY", "day"],
];

const fields: Scenario[] = [
  ...units.map(([unit, word]): Scenario => ({
    id: `limit-${word}`,
    title: `currentLimit reports requests_per_unit and unit ${unit}`,
    spec: "Decision (currentLimit)",
    config: [rule("k", undefined, per(100, word))],
    steps: [hit(d("k=v"), ok(99, [100, unit]))],
  })),
  ...units.map(([unit, word]): Scenario => ({
    id: `reset-${word}`,
    title: `durationUntilReset runs to the end of the ${word} window`,
    spec: "Decision; windows aligned to the epoch (docs/reference-parity.md#windows)",
    config: [rule("k", undefined, per(100, word))],
    steps: [hit(d("k=v"), { ...ok(99, [100, unit]), reset: unit })],
  })),
  {
    id: "countdown",
    title: "limitRemaining counts down to 0, then OVER_LIMIT",
    spec: "Decision (limitRemaining); States",
    config: [rule("k", undefined, per(4, "day"))],
    steps: countdown(d("k=v"), [4, "DAY"], 2),
  },
  {
    id: "over-fields",
    title: "an OVER_LIMIT status carries its currentLimit and a reset",
    spec: "Decision",
    config: [rule("k", undefined, per(0, "hour"))],
    steps: [hit(d("k=v"), { ...over([0, "HOUR"]), reset: "HOUR" })],
  },
  {
    id: "zero-blocks",
    title: "requests_per_unit 0 blocks every request",
    spec: "rate_limit block; Limits",
    config: [rule("k", undefined, per(0, "day"))],
    steps: [hit(d("k=v"), over([0, "DAY"])), hit(d("k=w"), over([0, "DAY"]))],
  },
  {
    id: "large-limit",
    title: "the largest 32-bit requests_per_unit",
    spec: "rate_limit block (unsigned integer)",
    config: [rule("k", undefined, per(4_294_967_295, "day"))],
    steps: [hit(d("k=v"), ok(4_294_967_294, [4_294_967_295, "DAY"]))],
  },
  {
    id: "one-status-each",
    title: "one status per descriptor, also for those without a limit",
    spec: "Decision (statuses)",
    config: [rule("k", undefined, per(1, "day"))],
    steps: [hits([d("x=1"), d("y=1"), d("k=1")], [none, none, ok(0)])],
  },
  {
    id: "unit-case",
    title: "units are accepted in any letter case in the config",
    spec: "rate_limit block (unit enum)",
    config: [rule("k", undefined, { unit: "HOUR", requests_per_unit: 2 })],
    steps: [hit(d("k=v"), ok(1, [2, "HOUR"]))],
  },
  {
    id: "no-headers",
    title: "without LIMIT_RESPONSE_HEADERS_ENABLED no headers are added",
    spec: "Custom response headers (default off)",
    config: [rule("k", undefined, per(1, "day"))],
    steps: [
      { descriptors: [d("k=v")], expect: { overall: "OK", noHeaders: true } },
      {
        descriptors: [d("k=v")],
        expect: { overall: "OVER_LIMIT", noHeaders: true },
      },
    ],
  },
];

const json: Scenario[] = [
  {
    id: "200",
    title: "/json answers 200 when no limit is exceeded",
    spec: "Endpoints (HTTP /json)",
    config: [rule("k", undefined, per(2, "day"))],
    steps: [
      {
        descriptors: [d("k=v")],
        via: "json",
        expect: {
          overall: "OK",
          httpStatus: 200,
          statuses: [ok(1, [2, "DAY"])],
        },
      },
    ],
  },
  {
    id: "429",
    title: "/json answers 429 when a limit is exceeded",
    spec: "Endpoints (HTTP /json); Errors 1",
    config: [rule("k", undefined, per(0, "day"))],
    steps: [
      {
        descriptors: [d("k=v")],
        via: "json",
        expect: {
          overall: "OVER_LIMIT",
          httpStatus: 429,
          statuses: [over([0, "DAY"])],
        },
      },
    ],
  },
  {
    id: "429-one-of-two",
    title: "/json answers 429 when one of two descriptors is over",
    spec: "Endpoints (HTTP /json); What the service does 5",
    config: [
      rule("a", undefined, per(0, "day")),
      rule("b", undefined, per(5, "day")),
    ],
    steps: [
      {
        descriptors: [d("b=1"), d("a=1")],
        via: "json",
        expect: {
          overall: "OVER_LIMIT",
          httpStatus: 429,
          statuses: [ok(4), over()],
        },
      },
    ],
  },
  {
    id: "no-match",
    title: "/json answers 200 for a descriptor that matches nothing",
    spec: "Endpoints (HTTP /json)",
    config: [rule("k", undefined, per(0, "day"))],
    steps: [
      {
        descriptors: [d("other=v")],
        via: "json",
        expect: { overall: "OK", httpStatus: 200 },
      },
    ],
  },
  {
    id: "shared-counter",
    title: "/json and gRPC count against the same counter",
    spec: "What the service does 2",
    config: [rule("k", undefined, per(3, "day"))],
    steps: [
      hit(d("k=v"), ok(2, [3, "DAY"])),
      {
        descriptors: [d("k=v")],
        via: "json",
        expect: { httpStatus: 200, statuses: [ok(1)] },
      },
      hit(d("k=v"), ok(0, [3, "DAY"])),
      {
        descriptors: [d("k=v")],
        via: "json",
        expect: { httpStatus: 429, statuses: [over()] },
      },
    ],
  },
  {
    id: "hits-addend",
    title: "/json takes hitsAddend",
    spec: "Endpoints (HTTP /json)",
    config: [rule("k", undefined, per(5, "day"))],
    steps: [
      {
        descriptors: [d("k=v")],
        hitsAddend: 3,
        via: "json",
        expect: { httpStatus: 200, statuses: [ok(2, [5, "DAY"])] },
      },
    ],
  },
  {
    id: "names",
    title:
      "/json answers in lower camel case with the unit as an upper-case name",
    spec: "Endpoints (HTTP /json: proto3 JSON names)",
    config: [rule("k", undefined, per(7, "minute"))],
    async run(ctx) {
      const body = JSON.stringify({
        domain: ctx.domain,
        descriptors: [{ entries: [{ key: "k", value: "v" }] }],
      });
      const reply = await ctx.http("POST", "/json", body);
      if (reply === undefined) return;
      const text = reply.body;
      const expected = [
        '"overallCode":"OK"',
        '"statuses":',
        '"currentLimit":',
        '"requestsPerUnit":7',
        '"unit":"MINUTE"',
        '"limitRemaining":6',
      ];
      const compact = text.replace(/\s+/g, "");
      const missing = expected.filter((e) => !compact.includes(e));
      if (reply.status !== 200 || missing.length > 0)
        throw new Mismatch(
          { via: "json", body },
          { status: 200, contains: expected },
          { status: reply.status, body: text },
          `the body lacks ${missing.join(", ") || "nothing"} (status ${reply.status})`,
        );
    },
  },
  {
    id: "json-content",
    title: "/json answers with a JSON content type",
    spec: "Endpoints (HTTP /json)",
    config: [rule("k", undefined, per(7, "minute"))],
    async run(ctx) {
      const body = JSON.stringify({
        domain: ctx.domain,
        descriptors: [{ entries: [{ key: "k", value: "v" }] }],
      });
      const reply = await ctx.http("POST", "/json", body);
      if (reply === undefined) return;
      if (!reply.contentType.includes("json"))
        throw new Mismatch(
          { via: "json", body },
          { contentType: "application/json" },
          { contentType: reply.contentType },
          `content type is ${reply.contentType}`,
        );
    },
  },
];

const headers: Scenario[] = [
  {
    id: "within",
    title: "the three headers carry limit, remaining and seconds to reset",
    spec: "Custom response headers",
    config: [rule("k", undefined, per(5, "minute"))],
    steps: [
      {
        descriptors: [d("k=v")],
        expect: {
          overall: "OK",
          headers: {
            "RateLimit-Limit": "5",
            "RateLimit-Remaining": "4",
            "RateLimit-Reset": "reset:MINUTE",
          },
        },
      },
    ],
  },
  {
    id: "over",
    title: "over the limit the remaining header is 0",
    spec: "Custom response headers",
    config: [rule("k", undefined, per(0, "hour"))],
    steps: [
      {
        descriptors: [d("k=v")],
        expect: {
          overall: "OVER_LIMIT",
          headers: {
            "RateLimit-Limit": "0",
            "RateLimit-Remaining": "0",
            "RateLimit-Reset": "reset:HOUR",
          },
        },
      },
    ],
  },
  {
    id: "countdown",
    title: "the remaining header counts down",
    spec: "Custom response headers",
    config: [rule("k", undefined, per(3, "day"))],
    steps: [2, 1, 0].map((n) => ({
      descriptors: [d("k=v")],
      expect: {
        headers: { "RateLimit-Limit": "3", "RateLimit-Remaining": String(n) },
      },
    })),
  },
  {
    id: "json",
    title: "/json answers carry the headers too",
    spec: "Custom response headers; Endpoints (HTTP /json)",
    config: [rule("k", undefined, per(9, "day"))],
    steps: [
      {
        descriptors: [d("k=v")],
        via: "json",
        expect: {
          httpStatus: 200,
          headers: { "RateLimit-Limit": "9", "RateLimit-Remaining": "8" },
        },
      },
    ],
  },
  {
    id: "tightest",
    title: "with two descriptors the headers name the one with less remaining",
    spec: "Custom response headers",
    config: [
      rule("a", undefined, per(10, "day")),
      rule("b", undefined, per(2, "day")),
    ],
    steps: [
      {
        descriptors: [d("a=1"), d("b=1")],
        expect: {
          headers: { "RateLimit-Limit": "2", "RateLimit-Remaining": "1" },
        },
      },
    ],
  },
];

const health: Scenario[] = [
  {
    id: "healthcheck",
    title: "/healthcheck answers 200 while the service is healthy",
    spec: "Endpoints (HTTP /healthcheck); States (Health)",
    async run(ctx) {
      const reply = await ctx.http("GET", "/healthcheck");
      if (reply !== undefined && reply.status !== 200)
        throw new Mismatch(
          { get: "/healthcheck" },
          { status: 200 },
          reply,
          `status ${reply.status}`,
        );
    },
  },
  {
    id: "still-healthy",
    title: "/healthcheck stays 200 after decisions",
    spec: "States (Health)",
    config: [rule("k", undefined, per(0, "day"))],
    async run(ctx) {
      await ctx.step(hit(d("k=v"), over()));
      const reply = await ctx.http("GET", "/healthcheck");
      if (reply !== undefined && reply.status !== 200)
        throw new Mismatch(
          { get: "/healthcheck" },
          { status: 200 },
          reply,
          `status ${reply.status}`,
        );
    },
  },
];

const healthConfig: Scenario[] = [
  {
    id: "needs-config",
    title:
      "with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy without config, healthy after one loads",
    spec: "States (Health: configuration status)",
    async run(ctx) {
      const before = await ctx.http("GET", "/healthcheck");
      if (before?.status === 200)
        throw new Mismatch(
          { get: "/healthcheck" },
          { status: "not 200" },
          before,
          "healthy with no config loaded",
        );
      await ctx.files.write(
        ctx.domain,
        `domain: ${ctx.domain}\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n`,
      );
      if (!(await ctx.files.settle()))
        throw new Mismatch(
          { write: ctx.domain },
          "the file loads",
          "no reload",
          "the config did not load",
        );
      const after = await ctx.http("GET", "/healthcheck");
      if (after !== undefined && after.status !== 200)
        throw new Mismatch(
          { get: "/healthcheck" },
          { status: 200 },
          after,
          `status ${after.status} with a config loaded`,
        );
    },
  },
];

/** Waits until the next second starts (plus a little), so that calls share one second. */
async function startOfSecond(): Promise<void> {
  await delay(1000 - (Date.now() % 1000) + 30);
}

/**
 * Runs `round` at the start of a second; when its calls did not all fit in that second (a
 * slow machine), runs it again in a later second, so that a window boundary never decides
 * the outcome. A mismatch inside one second is a failure.
 *
 * @throws Mismatch from the round, or when no attempt fitted in one second
 */
async function inOneSecond(
  ctx: ScenarioContext,
  round: (value: string) => Promise<void>,
): Promise<void> {
  for (let attempt = 0; attempt < 4; attempt++) {
    await startOfSecond();
    const start = Math.floor(Date.now() / 1000);
    let failure: Error | undefined;
    try {
      await round(ctx.unique("r"));
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error));
    }
    if (Math.floor(Date.now() / 1000) === start) {
      if (failure !== undefined) throw failure;
      return;
    }
  }
  throw new Mismatch(
    "calls within one second",
    "the calls of a round answered within one second",
    "every attempt straddled a second boundary",
    "the machine is too slow for per-second scenarios",
  );
}

const windows: Scenario[] = [
  {
    id: "second-resets",
    title: "a per-second limit allows again in the next second",
    spec: "States (hits in the rule's current period); Limits (units)",
    config: [rule("k", undefined, per(1, "second"))],
    async run(ctx) {
      let value = "";
      await inOneSecond(ctx, async (v) => {
        value = v;
        await ctx.step(hit(d(`k=${v}`), ok(0, [1, "SECOND"])));
        await ctx.step(hit(d(`k=${v}`), over([1, "SECOND"])));
      });
      await startOfSecond();
      await ctx.step(hit(d(`k=${value}`), ok(0, [1, "SECOND"])));
    },
  },
  {
    id: "second-count",
    title: "a per-second counter starts from zero each second",
    spec: "States (hits in the rule's current period)",
    config: [rule("k", undefined, per(2, "second"))],
    async run(ctx) {
      const value = ctx.unique("c");
      for (let round = 0; round < 2; round++)
        await inOneSecond(ctx, async () => {
          await ctx.step(hit(d(`k=${value}`), ok(1, [2, "SECOND"])));
          await ctx.step(hit(d(`k=${value}`), ok(0, [2, "SECOND"])));
          await ctx.step(hit(d(`k=${value}`), over([2, "SECOND"])));
        });
    },
  },
  {
    id: "second-reset-field",
    title: "a per-second limit resets within a second",
    spec: "Decision",
    config: [rule("k", undefined, per(5, "second"))],
    steps: [hit(d("k=v"), { ...ok(4), reset: { min: 1, max: 1 } })],
  },
  {
    id: "minute-stable",
    title: "two calls in one minute report the same window end",
    spec: "Decision",
    config: [rule("k", undefined, per(5, "minute"))],
    steps: [
      hit(d("k=v"), { ...ok(4), reset: "MINUTE" }),
      hit(d("k=v"), { ...ok(3), reset: "MINUTE" }),
    ],
  },
  {
    id: "over-reset",
    title: "an over-limit status says when the window ends",
    spec: "Decision",
    config: [rule("k", undefined, per(1, "minute"))],
    steps: [
      hit(d("k=v"), ok(0)),
      hit(d("k=v"), { ...over([1, "MINUTE"]), reset: "MINUTE" }),
    ],
  },
  {
    id: "day-midnight",
    title: "a per-day window ends at midnight UTC",
    spec: "Decision; windows aligned to the epoch (docs/reference-parity.md#windows)",
    config: [rule("k", undefined, per(5, "day"))],
    async run(ctx) {
      const sent = Date.now();
      const answer = await ctx.step(hit(d("k=v"), ok(4)));
      const actual = answer?.statuses[0]?.durationUntilReset ?? null;
      const expected = secondsToWindowEnd("DAY", sent);
      if (actual === null || Math.abs(actual - expected) > 2)
        throw new Mismatch(
          { descriptors: [["k", "v"]] },
          { durationUntilReset: expected },
          { durationUntilReset: actual },
          "the day does not end at 00:00 UTC",
        );
    },
  },
];

/** The answer sections. */
export const decisionSections: readonly Section[] = [
  { name: "several descriptors", scenarios: several },
  { name: "hits_addend", scenarios: hitsAddend },
  { name: "response fields", scenarios: fields },
  { name: "json endpoint", scenarios: json },
  {
    name: "response headers",
    settings: { responseHeaders: true },
    scenarios: headers,
  },
  { name: "health", scenarios: health },
  {
    name: "health with config required",
    settings: { healthNeedsConfig: true },
    ownServer: true,
    scenarios: healthConfig,
  },
  { name: "windows and resets", scenarios: windows },
];
