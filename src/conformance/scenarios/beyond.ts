// Sections beyond the spec: features some servers add. Each runs on its own server (launch
// mode) or alone (running mode); a server that refuses the config, or whose answers show it
// ignores the feature (the section's first scenario, its probe, fails), is "not supported".
// The config fields are those of this project's docs/configuration.md, the only published
// spelling the suite knows.
import { Mismatch, type Scenario, type Section } from "../model.js";
import { countdown, d, hit, hits, ok, over, per, rule } from "./dsl.js";
import { secondsToWindowEnd } from "../expect.js";

const epochUnits: Scenario[] = [
  ...(
    [
      ["WEEK", "week"],
      ["MONTH", "month"],
      ["YEAR", "year"],
    ] as const
  ).flatMap(([unit, word]): Scenario[] => [
    {
      id: `limit-${word}`,
      title: `unit ${word}: currentLimit and the epoch-aligned reset`,
      spec: "beyond the spec (the spec lists second to day); docs/reference-parity.md#windows",
      config: [rule("k", undefined, per(10, word))],
      steps: [hit(d("k=v"), { ...ok(9, [10, unit]), reset: unit })],
    },
    {
      id: `count-${word}`,
      title: `unit ${word} counts to its limit`,
      spec: "beyond the spec; docs/reference-parity.md#windows",
      config: [rule("k", undefined, per(2, word))],
      steps: countdown(d("k=v"), [2, unit]),
    },
  ]),
];

const sliding: Scenario[] = [
  {
    id: "probe",
    title: "a sliding window counts to its limit",
    spec: "beyond the spec: sliding windows",
    config: [
      rule("k", undefined, per(3, "day", { algorithm: "sliding_window" })),
    ],
    steps: countdown(d("k=v"), [3, "DAY"]),
  },
  {
    id: "per-value",
    title: "sliding windows keep a counter per value",
    spec: "beyond the spec: sliding windows",
    config: [
      rule("k", undefined, per(1, "day", { algorithm: "sliding_window" })),
    ],
    steps: [
      hit(d("k=a"), ok(0, [1, "DAY"])),
      hit(d("k=b"), ok(0, [1, "DAY"])),
      hit(d("k=a"), over([1, "DAY"])),
    ],
  },
  {
    id: "hits",
    title: "a sliding window takes hits_addend",
    spec: "beyond the spec: sliding windows",
    config: [
      rule("k", undefined, per(10, "hour", { algorithm: "sliding_window" })),
    ],
    steps: [
      hit(d("k=v"), ok(6, [10, "HOUR"]), { hitsAddend: 4 }),
      hit(d("k=v"), over([10, "HOUR"]), { hitsAddend: 7 }),
    ],
  },
];

const bucket: Scenario[] = [
  {
    id: "probe",
    title: "a token bucket admits its burst, then refuses",
    spec: "beyond the spec: token buckets",
    config: [
      rule(
        "k",
        undefined,
        per(24, "day", { algorithm: "token_bucket", burst: 2 }),
      ),
    ],
    steps: [
      hit(d("k=v"), ok(1)),
      hit(d("k=v"), ok(0)),
      hit(d("k=v"), { code: "OVER_LIMIT" }),
    ],
  },
  {
    id: "default-burst",
    title: "a token bucket without burst holds requests_per_unit",
    spec: "beyond the spec: token buckets",
    config: [
      rule("k", undefined, per(3, "day", { algorithm: "token_bucket" })),
    ],
    steps: [
      hit(d("k=v"), ok(2)),
      hit(d("k=v"), ok(1)),
      hit(d("k=v"), ok(0)),
      hit(d("k=v"), { code: "OVER_LIMIT" }),
    ],
  },
  {
    id: "refused-takes-nothing",
    title: "a refused request takes nothing from the bucket",
    spec: "beyond the spec: token buckets",
    config: [
      rule(
        "k",
        undefined,
        per(100, "day", { algorithm: "token_bucket", burst: 3 }),
      ),
    ],
    steps: [
      hit(d("k=v"), { code: "OVER_LIMIT" }, { hitsAddend: 4 }),
      hit(d("k=v"), ok(0), { hitsAddend: 3 }),
    ],
  },
  {
    id: "per-value",
    title: "token buckets are per value",
    spec: "beyond the spec: token buckets",
    config: [
      rule(
        "k",
        undefined,
        per(10, "day", { algorithm: "token_bucket", burst: 1 }),
      ),
    ],
    steps: [
      hit(d("k=a"), ok(0)),
      hit(d("k=b"), ok(0)),
      hit(d("k=a"), { code: "OVER_LIMIT" }),
    ],
  },
];

/** Seconds from `nowMs` to the first instant of the next UTC month. */
function secondsToUtcMonthEnd(nowMs: number): number {
  const now = new Date(nowMs);
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
  return Math.ceil((next - nowMs) / 1000);
}

/** Seconds from `nowMs` to the next midnight at a fixed offset east of UTC (hours). */
function secondsToMidnightAt(offsetHours: number, nowMs: number): number {
  const day = 86_400_000;
  const local = nowMs + offsetHours * 3_600_000;
  const nextLocalMidnight = Math.floor(local / day) * day + day;
  return Math.ceil((nextLocalMidnight - local) / 1000);
}

