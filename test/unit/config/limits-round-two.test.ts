// Issue 23 on the config side: `algorithm: token_bucket` with `burst`, `time_zone` and
// `week_start`, and `rate_limits:` lists, from YAML text through the real loader to the built
// RateLimit (parameters, cache-key tails, stats keys, extra limits), the dump and every error
// with its line and field path. The decisions themselves are tested in test/unit/limiter.
import { describe, expect, it } from "vitest";
import { fixedEpochWindow } from "../../../src/config/algorithm.js";
import { ConfigError } from "../../../src/config/config-error.js";
import { loadConfig } from "../../../src/config/load-config.js";
import type { RateLimit } from "../../../src/config/rate-limit-config.js";
import { resolveGcraParams } from "../../../src/config/token-bucket.js";
import { RateLimitResponse_RateLimit_Unit as Unit } from "../../../src/proto.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { bucketOfLimit, calendarOfLimit } from "../../helpers/rate-limit.js";
import { descriptor } from "../../helpers/requests.js";

function load(text: string) {
  return loadConfig([{ name: "limits.yaml", text }], {
    statsManager: createStatsManager(),
  });
}

function loadError(text: string): ConfigError {
  try {
    load(text);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error("loaded without error");
}

/** `domain: d` with one rule `key: k` whose remaining lines are `lines` (4 spaces in). */
function rule(...lines: string[]): string {
  return [
    "domain: d",
    "descriptors:",
    "  - key: k",
    ...lines.map((l) => `    ${l}`),
    "",
  ].join("\n");
}

/** The limit of `k_v` in domain `d`. */
function limitOf(text: string, value = "v"): RateLimit {
  const limit = load(text).getLimit("d", descriptor(["k", value]));
  if (limit === undefined) throw new Error("no limit");
  return limit;
}

describe("config: algorithm token_bucket", () => {
  it("builds the GCRA parameters and the cache-key tail, burst defaulting to requests_per_unit", () => {
    const limit = limitOf(
      rule(
        "rate_limit:",
        "  unit: minute",
        "  requests_per_unit: 100",
        "  algorithm: token_bucket",
      ),
    );
    expect(limit).toMatchObject({
      unit: Unit.MINUTE,
      windowSeconds: 60,
      algorithm: {
        kind: "token_bucket",
        bucket: resolveGcraParams({
          requestsPerUnit: 100,
          windowSeconds: 60,
        }),
      },
      cacheKeySuffix: "tb60_100_100",
      extraLimits: undefined,
      statsKeySuffix: "",
    });
    expect(bucketOfLimit(limit)).toEqual({
      emissionIntervalUs: 600_000,
      burst: 100,
      toleranceUs: 59_400_000,
      capacityUs: 60_000_000,
    });
    expect(limit.stats.key).toBe("d.k");
  });

  it("takes burst and a window of several units", () => {
    const limit = limitOf(
      rule(
        "rate_limit:",
        "  unit: second",
        "  unit_multiplier: 10",
        "  requests_per_unit: 5",
        "  algorithm: token_bucket",
        "  burst: 20",
      ),
    );
    expect(limit.windowSeconds).toBe(10);
    expect(bucketOfLimit(limit)).toEqual(
      resolveGcraParams({ requestsPerUnit: 5, windowSeconds: 10, burst: 20 }),
    );
    expect(bucketOfLimit(limit)?.emissionIntervalUs).toBe(2_000_000);
    expect(limit.cacheKeySuffix).toBe("tb10_5_20");
  });

  it("dumps algorithm and burst", () => {
    const config = load(
      rule(
        "rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 8}",
      ),
    );
    expect(config.dump()).toBe(
      "d.k: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 8\n",
    );
  });

  it("is accepted with a burst of 1 and a large window", () => {
    const limit = limitOf(
      rule(
        "rate_limit: {unit: year, requests_per_unit: 1, algorithm: token_bucket, burst: 1}",
      ),
    );
    expect(limit.cacheKeySuffix).toBe("tb31536000_1_1");
  });
});

describe("config: time_zone and week_start", () => {
  it("builds a calendar window for a local month, keeping the nominal window", () => {
    const limit = limitOf(
      rule(
        "rate_limit:",
        "  unit: month",
        "  requests_per_unit: 10000",
        "  time_zone: europe/berlin",
      ),
    );
    expect(limit).toMatchObject({
      unit: Unit.MONTH,
      windowSeconds: 2592000,
      cacheKeySuffix: "",
      statsKeySuffix: "",
    });
    expect(limit.algorithm.kind).toBe("fixed_window");
    expect(calendarOfLimit(limit)?.unit).toBe("month");
    expect(calendarOfLimit(limit)?.timeZone).toBe("Europe/Berlin");
    // 2026-11-27T21:00:00Z is in November in Berlin.
    expect(calendarOfLimit(limit)?.period(1795813200).cacheKeyPart).toBe(
      "2026-11@Europe/Berlin",
    );
  });

  it("takes week_start for weeks", () => {
    const limit = limitOf(
      rule(
        "rate_limit:",
        "  unit: week",
        "  requests_per_unit: 7",
        "  time_zone: America/New_York",
        "  week_start: Sunday",
      ),
    );
    expect(calendarOfLimit(limit)?.weekStart).toBe("sunday");
    expect(calendarOfLimit(limit)?.unit).toBe("week");
    expect(limit.windowSeconds).toBe(604800);
  });

  it("dumps time_zone, and week_start only when not monday", () => {
    const config = load(
      [
        "domain: d",
        "descriptors:",
        "  - key: day",
        "    rate_limit: {unit: day, requests_per_unit: 1, time_zone: UTC}",
        "  - key: monday",
        "    rate_limit: {unit: week, requests_per_unit: 2, time_zone: Asia/Tokyo, week_start: monday}",
        "  - key: sunday",
        "    rate_limit: {unit: week, requests_per_unit: 3, time_zone: Asia/Tokyo, week_start: sunday}",
        "",
      ].join("\n"),
    );
    expect(config.dump()).toBe(
      "d.day: unit=DAY requests_per_unit=1, shadow_mode: false, quota_mode: false, time_zone: UTC\n" +
        "d.monday: unit=WEEK requests_per_unit=2, shadow_mode: false, quota_mode: false, time_zone: Asia/Tokyo\n" +
        "d.sunday: unit=WEEK requests_per_unit=3, shadow_mode: false, quota_mode: false, time_zone: Asia/Tokyo, week_start: sunday\n",
    );
  });
});

const list = rule(
  "shadow_mode: true",
  "quota_mode: true",
  "metadata: {team: a}",
  "rate_limits:",
  "  - unit: second",
  "    requests_per_unit: 10",
  "  - unit: minute",
  "    unit_multiplier: 5",
  "    requests_per_unit: 200",
  "    algorithm: sliding_window",
  "  - unit: hour",
  "    requests_per_unit: 1000",
  "    algorithm: token_bucket",
  "    burst: 50",
  "    name: hourly",
  "  - unit: day",
  "    requests_per_unit: 5000",
  "    time_zone: UTC",
);

describe("config: rate_limits lists", () => {
  it("makes the first entry the rule's limit and the others its frozen extraLimits", () => {
    const config = load(list);
    const limit = config.getLimit("d", descriptor(["k", "v"]));
    expect(limit).toMatchObject({
      fullKey: "d.k",
      unit: Unit.SECOND,
      requestsPerUnit: 10,
      windowSeconds: 1,
      // A fixed window in a list names its window even with unit_multiplier 1.
      cacheKeySuffix: "_w1",
      statsKeySuffix: "_per_second",
    });
    expect(limit?.stats.key).toBe("d.k_per_second");
    expect(Object.isFrozen(limit)).toBe(true);
    const extra = limit?.extraLimits;
    expect(Object.isFrozen(extra)).toBe(true);
    expect(
      extra?.map((l) => [l.statsKeySuffix, l.stats.key, l.cacheKeySuffix]),
    ).toEqual([
      ["_per_5_minute", "d.k_per_5_minute", "_s300"],
      ["_hourly", "d.k_hourly", "tb3600_1000_50"],
      ["_per_day", "d.k_per_day", ""],
    ]);
    expect(bucketOfLimit(extra?.[1])?.burst).toBe(50);
    expect(extra?.[1]?.name).toBe("hourly");
    expect(calendarOfLimit(extra?.[2])?.timeZone).toBe("UTC");
    for (const other of extra ?? []) {
      expect(Object.isFrozen(other)).toBe(true);
      expect(other.extraLimits).toBeUndefined();
      expect(other.fullKey).toBe("d.k");
    }
  });

  it("applies shadow_mode, quota_mode and metadata of the rule to every entry", () => {
    const limit = load(list).getLimit("d", descriptor(["k", "v"]));
    for (const one of [limit, ...(limit?.extraLimits ?? [])]) {
      expect(one).toMatchObject({
        shadowMode: true,
        quotaMode: true,
        metadata: { team: "a" },
        detailedMetric: false,
        allOrNothing: false,
      });
    }
  });

  it("dumps one line per limit, named by its stats key", () => {
    expect(load(list).dump()).toBe(
      "d.k_per_second: unit=SECOND requests_per_unit=10, shadow_mode: true, quota_mode: true\n" +
        "d.k_per_5_minute: unit=MINUTE requests_per_unit=200, shadow_mode: true, quota_mode: true, unit_multiplier: 5, algorithm: sliding_window\n" +
        "d.k_hourly: unit=HOUR requests_per_unit=1000, shadow_mode: true, quota_mode: true, algorithm: token_bucket, burst: 50\n" +
        "d.k_per_day: unit=DAY requests_per_unit=5000, shadow_mode: true, quota_mode: true, time_zone: UTC\n",
    );
  });

  it("takes a list of one, and a list in a nested rule", () => {
    const config = load(
      [
        "domain: d",
        "charge: all_or_nothing",
        "descriptors:",
        "  - key: k",
        "    descriptors:",
        "      - key: n",
        "        rate_limits: [{unit: minute, requests_per_unit: 3, name: m}]",
        "",
      ].join("\n"),
    );
    const limit = config.getLimit("d", descriptor(["k", "a"], ["n", "b"]));
    expect(limit).toMatchObject({
      fullKey: "d.k.n",
      statsKeySuffix: "_m",
      cacheKeySuffix: "_w60",
      allOrNothing: true,
      extraLimits: [],
    });
    expect(limit?.stats.key).toBe("d.k.n_m");
  });

  it("treats a null rate_limits as absent", () => {
    expect(
      load(rule("rate_limits:")).getLimit("d", descriptor(["k", "v"])),
    ).toBeUndefined();
  });

  it("returns the frozen limit built at load on the fast path", () => {
    const config = load(list);
    const first = config.getLimit("d", descriptor(["k", "v"]));
    expect(config.getLimit("d", descriptor(["k", "w"]))).toBe(first);
    expect(config.view?.domainRules("d")?.nodes.get("k")?.limit).toBe(first);
  });

  it("derives the stats key of every entry with detailed_metric", () => {
    const config = load(
      rule(
        "detailed_metric: true",
        "metadata: {m: 1}",
        "rate_limits:",
        "  - {unit: second, requests_per_unit: 1}",
        "  - {unit: hour, requests_per_unit: 9, name: h}",
      ),
    );
    const limit = config.getLimit("d", descriptor(["k", "alice"]));
    expect(limit?.stats.key).toBe("d.k_alice_per_second");
    expect(limit?.extraLimits?.map((l) => l.stats.key)).toEqual([
      "d.k_alice_h",
    ]);
    // Like the reference's rebuilt limit, a leaf loses its metadata: every entry alike.
    expect(limit?.metadata).toBeUndefined();
    expect(limit?.extraLimits?.[0]?.metadata).toBeUndefined();
    expect(limit?.extraLimits?.[0]?.statsKeySuffix).toBe("_h");
    expect(limit?.extraLimits?.[0]?.detailedMetric).toBe(true);
  });

  it("derives the stats key of every entry with value_to_metric and share_threshold", () => {
    const config = load(
      [
        "domain: d",
        "descriptors:",
        "  - key: k",
        "    value: files*",
        "    share_threshold: true",
        "    rate_limits:",
        "      - {unit: second, requests_per_unit: 1}",
        "      - {unit: day, requests_per_unit: 9}",
        "  - key: v",
        "    value_to_metric: true",
        "    rate_limits:",
        "      - {unit: second, requests_per_unit: 1}",
        "      - {unit: day, requests_per_unit: 9}",
        "",
      ].join("\n"),
    );
    const shared = config.getLimit("d", descriptor(["k", "files/a"]));
    expect(shared?.shareThresholdValues).toEqual(["files*"]);
    expect(shared?.extraLimits?.[0]?.shareThresholdValues).toEqual(["files*"]);
    expect(shared?.stats.key).toBe("d.k_files*_per_second");
    expect(shared?.extraLimits?.[0]?.stats.key).toBe("d.k_files*_per_day");
    const valued = config.getLimit("d", descriptor(["v", "x"]));
    expect(valued?.stats.key).toBe("d.v_x_per_second");
    expect(valued?.extraLimits?.[0]?.stats.key).toBe("d.v_x_per_day");
  });

  it("keeps a rule without the new fields exactly as before", () => {
    const limit = limitOf(
      rule("rate_limit: {unit: minute, requests_per_unit: 3}"),
    );
    expect(limit).toMatchObject({
      cacheKeySuffix: "",
      statsKeySuffix: "",
      algorithm: fixedEpochWindow(60),
      extraLimits: undefined,
    });
    expect(limit.stats.key).toBe("d.k");
  });
});

describe("config: errors of the new fields", () => {
  /** [what, rule lines, message after `limits.yaml: `, line, field path, hint] */
  const cases: [string, string[], string, number, string, string | RegExp][] = [
    [
      "burst without an algorithm",
      ["rate_limit:", "  unit: second", "  requests_per_unit: 1", "  burst: 5"],
      "burst is only allowed with algorithm: token_bucket",
      7,
      "descriptors[0].rate_limit.burst",
      "add algorithm: token_bucket, or remove burst",
    ],
    [
      "burst with a window algorithm",
      [
        "rate_limit:",
        "  unit: second",
        "  algorithm: sliding_window",
        "  requests_per_unit: 1",
        "  burst: 5",
      ],
      "burst is only allowed with algorithm: token_bucket",
      8,
      "descriptors[0].rate_limit.burst",
      "algorithm sliding_window has no burst: remove burst, or use algorithm: token_bucket",
    ],
    [
      "a token bucket with requests_per_unit 0",
      [
        "rate_limit:",
        "  unit: second",
        "  algorithm: token_bucket",
        "  requests_per_unit: 0",
      ],
      "algorithm token_bucket needs requests_per_unit >= 1, got 0",
      7,
      "descriptors[0].rate_limit.requests_per_unit",
      "requests_per_unit: 0 (every hit over limit) is only allowed with a window algorithm: fixed_window or sliding_window",
    ],
    [
      "a token bucket without requests_per_unit",
      ["rate_limit:", "  unit: second", "  algorithm: token_bucket"],
      "algorithm token_bucket needs requests_per_unit >= 1, got 0",
      5,
      "descriptors[0].rate_limit.requests_per_unit",
      /^requests_per_unit: 0/,
    ],
    [
      "an unlimited token bucket",
      ["rate_limit:", "  unlimited: true", "  algorithm: token_bucket"],
      "algorithm token_bucket cannot be unlimited",
      6,
      "descriptors[0].rate_limit.algorithm",
      "remove algorithm: token_bucket, or unlimited: true",
    ],
    [
      "a token bucket faster than 10^6 per second",
      [
        "rate_limit:",
        "  unit: second",
        "  algorithm: token_bucket",
        "  requests_per_unit: 2000000",
      ],
      "token bucket rate 2000000 per 1 s is above the highest supported rate (1000000 per second)",
      7,
      "descriptors[0].rate_limit.requests_per_unit",
      "lower requests_per_unit or lengthen the window (unit, unit_multiplier)",
    ],
    [
      "a token bucket holding more than 2^51 µs",
      [
        "rate_limit:",
        "  unit: year",
        "  algorithm: token_bucket",
        "  requests_per_unit: 1",
        "  burst: 100000",
      ],
      "token bucket burst 100000 × emission interval 31536000000000 µs is longer than 2251799813685248 µs (about 71 years)",
      8,
      "descriptors[0].rate_limit.burst",
      /^lower burst/,
    ],
    [
      "time_zone with a unit that is not a calendar unit",
      [
        "rate_limit:",
        "  unit: minute",
        "  requests_per_unit: 1",
        "  time_zone: UTC",
      ],
      "time_zone needs a calendar unit, not 'minute'",
      5,
      "descriptors[0].rate_limit.unit",
      "a time zone applies to units day, week, month, year; remove time_zone for a window aligned to the Unix epoch",
    ],
    [
      "an unknown time zone",
      [
        "rate_limit:",
        "  unit: day",
        "  requests_per_unit: 1",
        "  time_zone: berlin",
      ],
      "invalid time zone 'berlin'",
      7,
      "descriptors[0].rate_limit.time_zone",
      /^did you mean 'Europe\/Berlin'\? time_zone takes an IANA time zone name/,
    ],
    [
      "a UTC offset as time zone",
      [
        "rate_limit:",
        "  unit: day",
        "  requests_per_unit: 1",
        '  time_zone: "+05:30"',
      ],
      "invalid time zone '+05:30': a UTC offset, not a zone name",
      7,
      "descriptors[0].rate_limit.time_zone",
      /Etc\/GMT-5/,
    ],
    [
      "time_zone with a sliding window",
      [
        "rate_limit:",
        "  unit: day",
        "  requests_per_unit: 1",
        "  algorithm: sliding_window",
        "  time_zone: UTC",
      ],
      "time_zone cannot be used with algorithm sliding_window",
      8,
      "descriptors[0].rate_limit.time_zone",
      "calendar windows are fixed windows: remove time_zone, or algorithm: sliding_window",
    ],
    [
      "time_zone with a token bucket",
      [
        "rate_limit:",
        "  unit: day",
        "  requests_per_unit: 1",
        "  algorithm: token_bucket",
        "  time_zone: UTC",
      ],
      "time_zone cannot be used with algorithm token_bucket",
      8,
      "descriptors[0].rate_limit.time_zone",
      "a token bucket has no windows: remove time_zone, or algorithm: token_bucket",
    ],
    [
      "time_zone with unit_multiplier",
      [
        "rate_limit:",
        "  unit: day",
        "  unit_multiplier: 2",
        "  requests_per_unit: 1",
        "  time_zone: UTC",
      ],
      "time_zone cannot be used with unit_multiplier 2",
      6,
      "descriptors[0].rate_limit.unit_multiplier",
      "a calendar window is one local day, week, month or year: remove unit_multiplier, or time_zone",
    ],
    [
      "time_zone with unlimited",
      ["rate_limit:", "  unlimited: true", "  time_zone: UTC"],
      "time_zone is not allowed with unlimited",
      6,
      "descriptors[0].rate_limit.time_zone",
      "an unlimited rule has no window: remove time_zone",
    ],
    [
      "week_start without time_zone",
      [
        "rate_limit:",
        "  unit: week",
        "  requests_per_unit: 1",
        "  week_start: sunday",
      ],
      "week_start needs time_zone",
      7,
      "descriptors[0].rate_limit.week_start",
      "week_start is the first day of a calendar week: add time_zone (with unit: week), or remove week_start",
    ],
    [
      "week_start with a month",
      [
        "rate_limit:",
        "  unit: month",
        "  requests_per_unit: 1",
        "  time_zone: UTC",
        "  week_start: sunday",
      ],
      "week_start only applies to unit WEEK, not MONTH",
      8,
      "descriptors[0].rate_limit.week_start",
      "remove week_start, or use unit: week",
    ],
    [
      "an unknown week start",
      [
        "rate_limit:",
        "  unit: week",
        "  requests_per_unit: 1",
        "  time_zone: UTC",
        "  week_start: sun",
      ],
      "invalid week start 'sun'",
      8,
      "descriptors[0].rate_limit.week_start",
      "valid week starts: monday, tuesday, wednesday, thursday, friday, saturday, sunday",
    ],
    [
      "rate_limit and rate_limits together",
      [
        "rate_limit: {unit: second, requests_per_unit: 1}",
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
      ],
      "rate_limit and rate_limits cannot both be set",
      6,
      "descriptors[0].rate_limits",
      "a rule has one rate_limit: block or a rate_limits: list; move the rate_limit block into the list",
    ],
    [
      "an empty list",
      ["rate_limits: []"],
      "rate_limits is empty",
      4,
      "descriptors[0].rate_limits",
      "list one or more rate limits, or remove rate_limits",
    ],
    [
      "unlimited in a list",
      [
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
        "  - unlimited: true",
      ],
      "unlimited is not allowed in rate_limits",
      6,
      "descriptors[0].rate_limits[1].unlimited",
      "an unlimited rule has no other limit: use rate_limit: with unlimited: true",
    ],
    [
      "replaces in a list",
      [
        "rate_limits:",
        "  - unit: minute",
        "    requests_per_unit: 1",
        "    replaces:",
        "      - name: other",
      ],
      "replaces is not allowed in rate_limits",
      8,
      "descriptors[0].rate_limits[0].replaces",
      "use rate_limit: for a limit that replaces others (another rule may still replace a list entry by its name)",
    ],
    [
      "a bad entry later in a list",
      [
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
        "  - unit: hour",
        "    requests_per_unit: 1",
        "    burst: 2",
      ],
      "burst is only allowed with algorithm: token_bucket",
      8,
      "descriptors[0].rate_limits[1].burst",
      "add algorithm: token_bucket, or remove burst",
    ],
    [
      "an invalid unit in a list",
      [
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
        "  - {unit: fortnight}",
      ],
      "invalid rate limit unit 'fortnight'",
      6,
      "descriptors[0].rate_limits[1].unit",
      "valid units: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (any case)",
    ],
    [
      "two fixed windows of one length",
      [
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
        "  - {unit: hour, requests_per_unit: 5}",
        "  - {unit: minute, requests_per_unit: 2, name: other}",
      ],
      "rate_limits[0] and rate_limits[2] would share one counter (the same fixed window of 60 s)",
      7,
      "descriptors[0].rate_limits[2]",
      /^the limits of one rule need different windows/,
    ],
    [
      "a fixed window equal to another's multiple",
      [
        "rate_limits:",
        "  - {unit: minute, unit_multiplier: 60, requests_per_unit: 1}",
        "  - {unit: hour, requests_per_unit: 5}",
      ],
      "rate_limits[0] and rate_limits[1] would share one counter (the same fixed window of 3600 s)",
      6,
      "descriptors[0].rate_limits[1]",
      /^the limits of one rule need different windows/,
    ],
    [
      "two equal token buckets",
      [
        "rate_limits:",
        "  - {unit: second, requests_per_unit: 5, algorithm: token_bucket, name: a}",
        "  - {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 5, name: b}",
      ],
      "rate_limits[0] and rate_limits[1] would share one counter (the same token bucket: 5 per 1 s, burst 5)",
      6,
      "descriptors[0].rate_limits[1]",
      /^the limits of one rule need different windows/,
    ],
    [
      "two equal calendar weeks",
      [
        "rate_limits:",
        "  - {unit: week, requests_per_unit: 5, time_zone: utc, week_start: sunday, name: a}",
        "  - {unit: week, requests_per_unit: 9, time_zone: UTC, week_start: Sunday, name: b}",
      ],
      "rate_limits[0] and rate_limits[1] would share one counter (the same calendar week in UTC, starting sunday)",
      6,
      "descriptors[0].rate_limits[1]",
      /^the limits of one rule need different windows/,
    ],
    [
      "two entries with one stats key",
      [
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
        "  - {unit: minute, requests_per_unit: 5, algorithm: sliding_window}",
      ],
      "rate_limits[0] and rate_limits[1] have the same stats key 'd.k_per_minute'",
      6,
      "descriptors[0].rate_limits[1]",
      "give one of them a (different) name: its stats key becomes d.k_<name>",
    ],
    [
      "a name equal to another entry's stats suffix",
      [
        "rate_limits:",
        "  - {unit: minute, requests_per_unit: 1}",
        "  - unit: hour",
        "    requests_per_unit: 5",
        "    name: per_minute",
      ],
      "rate_limits[0] and rate_limits[1] have the same stats key 'd.k_per_minute'",
      8,
      "descriptors[0].rate_limits[1].name",
      "give one of them a (different) name: its stats key becomes d.k_<name>",
    ],
  ];

  it.each(cases)(
    "refuses %s, with line, field path and hint",
    (_, lines, message, line, fieldPath, hint) => {
      const error = loadError(rule(...lines));
      expect(error.message).toBe(`limits.yaml: ${message}`);
      expect(error.file).toBe("limits.yaml");
      expect(error.line).toBe(line);
      expect(error.fieldPath).toBe(fieldPath);
      if (typeof hint === "string") expect(error.hint).toBe(hint);
      else expect(error.hint).toMatch(hint);
    },
  );

  it("names the field path of a nested rule's list", () => {
    const error = loadError(
      [
        "domain: d",
        "descriptors:",
        "  - key: a",
        "    descriptors:",
        "      - key: b",
        "        rate_limits:",
        "          - unit: second",
        "            requests_per_unit: 1",
        "          - unit: day",
        "            requests_per_unit: 1",
        "            week_start: friday",
        "",
      ].join("\n"),
    );
    expect(error.detail).toBe(
      "limits.yaml: week_start needs time_zone (week_start is the first day of a calendar week: add time_zone (with unit: week), or remove week_start); " +
        "line 11, field descriptors[0].descriptors[0].rate_limits[1].week_start",
    );
  });

  it.each([
    ["burst: 0", "invalid burst '0' (expected an integer >= 1)"],
    ["burst: -1", "invalid burst '-1' (expected an integer >= 1)"],
    ["burst: 1.5", "invalid burst '1.5' (expected an integer >= 1)"],
    ["burst: many", "invalid burst 'many' (expected an integer >= 1)"],
    [
      "burst: 4294967296",
      "invalid burst '4294967296' (expected an integer >= 1)",
    ],
  ])("refuses %s when decoding, naming its line", (field, problem) => {
    const error = loadError(
      rule(
        "rate_limits:",
        "  - unit: second",
        "    algorithm: token_bucket",
        `    ${field}`,
      ),
    );
    expect(error.message).toBe(`limits.yaml: config error, line 7: ${problem}`);
    expect(error.line).toBe(7);
    expect(error.fieldPath).toBe("descriptors[0].rate_limits[0].burst");
  });

  it("refuses a rate_limits that is not a list", () => {
    const error = loadError(rule("rate_limits: {unit: second}"));
    expect(error.message).toBe(
      "limits.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: cannot unmarshal !!map into []config.YamlRateLimit",
    );
    expect(error.fieldPath).toBe("descriptors[0].rate_limits");
  });

  it("refuses a time_zone that is not a string", () => {
    const error = loadError(
      rule("rate_limit:", "  unit: day", "  time_zone: {name: UTC}"),
    );
    expect(error.message).toMatch(
      /line 6: cannot unmarshal !!map into string$/,
    );
    expect(error.fieldPath).toBe("descriptors[0].rate_limit.time_zone");
  });

  it.each([
    ["rate_limts", "rate_limits"],
    ["brust", "burst"],
    ["time_zon", "time_zone"],
    ["weekstart", "week_start"],
  ])("suggests the nearest key for %s", (typo, key) => {
    const error = loadError(rule("rate_limit:", "  unit: day", `  ${typo}: x`));
    expect(error.message).toBe(
      `limits.yaml: config error, unknown key '${typo}'`,
    );
    expect(error.hint).toBe(`did you mean '${key}'?`);
    expect(error.line).toBe(6);
    expect(error.fieldPath).toBe(`descriptors[0].rate_limit.${typo}`);
  });

  it("still suggests rate_limit for a typo of it", () => {
    const error = loadError(rule("rate_limt: {unit: day}"));
    expect(error.hint).toBe("did you mean 'rate_limit'?");
  });
});
