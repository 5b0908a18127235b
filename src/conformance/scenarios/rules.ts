// Sections on the spec's per-rule fields: `unlimited`, `shadow_mode`, global `SHADOW_MODE`,
// `replaces`, `share_threshold`, and the metric flags (matching rules 6 to 12).
import type { Scenario, Section } from "../model.js";
import {
  countdown,
  d,
  expectAll,
  hit,
  hits,
  nest,
  none,
  ok,
  over,
  per,
  rule,
} from "./dsl.js";

const maxU32 = 4_294_967_295;
const unlimitedStatus = ok(maxU32);

const unlimited: Scenario[] = [
  {
    id: "remaining",
    title: "unlimited answers OK with limitRemaining the largest 32-bit number",
    spec: "Matching rules 6; Limits",
    config: [rule("k", "v", { unlimited: true })],
    steps: [hit(d("k=v"), unlimitedStatus)],
  },
  {
    id: "never-over",
    title: "unlimited never goes over",
    spec: "Matching rules 6",
    config: [rule("k", "v", { unlimited: true })],
    steps: Array.from({ length: 6 }, () => hit(d("k=v"), unlimitedStatus)),
  },
  {
    id: "key-only",
    title: "an unlimited key-only rule covers every value",
    spec: "Matching rules 6",
    config: [rule("k", undefined, { unlimited: true })],
    steps: [hit(d("k=a"), unlimitedStatus), hit(d("k=b"), unlimitedStatus)],
  },
  {
    id: "nested",
    title: "unlimited at depth 2",
    spec: "Matching rules 6",
    config: [nest("a", "x", [rule("b", undefined, { unlimited: true })])],
    steps: [
      hit(d("a=x", "b=y"), unlimitedStatus),
      hit(d("a=x", "b=y"), unlimitedStatus),
    ],
  },
  {
    id: "beside-limited",
    title:
      "an unlimited descriptor beside a limited one leaves the other counting",
    spec: "Matching rules 6; What the service does 5",
    config: [
      rule("u", undefined, { unlimited: true }),
      rule("l", undefined, per(1, "day")),
    ],
    steps: [
      hits([d("u=1"), d("l=1")], [unlimitedStatus, ok(0, [1, "DAY"])]),
      hits([d("u=1"), d("l=1")], [unlimitedStatus, over([1, "DAY"])]),
    ],
  },
  {
    id: "with-hits",
    title: "unlimited with a large hits_addend stays OK",
    spec: "Matching rules 6",
    config: [rule("k", undefined, { unlimited: true })],
    steps: [hit(d("k=v"), unlimitedStatus, { hitsAddend: 1_000_000 })],
  },
];

const shadow: Scenario[] = [
  {
    id: "ok-when-over",
    title: "a shadow-mode rule answers OK when over its limit",
    spec: "Matching rules 7",
    config: [rule("k", undefined, per(1, "day"), { shadow_mode: true })],
    steps: [
      hit(d("k=v"), { code: "OK" }),
      hit(d("k=v"), { code: "OK" }),
      hit(d("k=v"), { code: "OK" }),
    ],
  },
  {
    id: "counts",
    title: "a shadow-mode rule still counts within its limit",
    spec: "Matching rules 7",
    config: [rule("k", undefined, per(3, "day"), { shadow_mode: true })],
    steps: [hit(d("k=v"), ok(2, [3, "DAY"])), hit(d("k=v"), ok(1, [3, "DAY"]))],
  },
  {
    id: "other-over",
    title: "shadow mode on one rule leaves another descriptor's OVER_LIMIT",
    spec: "Matching rules 7; What the service does 5",
    config: [
      rule("s", undefined, per(1, "day"), { shadow_mode: true }),
      rule("l", undefined, per(1, "day")),
    ],
    steps: [
      hits([d("s=1"), d("l=1")], [ok(0), ok(0)]),
      hits([d("s=1"), d("l=1")], [{ code: "OK" }, over([1, "DAY"])]),
    ],
  },
  {
    id: "nested",
    title: "shadow mode at depth 2",
    spec: "Matching rules 7",
    config: [
      nest("a", "x", [
        rule("b", undefined, per(1, "day"), { shadow_mode: true }),
      ]),
    ],
    steps: [
      hit(d("a=x", "b=y"), { code: "OK" }),
      hit(d("a=x", "b=y"), { code: "OK" }),
    ],
  },
  {
    id: "zero",
    title: "shadow mode on a rule with requests_per_unit 0 answers OK",
    spec: "Matching rules 7; Limits",
    config: [rule("k", undefined, per(0, "day"), { shadow_mode: true })],
    steps: [hit(d("k=v"), { code: "OK" })],
  },
  {
    id: "off",
    title: "shadow_mode: false is an ordinary rule",
    spec: "Matching rules 7",
    config: [rule("k", undefined, per(1, "day"), { shadow_mode: false })],
    steps: countdown(d("k=v"), [1, "DAY"]),
  },
];

