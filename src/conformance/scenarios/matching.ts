// Sections on the spec's matching rules 1, 2, 3 and 5: depth, specificity, key-only rules,
// wildcards, whitelisted and placeholder nodes. Each scenario has a domain of its own.
import type { Scenario, Section } from "../model.js";
import {
  countdown,
  d,
  hit,
  nest,
  none,
  noneTimes,
  ok,
  over,
  per,
  rule,
} from "./dsl.js";

const depth: Scenario[] = [
  {
    id: "one-level",
    title: "a one-entry request matches a one-level rule",
    spec: "Matching rules 1",
    config: [rule("a", undefined, per(3, "day"))],
    steps: [hit(d("a=x"), ok(2, [3, "DAY"]))],
  },
  {
    id: "deeper-request",
    title: "a two-entry request does not match a one-level rule",
    spec: "Matching rules 1",
    config: [rule("a", undefined, per(3, "day"))],
    steps: noneTimes(d("a=x", "b=y"), 2),
  },
  {
    id: "deeper-request-exact",
    title: "a two-entry request does not match a one-level rule with a value",
    spec: "Matching rules 1",
    config: [rule("a", "x", per(3, "day"))],
    steps: noneTimes(d("a=x", "b=y"), 2),
  },
  {
    id: "two-levels",
    title: "a two-entry request matches the nested rule",
    spec: "Matching rules 1",
    config: [nest("a", undefined, [rule("b", undefined, per(2, "day"))])],
    steps: countdown(d("a=x", "b=y"), [2, "DAY"]),
  },
  {
    id: "shallower-request",
    title: "a one-entry request does not match a rule only at depth 2",
    spec: "Matching rules 1, 5",
    config: [nest("a", undefined, [rule("b", undefined, per(1, "day"))])],
    steps: noneTimes(d("a=x"), 2),
  },
  {
    id: "three-levels",
    title: "three entries match a three-level rule",
    spec: "Matching rules 1",
    config: [nest("a", "1", [nest("b", "2", [rule("c", "3", per(2, "day"))])])],
    steps: countdown(d("a=1", "b=2", "c=3"), [2, "DAY"]),
  },
  {
    id: "three-levels-two-entries",
    title: "two entries do not match a rule at depth 3",
    spec: "Matching rules 1",
    config: [nest("a", "1", [nest("b", "2", [rule("c", "3", per(1, "day"))])])],
    steps: noneTimes(d("a=1", "b=2"), 2),
  },
  {
    id: "three-levels-four-entries",
    title: "four entries do not match a rule at depth 3",
    spec: "Matching rules 1",
    config: [nest("a", "1", [nest("b", "2", [rule("c", "3", per(1, "day"))])])],
    steps: noneTimes(d("a=1", "b=2", "c=3", "d=4"), 2),
  },
  {
    id: "limit-and-children",
    title:
      "a node with a limit and children serves both depths with separate counters",
    spec: "Matching rules 1",
    config: [
      nest("a", "x", [rule("b", undefined, per(2, "day"))], per(4, "day")),
    ],
    steps: [
      hit(d("a=x"), ok(3, [4, "DAY"])),
      hit(d("a=x", "b=y"), ok(1, [2, "DAY"])),
      hit(d("a=x"), ok(2, [4, "DAY"])),
      hit(d("a=x", "b=y"), ok(0, [2, "DAY"])),
      hit(d("a=x", "b=y"), over([2, "DAY"])),
      hit(d("a=x"), ok(1, [4, "DAY"])),
    ],
  },
  {
    id: "value-before-key",
    title: "a rule with key and value is tried before the key alone",
    spec: "Matching rules 2",
    config: [
      rule("k", "v", per(1, "day")),
      rule("k", undefined, per(4, "day")),
    ],
    steps: [
      hit(d("k=v"), ok(0, [1, "DAY"])),
      hit(d("k=w"), ok(3, [4, "DAY"])),
      hit(d("k=v"), over([1, "DAY"])),
    ],
  },
  {
    id: "value-before-key-order",
    title: "specificity does not depend on the order of the rules in the file",
    spec: "Matching rules 2",
    config: [
      rule("k", undefined, per(4, "day")),
      rule("k", "v", per(1, "day")),
    ],
    steps: [hit(d("k=v"), ok(0, [1, "DAY"])), hit(d("k=w"), ok(3, [4, "DAY"]))],
  },
  {
    id: "value-before-key-nested",
    title: "at depth 2 a key and value is tried before the key alone",
    spec: "Matching rules 2",
    config: [
      nest("a", undefined, [
        rule("b", "y", per(1, "day")),
        rule("b", undefined, per(3, "day")),
      ]),
    ],
    steps: [
      hit(d("a=x", "b=y"), ok(0, [1, "DAY"])),
      hit(d("a=x", "b=z"), ok(2, [3, "DAY"])),
    ],
  },
  {
    id: "other-value",
    title: "a value no rule names, with no key-only rule, matches nothing",
    spec: "Matching rules 2",
    config: [rule("k", "v", per(1, "day"))],
    steps: noneTimes(d("k=w"), 2),
  },
  {
    id: "case-value",
    title: "values are case-sensitive",
    spec: "Descriptor (request side)",
    config: [rule("k", "V", per(1, "day"))],
    steps: [hit(d("k=v"), none), hit(d("k=V"), ok(0, [1, "DAY"]))],
  },
  {
    id: "case-key",
    title: "keys are case-sensitive",
    spec: "Descriptor (request side)",
    config: [rule("k", undefined, per(1, "day"))],
    steps: [hit(d("K=v"), none), hit(d("k=v"), ok(0, [1, "DAY"]))],
  },
  {
    id: "other-key",
    title: "a key no rule names matches nothing",
    spec: "Matching rules 1",
    config: [rule("k", undefined, per(1, "day"))],
    steps: noneTimes(d("j=v"), 2),
  },
  {
    id: "siblings",
    title: "sibling rules at the top level keep their own limits",
    spec: "Matching rules 2",
    config: [
      rule("a", undefined, per(1, "day")),
      rule("b", undefined, per(2, "day")),
    ],
    steps: [
      hit(d("a=1"), ok(0, [1, "DAY"])),
      hit(d("b=1"), ok(1, [2, "DAY"])),
      hit(d("a=1"), over([1, "DAY"])),
      hit(d("b=1"), ok(0, [2, "DAY"])),
    ],
  },
  {
    id: "two-values",
    title: "two rules with different values of one key count apart",
    spec: "Matching rules 2",
    config: [rule("k", "v1", per(1, "day")), rule("k", "v2", per(2, "day"))],
    steps: [
      hit(d("k=v1"), ok(0, [1, "DAY"])),
      hit(d("k=v2"), ok(1, [2, "DAY"])),
      hit(d("k=v1"), over([1, "DAY"])),
    ],
  },
  {
    id: "first-level-mismatch",
    title: "a first entry that matches nothing stops the walk",
    spec: "Matching rules 1",
    config: [nest("a", "x", [rule("b", undefined, per(1, "day"))])],
    steps: noneTimes(d("a=y", "b=z"), 2),
  },
  {
    id: "entry-order",
    title: "entries match in request order",
    spec: "Descriptor (request side)",
    config: [nest("a", undefined, [rule("b", undefined, per(1, "day"))])],
    steps: [
      hit(d("b=z", "a=y"), none),
      hit(d("a=y", "b=z"), ok(0, [1, "DAY"])),
    ],
  },
  {
    id: "numeric-value",
    title: "a numeric-looking value matches as text",
    spec: "Matching rules 2",
    config: [rule("code", "200", per(2, "day"))],
    steps: [hit(d("code=200"), ok(1, [2, "DAY"])), hit(d("code=0200"), none)],
  },
];