const calendar: Scenario[] = [
  {
    id: "probe",
    title: "a calendar month in UTC ends on the first of the next month",
    spec: "beyond the spec: calendar windows",
    config: [rule("k", undefined, per(10, "month", { time_zone: "UTC" }))],
    async run(ctx) {
      const sent = Date.now();
      const answer = await ctx.step(hit(d("k=v"), ok(9)));
      const actual = answer?.statuses[0]?.durationUntilReset ?? null;
      const expected = secondsToUtcMonthEnd(sent);
      if (actual === null || Math.abs(actual - expected) > 2)
        throw new Mismatch(
          { descriptors: [["k", "v"]] },
          { durationUntilReset: expected },
          {
            durationUntilReset: actual,
            epochMonth: secondsToWindowEnd("MONTH", sent),
          },
          "the month is not the calendar month",
        );
    },
  },
  {
    id: "day-tokyo",
    title: "a calendar day in Asia/Tokyo ends at Tokyo's midnight",
    spec: "beyond the spec: calendar windows",
    config: [rule("k", undefined, per(10, "day", { time_zone: "Asia/Tokyo" }))],
    async run(ctx) {
      const sent = Date.now();
      const answer = await ctx.step(hit(d("k=v"), ok(9)));
      const actual = answer?.statuses[0]?.durationUntilReset ?? null;
      const expected = secondsToMidnightAt(9, sent);
      if (actual === null || Math.abs(actual - expected) > 2)
        throw new Mismatch(
          { descriptors: [["k", "v"]] },
          { durationUntilReset: expected },
          { durationUntilReset: actual },
          "the day does not end at midnight in Tokyo",
        );
    },
  },
  {
    id: "counts",
    title: "a calendar window counts to its limit",
    spec: "beyond the spec: calendar windows",
    config: [rule("k", undefined, per(2, "month", { time_zone: "UTC" }))],
    steps: countdown(d("k=v"), [2, "MONTH"]),
  },
];

const severalLimits: Scenario[] = [
  {
    id: "probe",
    title: "with two limits the tighter one decides",
    spec: "beyond the spec: several limits per descriptor",
    config: [{ key: "k", rate_limits: [per(5, "day"), per(2, "hour")] }],
    steps: [
      hit(d("k=v"), ok(1, [2, "HOUR"])),
      hit(d("k=v"), ok(0, [2, "HOUR"])),
      hit(d("k=v"), over([2, "HOUR"])),
    ],
  },
  {
    id: "wider-decides",
    title: "the limit with less remaining is reported",
    spec: "beyond the spec: several limits per descriptor",
    config: [{ key: "k", rate_limits: [per(2, "day"), per(10, "hour")] }],
    steps: [
      hit(d("k=v"), ok(1, [2, "DAY"])),
      hit(d("k=v"), ok(0, [2, "DAY"])),
      hit(d("k=v"), over([2, "DAY"])),
    ],
  },
];

const refunds: Scenario[] = [
  {
    id: "probe",
    title: "a refund gives a hit back",
    spec: "beyond the spec: refunds (is_negative_hits)",
    config: [rule("k", undefined, per(1, "day"))],
    steps: [
      hit(d("k=v"), ok(0, [1, "DAY"])),
      hits([{ ...d("k=v"), refund: true }], [{ code: "OK" }]),
      hit(d("k=v"), ok(0, [1, "DAY"])),
    ],
  },
  {
    id: "amount",
    title: "a refund of 2 gives 2 back",
    spec: "beyond the spec: refunds",
    config: [rule("k", undefined, per(5, "day"))],
    steps: [
      hit(d("k=v"), ok(2), { hitsAddend: 3 }),
      hits([{ ...d("k=v"), refund: true, hitsAddend: 2 }], [{ code: "OK" }]),
      hit(d("k=v"), ok(3)),
    ],
  },
  {
    id: "never-over",
    title: "a refund is never refused",
    spec: "beyond the spec: refunds",
    config: [rule("k", undefined, per(0, "day"))],
    steps: [hits([{ ...d("k=v"), refund: true }], [{ code: "OK" }])],
  },
];

const multiplier: Scenario[] = [
  {
    id: "probe",
    title: "a window of 5 minutes resets on 5-minute boundaries",
    spec: "beyond the spec: window length (unit_multiplier)",
    config: [rule("k", undefined, per(10, "minute", { unit_multiplier: 5 }))],
    async run(ctx) {
      const sent = Date.now();
      const answer = await ctx.step(hit(d("k=v"), ok(9, [10, "MINUTE"])));
      const actual = answer?.statuses[0]?.durationUntilReset ?? null;
      const expected = 300 - (Math.floor(sent / 1000) % 300);
      if (actual === null || Math.abs(actual - expected) > 1)
        throw new Mismatch(
          { descriptors: [["k", "v"]] },
          { durationUntilReset: expected },
          { durationUntilReset: actual },
          "the window is not 5 minutes",
        );
    },
  },
];

const allOrNothing: Scenario[] = [
  {
    id: "probe",
    title: "all-or-nothing: a refused request charges none of its descriptors",
    spec: "beyond the spec: all-or-nothing charging",
    fileExtra: { charge: "all_or_nothing" },
    config: [
      rule("a", undefined, per(0, "day")),
      rule("b", undefined, per(3, "day")),
    ],
    steps: [
      hits([d("a=1"), d("b=1")], [over([0, "DAY"]), { code: "OK" }]),
      hits([d("b=1")], [ok(2, [3, "DAY"])]),
    ],
  },
];

/** The sections beyond the spec. */
export const beyondSections: readonly Section[] = [
  { name: "units beyond the spec", beyondSpec: true, scenarios: epochUnits },
  { name: "sliding windows", beyondSpec: true, scenarios: sliding },
  { name: "token buckets", beyondSpec: true, scenarios: bucket },
  { name: "calendar windows", beyondSpec: true, scenarios: calendar },
  { name: "several limits", beyondSpec: true, scenarios: severalLimits },
  { name: "refunds", beyondSpec: true, scenarios: refunds },
  { name: "window length", beyondSpec: true, scenarios: multiplier },
  {
    name: "all-or-nothing charging",
    beyondSpec: true,
    scenarios: allOrNothing,
  },
];