const globalShadow: Scenario[] = [
  {
    id: "overall-ok",
    title: "with SHADOW_MODE the overall answer is OK when a rule is over",
    spec: "Matching rules 8",
    config: [rule("k", undefined, per(1, "day"))],
    steps: [
      { descriptors: [d("k=v")], expect: { overall: "OK" } },
      { descriptors: [d("k=v")], expect: { overall: "OK" } },
      { descriptors: [d("k=v")], expect: { overall: "OK" } },
    ],
  },
  {
    id: "zero",
    title:
      "with SHADOW_MODE a rule with requests_per_unit 0 lets requests through",
    spec: "Matching rules 8; Limits",
    config: [rule("k", undefined, per(0, "day"))],
    steps: [{ descriptors: [d("k=v")], expect: { overall: "OK" } }],
  },
  {
    id: "counts",
    title: "with SHADOW_MODE counting runs as usual",
    spec: "Matching rules 8",
    config: [rule("k", undefined, per(3, "day"))],
    steps: [hit(d("k=v"), ok(2, [3, "DAY"])), hit(d("k=v"), ok(1, [3, "DAY"]))],
  },
  {
    id: "several",
    title:
      "with SHADOW_MODE several descriptors over their limits answer OK overall",
    spec: "Matching rules 8; What the service does 5",
    config: [
      rule("a", undefined, per(0, "day")),
      rule("b", undefined, per(0, "day")),
    ],
    steps: [{ descriptors: [d("a=1"), d("b=1")], expect: { overall: "OK" } }],
  },
  {
    id: "json-200",
    title: "with SHADOW_MODE /json answers 200",
    spec: "Matching rules 8; Endpoints (HTTP)",
    config: [rule("k", undefined, per(0, "day"))],
    steps: [
      {
        descriptors: [d("k=v")],
        via: "json",
        expect: { overall: "OK", httpStatus: 200 },
      },
    ],
  },
];