const keyOnly: Scenario[] = [
  {
    id: "per-value",
    title: "a key-only rule keeps a counter for each value",
    spec: "Matching rules 2",
    config: [rule("user", undefined, per(2, "day"))],
    steps: [
      ...countdown(d("user=alice"), [2, "DAY"]),
      hit(d("user=bob"), ok(1, [2, "DAY"])),
    ],
  },
  {
    id: "many-values",
    title: "ten values each start their own counter",
    spec: "Matching rules 2",
    config: [rule("user", undefined, per(5, "day"))],
    steps: Array.from({ length: 10 }, (_, i) =>
      hit(d(`user=u${i}`), ok(4, [5, "DAY"])),
    ),
  },
  {
    id: "case-counters",
    title: "values that differ in case have separate counters",
    spec: "Matching rules 2; Descriptor (request side)",
    config: [rule("user", undefined, per(1, "day"))],
    steps: [
      hit(d("user=Ann"), ok(0, [1, "DAY"])),
      hit(d("user=ann"), ok(0, [1, "DAY"])),
    ],
  },
  {
    id: "punctuation",
    title: "values with punctuation are values like any other",
    spec: "Matching rules 2",
    config: [rule("path", undefined, per(2, "day"))],
    steps: [
      hit(d("path=/a/b?c=d&e"), ok(1, [2, "DAY"])),
      hit(d("path=/a/b?c=d&e"), ok(0, [2, "DAY"])),
      hit(d("path=/a/b?c=d"), ok(1, [2, "DAY"])),
    ],
  },
  {
    id: "unicode",
    title: "non-ASCII values keep their own counters",
    spec: "Matching rules 2",
    config: [rule("city", undefined, per(1, "day"))],
    steps: [
      hit(d("city=Zürich"), ok(0, [1, "DAY"])),
      hit(d("city=Zurich"), ok(0, [1, "DAY"])),
      hit(d("city=Zürich"), over([1, "DAY"])),
    ],
  },
  {
    id: "long-value",
    title: "a 100-character value is counted",
    spec: "Matching rules 2",
    config: [rule("token", undefined, per(1, "day"))],
    steps: [
      hit(d(`token=${"x".repeat(100)}`), ok(0, [1, "DAY"])),
      hit(d(`token=${"x".repeat(100)}`), over([1, "DAY"])),
      hit(d(`token=${"x".repeat(99)}`), ok(0, [1, "DAY"])),
    ],
  },
  {
    id: "under-exact",
    title: "a key-only rule under a key and value counts per value",
    spec: "Matching rules 1, 2",
    config: [nest("route", "api", [rule("user", undefined, per(1, "day"))])],
    steps: [
      hit(d("route=api", "user=a"), ok(0, [1, "DAY"])),
      hit(d("route=api", "user=b"), ok(0, [1, "DAY"])),
      hit(d("route=api", "user=a"), over([1, "DAY"])),
      hit(d("route=web", "user=a"), none),
    ],
  },
  {
    id: "both-levels",
    title: "key-only at both levels counts per pair of values",
    spec: "Matching rules 2",
    config: [nest("ip", undefined, [rule("user", undefined, per(1, "day"))])],
    steps: [
      hit(d("ip=1", "user=a"), ok(0, [1, "DAY"])),
      hit(d("ip=2", "user=a"), ok(0, [1, "DAY"])),
      hit(d("ip=1", "user=b"), ok(0, [1, "DAY"])),
      hit(d("ip=1", "user=a"), over([1, "DAY"])),
    ],
  },
  {
    id: "random-values",
    title: "seeded random values each get a fresh counter",
    spec: "Matching rules 2",
    config: [rule("session", undefined, per(3, "day"))],
    async run(ctx) {
      for (let i = 0; i < 5; i++) {
        const value = ctx.unique("s");
        await ctx.step(hit(d(`session=${value}`), ok(2, [3, "DAY"])));
        await ctx.step(hit(d(`session=${value}`), ok(1, [3, "DAY"])));
      }
    },
  },
  {
    id: "numeric-values",
    title: "values 1 and 01 are different values",
    spec: "Matching rules 2",
    config: [rule("n", undefined, per(1, "day"))],
    steps: [
      hit(d("n=1"), ok(0, [1, "DAY"])),
      hit(d("n=01"), ok(0, [1, "DAY"])),
    ],
  },
];