const replaces: Scenario[] = [
  {
    id: "only-replacing",
    title:
      "a request matching both rules is counted only against the replacing one",
    spec: "Matching rules 9",
    config: [
      rule("a", undefined, per(1, "day", { name: "base" })),
      rule("b", undefined, per(3, "day", { replaces: [{ name: "base" }] })),
    ],
    steps: [
      hits([d("a=1"), d("b=1")], [{ code: "OK" }, ok(2, [3, "DAY"])]),
      hits([d("a=1"), d("b=1")], [{ code: "OK" }, ok(1, [3, "DAY"])]),
      hits([d("a=1"), d("b=1")], [{ code: "OK" }, ok(0, [3, "DAY"])]),
    ],
  },
  {
    id: "counter-untouched",
    title:
      "the replaced rule's counter is not changed by a replacing evaluation",
    spec: "Matching rules 9",
    config: [
      rule("a", undefined, per(2, "day", { name: "base" })),
      rule("b", undefined, per(5, "day", { replaces: [{ name: "base" }] })),
    ],
    steps: [
      hits([d("a=1"), d("b=1")], [{ code: "OK" }, ok(4)]),
      hits([d("a=1"), d("b=1")], [{ code: "OK" }, ok(3)]),
      ...countdown(d("a=1"), [2, "DAY"]),
    ],
  },
  {
    id: "still-applies",
    title:
      "the replaced rule still applies to requests without the replacing rule",
    spec: "Matching rules 9",
    config: [
      rule("a", undefined, per(1, "day", { name: "base" })),
      rule("b", "special", per(3, "day", { replaces: [{ name: "base" }] })),
    ],
    steps: [
      hits([d("a=1"), d("b=other")], [ok(0, [1, "DAY"]), none]),
      hits([d("a=1"), d("b=other")], [over([1, "DAY"]), none]),
    ],
  },
  {
    id: "unknown-name",
    title: "replacing a name no rule has changes nothing",
    spec: "Matching rules 9",
    config: [
      rule("a", undefined, per(1, "day", { name: "base" })),
      rule("b", undefined, per(3, "day", { replaces: [{ name: "nobody" }] })),
    ],
    steps: [
      hits([d("a=1"), d("b=1")], [ok(0, [1, "DAY"]), ok(2, [3, "DAY"])]),
      hits([d("a=1"), d("b=1")], [over([1, "DAY"]), ok(1, [3, "DAY"])]),
    ],
  },
  {
    id: "over-hidden",
    title:
      "a replaced rule that is over its limit does not make the answer OVER_LIMIT",
    spec: "Matching rules 9",
    config: [
      rule("a", undefined, per(0, "day", { name: "base" })),
      rule("b", undefined, per(3, "day", { replaces: [{ name: "base" }] })),
    ],
    steps: [hits([d("a=1"), d("b=1")], [{ code: "OK" }, ok(2, [3, "DAY"])])],
  },
  {
    id: "nested",
    title: "replaces between rules at depth 2",
    spec: "Matching rules 9",
    config: [
      nest("r", "x", [rule("a", undefined, per(1, "day", { name: "inner" }))]),
      nest("r", "y", [
        rule("b", undefined, per(2, "day", { replaces: [{ name: "inner" }] })),
      ]),
    ],
    steps: [
      hits(
        [d("r=x", "a=1"), d("r=y", "b=1")],
        [{ code: "OK" }, ok(1, [2, "DAY"])],
      ),
      hits(
        [d("r=x", "a=1"), d("r=y", "b=1")],
        [{ code: "OK" }, ok(0, [2, "DAY"])],
      ),
    ],
  },
];

const share: Scenario[] = [
  {
    id: "shared",
    title:
      "with share_threshold all values a wildcard matches share one counter",
    spec: "Matching rules 10",
    config: [rule("path", "files/*", per(2, "day"), { share_threshold: true })],
    steps: [
      hit(d("path=files/a"), ok(1, [2, "DAY"])),
      hit(d("path=files/b"), ok(0, [2, "DAY"])),
      hit(d("path=files/c"), over([2, "DAY"])),
    ],
  },
  {
    id: "not-shared",
    title: "with share_threshold false each value has its own counter",
    spec: "Matching rules 10",
    config: [
      rule("path", "files/*", per(1, "day"), { share_threshold: false }),
    ],
    steps: [
      hit(d("path=files/a"), ok(0, [1, "DAY"])),
      hit(d("path=files/b"), ok(0, [1, "DAY"])),
    ],
  },
  {
    id: "non-matching",
    title: "a value the shared wildcard does not match is not counted with it",
    spec: "Matching rules 10",
    config: [rule("path", "files/*", per(1, "day"), { share_threshold: true })],
    steps: [
      hit(d("path=files/a"), ok(0, [1, "DAY"])),
      hit(d("path=docs/a"), none),
    ],
  },
  {
    id: "nested",
    title: "share_threshold at depth 2",
    spec: "Matching rules 10",
    config: [
      nest("a", "x", [
        rule("p", "v*", per(2, "day"), { share_threshold: true }),
      ]),
    ],
    steps: [
      hit(d("a=x", "p=v1"), ok(1, [2, "DAY"])),
      hit(d("a=x", "p=v2"), ok(0, [2, "DAY"])),
      hit(d("a=x", "p=v3"), over([2, "DAY"])),
    ],
  },
  {
    id: "two-rules",
    title: "two shared wildcards keep two counters",
    spec: "Matching rules 10",
    config: [
      rule("p", "a*", per(1, "day"), { share_threshold: true }),
      rule("p", "b*", per(1, "day"), { share_threshold: true }),
    ],
    steps: [
      hit(d("p=a1"), ok(0, [1, "DAY"])),
      hit(d("p=b1"), ok(0, [1, "DAY"])),
      hit(d("p=a2"), over([1, "DAY"])),
    ],
  },
];

const metrics: Scenario[] = [
  {
    id: "value-to-metric",
    title: "value_to_metric leaves decisions and counters per value unchanged",
    spec: "Matching rules 11 (metric keys are not on the wire: decisions only)",
    config: [rule("user", undefined, per(1, "day"), { value_to_metric: true })],
    steps: [
      hit(d("user=a"), ok(0, [1, "DAY"])),
      hit(d("user=b"), ok(0, [1, "DAY"])),
      hit(d("user=a"), over([1, "DAY"])),
    ],
  },
  {
    id: "detailed-metric",
    title: "detailed_metric leaves decisions unchanged",
    spec: "Matching rules 12 (decisions only)",
    config: [rule("user", undefined, per(1, "day"), { detailed_metric: true })],
    steps: [
      ...countdown(d("user=a"), [1, "DAY"]),
      hit(d("user=b"), ok(0, [1, "DAY"])),
    ],
  },
  {
    id: "both",
    title: "detailed_metric with value_to_metric leaves decisions unchanged",
    spec: "Matching rules 11, 12 (decisions only)",
    config: [
      rule("user", undefined, per(2, "day"), {
        detailed_metric: true,
        value_to_metric: true,
      }),
    ],
    steps: countdown(d("user=a"), [2, "DAY"]),
  },
  {
    id: "wildcard-share",
    title: "value_to_metric on a shared wildcard keeps the shared counter",
    spec: "Matching rules 10, 11 (decisions only)",
    config: [
      rule("p", "files/*", per(1, "day"), {
        share_threshold: true,
        value_to_metric: true,
      }),
    ],
    steps: [
      hit(d("p=files/a"), ok(0, [1, "DAY"])),
      hit(d("p=files/b"), over([1, "DAY"])),
    ],
  },
  {
    id: "nested",
    title: "value_to_metric at depth 2 leaves decisions unchanged",
    spec: "Matching rules 11 (decisions only)",
    config: [
      nest("route", "api", [
        rule("user", undefined, per(1, "day"), { value_to_metric: true }),
      ]),
    ],
    steps: [
      hit(d("route=api", "user=a"), ok(0, [1, "DAY"])),
      {
        descriptors: [d("route=api", "user=a")],
        expect: expectAll(over([1, "DAY"])),
      },
    ],
  },
];

/** The per-rule field sections. */
export const ruleSections: readonly Section[] = [
  { name: "unlimited", scenarios: unlimited },
  { name: "shadow mode", scenarios: shadow },
  {
    name: "global shadow mode",
    settings: { globalShadowMode: true },
    scenarios: globalShadow,
  },
  { name: "replaces", scenarios: replaces },
  { name: "share_threshold", scenarios: share },
  { name: "metric flags", scenarios: metrics },
];