const wildcards: Scenario[] = [
  ...(
    [
      ["end-longer", "foo*", "foobar", true],
      ["end-zero", "foo*", "foo", true],
      ["end-shorter", "foo*", "fo", false],
      ["end-inside", "foo*", "xfoo", false],
      ["middle", "a*z", "abcz", true],
      ["middle-zero", "a*z", "az", true],
      ["middle-suffix", "a*z", "abcy", false],
      ["middle-prefix", "a*z", "bz", false],
      ["middle-overlap", "ab*b", "ab", false],
      ["middle-overlap-ok", "ab*b", "abb", true],
      ["several", "a*b*c", "a1b2c", true],
      ["several-zero", "a*b*c", "abc", true],
      ["several-order", "a*b*c", "acb", false],
      ["several-missing", "a*b*c", "abx", false],
      ["path", "/api/*/users/*", "/api/v1/users/7", true],
      ["path-other", "/api/*/users/*", "/api/v1/items/7", false],
      ["star-only", "*", "anything", true],
    ] as const
  ).map(([id, pattern, value, matches]): Scenario => ({
    id,
    title: `pattern ${pattern} ${matches ? "matches" : "does not match"} ${value}`,
    spec: "Matching rules 3",
    config: [rule("k", pattern, per(2, "day"))],
    steps: matches
      ? [hit(d(`k=${value}`), ok(1, [2, "DAY"]))]
      : noneTimes(d(`k=${value}`), 2),
  })),
  {
    id: "own-counters",
    title:
      "without share_threshold each value a wildcard matches has its own counter",
    spec: "Matching rules 3, 10",
    config: [rule("k", "foo*", per(1, "day"))],
    steps: [
      hit(d("k=foo1"), ok(0, [1, "DAY"])),
      hit(d("k=foo2"), ok(0, [1, "DAY"])),
      hit(d("k=foo1"), over([1, "DAY"])),
    ],
  },
  {
    id: "nested",
    title: "a wildcard at depth 2",
    spec: "Matching rules 1, 3",
    config: [nest("a", "x", [rule("path", "/v1/*", per(1, "day"))])],
    steps: [
      hit(d("a=x", "path=/v1/users"), ok(0, [1, "DAY"])),
      hit(d("a=x", "path=/v2/users"), none),
    ],
  },
  {
    id: "before-key-only",
    title: "a wildcard value is tried before the key alone",
    spec: "Matching rules 2, 3",
    config: [
      rule("k", "ab*", per(1, "day")),
      rule("k", undefined, per(5, "day")),
    ],
    steps: [
      hit(d("k=abc"), ok(0, [1, "DAY"])),
      hit(d("k=xyz"), ok(4, [5, "DAY"])),
    ],
  },
  {
    id: "case",
    title: "wildcard matching is case-sensitive",
    spec: "Matching rules 3; Descriptor (request side)",
    config: [rule("k", "Foo*", per(1, "day"))],
    steps: [hit(d("k=foobar"), none), hit(d("k=Foobar"), ok(0, [1, "DAY"]))],
  },
];

const whitelist: Scenario[] = [
  {
    id: "whitelisted",
    title: "a node without limit or children is whitelisted, over any count",
    spec: "Matching rules 5",
    config: [rule("a", "x"), rule("a", undefined, per(1, "day"))],
    steps: [...noneTimes(d("a=x"), 3), ...countdown(d("a=y"), [1, "DAY"])],
  },
  {
    id: "whitelisted-key",
    title: "a key-only node without limit or children whitelists every value",
    spec: "Matching rules 5",
    config: [rule("a", undefined)],
    steps: [...noneTimes(d("a=1"), 2), ...noneTimes(d("a=2"), 2)],
  },
  {
    id: "whitelisted-nested",
    title: "a whitelisted node at depth 2",
    spec: "Matching rules 5",
    config: [
      nest("a", "x", [
        rule("b", "internal"),
        rule("b", undefined, per(1, "day")),
      ]),
    ],
    steps: [
      ...noneTimes(d("a=x", "b=internal"), 3),
      ...countdown(d("a=x", "b=public"), [1, "DAY"]),
    ],
  },
  {
    id: "placeholder",
    title: "a node with children and no limit is only a placeholder",
    spec: "Matching rules 5",
    config: [nest("a", undefined, [rule("b", undefined, per(1, "day"))])],
    steps: [
      ...noneTimes(d("a=x"), 2),
      ...countdown(d("a=x", "b=y"), [1, "DAY"]),
    ],
  },
  {
    id: "placeholder-value",
    title: "a placeholder with a value",
    spec: "Matching rules 5",
    config: [nest("a", "x", [rule("b", "y", per(2, "day"))])],
    steps: [
      ...noneTimes(d("a=x"), 2),
      ...countdown(d("a=x", "b=y"), [2, "DAY"]),
    ],
  },
  {
    id: "placeholder-two",
    title: "two placeholder levels above a limit",
    spec: "Matching rules 5",
    config: [
      nest("a", undefined, [
        nest("b", undefined, [rule("c", undefined, per(1, "day"))]),
      ]),
    ],
    steps: [
      hit(d("a=1"), none),
      hit(d("a=1", "b=2"), none),
      ...countdown(d("a=1", "b=2", "c=3"), [1, "DAY"]),
    ],
  },
];

/** The matching sections. */
export const matchingSections: readonly Section[] = [
  { name: "descriptor depth and specificity", scenarios: depth },
  { name: "key-only rules", scenarios: keyOnly },
  { name: "wildcards", scenarios: wildcards },
  { name: "whitelisted and placeholder nodes", scenarios: whitelist },
];
