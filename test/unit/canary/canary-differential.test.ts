import { afterEach, describe, expect, it } from "vitest";
import { RateLimitResponse_Code as Code } from "../../../src/proto.js";
import { mulberry32 } from "../../helpers/seeded-random.js";
import {
  startCanaryHarness,
  yaml,
  type Harness,
  type HarnessOptions,
} from "./canary-harness.js";
import { request, type DescriptorSpec } from "../../helpers/requests.js";

// The canary's report against the truth: service A runs the live config with the candidate as
// its canary, service B runs the candidate as its live config; the same seeded requests go to
// both at the same (fake) times. Every request whose overall code differs between A and B must
// be in A's report, under the rule of the descriptor that decides it, and nothing else. One rule
// per top-level key, so the rule of a descriptor is `rl.<its first key>`.

const liveRules = [
  // a: fixed window, limit lowered (shared counter).
  "  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n",
  // b: sliding window, limit raised (shared counters, previous window too).
  "  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: sliding_window }\n",
  // c: token bucket, burst changed (another cache key: the candidate's own bucket).
  "  - key: c\n    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 3 }\n",
  // e: shadow mode in the live config only.
  "  - key: e\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n    shadow_mode: true\n",
  // f: unlimited in the candidate.
  "  - key: f\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
  // g: minute → second (another window: the candidate's own counter).
  "  - key: g\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  // h: the same in both.
  "  - key: h\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  // i: a token bucket the same in both (shared bucket).
  "  - key: i\n    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: token_bucket, burst: 2 }\n",
  // j: named, and replaced in the candidate by k's rule.
  "  - key: j\n    rate_limit: { name: jlimit, unit: minute, requests_per_unit: 2 }\n",
  "  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 50 }\n",
  // m: several limits per descriptor, the second one lowered.
  "  - key: m\n    rate_limits:\n      - { unit: second, requests_per_unit: 3 }\n      - { unit: minute, requests_per_unit: 8 }\n",
  // q: a quota rule (over only when every quota descriptor of the request is), lowered.
  "  - key: q\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n    quota_mode: true\n",
].join("");

const candidateRules = [
  "  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  "  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: sliding_window }\n",
  "  - key: c\n    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 2 }\n",
  // d: a new rule.
  "  - key: d\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
  "  - key: e\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
  "  - key: f\n    rate_limit: { unlimited: true }\n",
  "  - key: g\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
  "  - key: h\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  "  - key: i\n    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: token_bucket, burst: 2 }\n",
  "  - key: j\n    rate_limit: { name: jlimit, unit: minute, requests_per_unit: 2 }\n",
  "  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 50, replaces: [{ name: jlimit }] }\n",
  "  - key: m\n    rate_limits:\n      - { unit: second, requests_per_unit: 3 }\n      - { unit: minute, requests_per_unit: 5 }\n",
  "  - key: q\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n    quota_mode: true\n",
].join("");

// The same rule tree in both, only limits and modes changed: the candidate's rules are found
// by their place in the live tree (no lookup).
const sameShapeLive = [
  "  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n",
  "  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: sliding_window }\n",
  "  - key: e\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n    shadow_mode: true\n",
  "  - key: f\n    rate_limit: { unlimited: true }\n",
  "  - key: h\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  "  - key: q\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n    quota_mode: true\n",
  "  - key: s\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
].join("");
const sameShapeCandidate = [
  "  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  "  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: sliding_window }\n",
  "  - key: e\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
  "  - key: f\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
  "  - key: h\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n",
  "  - key: q\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n    quota_mode: true\n",
  "  - key: s\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n    shadow_mode: true\n",
].join("");

/** Pairs of live and candidate rules, and the keys the requests use. */
const pairs: Record<
  string,
  { live: string; candidate: string; keys: readonly string[] }
> = {
  reshaped: {
    live: liveRules,
    candidate: candidateRules,
    keys: ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "q"],
  },
  "same shape": {
    live: sameShapeLive,
    candidate: sameShapeCandidate,
    keys: ["a", "b", "e", "f", "h", "q", "s"],
  },
};

let harnesses: Harness[] = [];
afterEach(async () => {
  await Promise.all(harnesses.map((h) => h.close()));
  harnesses = [];
});

/**
 * Rule of the descriptor that makes a request over limit, as the report names it: the first
 * over-limit one that is not `q` (the quota rule), else the first `q` (all of them are over).
 */
function decidingRule(
  statuses: readonly { code: Code }[],
  descriptors: readonly string[],
): string {
  const keyOf = (i: number): string => descriptors[i]?.split("=")[0] ?? "?";
  let i = statuses.findIndex(
    (s, j) => s.code === Code.OVER_LIMIT && keyOf(j) !== "q",
  );
  if (i < 0) i = statuses.findIndex((s) => s.code === Code.OVER_LIMIT);
  return `rl.${keyOf(i)}`;
}

const modes: Record<string, HarnessOptions> = {
  "charge each": {},
  "charge all_or_nothing": { chargeMode: "all_or_nothing" },
  "stop-increment": { stopIncrement: true },
  "local cache": { localCache: true },
};

describe("config canary against a service running the candidate", () => {
  it.each(
    Object.keys(pairs).flatMap((pair) =>
      Object.keys(modes).flatMap((mode) =>
        [1, 2, 3].map((seed) => [pair, mode, seed] as const),
      ),
    ),
  )(
    "reports exactly the requests answered differently (%s rules, %s, seed %i)",
    async (pair, mode, seed) => {
      const start = 1_700_000_000;
      const options = { ...modes[mode], nowSeconds: start };
      const { live, candidate, keys } = pairs[pair]!;
      const a = startCanaryHarness({ "rl.yaml": yaml("rl", live) }, options);
      const b = startCanaryHarness(
        { "rl.yaml": yaml("rl", candidate) },
        options,
      );
      harnesses = [a, b];
      await a.canary.start({
        files: [{ name: "rl.yaml", text: yaml("rl", candidate) }],
      });
      const random = mulberry32(seed);
      const pick = <T>(list: readonly T[]): T =>
        list[Math.floor(random() * list.length)]!;
      const expected = new Map<string, { refuse: number; admit: number }>();
      let changed = 0;
      const requests = 1500;
      for (let n = 0; n < requests; n++) {
        if (random() < 0.15) {
          const step = 1 + Math.floor(random() * 4);
          a.clock.seconds += step;
          b.clock.seconds += step;
        }
        const count = 1 + Math.floor(random() * 3);
        const descriptors: string[] = [];
        for (let d = 0; d < count; d++) {
          const key = pick(keys);
          // Some descriptors add 2 hits; a few give 1 back (a refund).
          const draw = random();
          const hits = draw < 0.2 ? "*2" : draw < 0.25 ? "*-1" : "";
          descriptors.push(`${key}=v${Math.floor(random() * 3)}${hits}`);
        }
        const [ra, rb] = await Promise.all([
          a.service.shouldRateLimit(request("rl", ...descriptors.map(parsed))),
          b.service.shouldRateLimit(request("rl", ...descriptors.map(parsed))),
        ]);
        if (ra.overallCode === rb.overallCode) continue;
        changed++;
        const refuse = rb.overallCode === Code.OVER_LIMIT;
        const rule = decidingRule(
          refuse ? rb.statuses : ra.statuses,
          descriptors,
        );
        const tally = expected.get(rule) ?? { refuse: 0, admit: 0 };
        if (refuse) tally.refuse++;
        else tally.admit++;
        expected.set(rule, tally);
      }
      const report = await a.canary.report();
      expect(report.requests).toBe(BigInt(requests));
      expect(report.unevaluatedRequests).toBe(0n);
      expect(report.changedRequests).toBe(BigInt(changed));
      // A `rate_limits:` list's limits are reported under their own stats keys: added up.
      const got = new Map<string, { refuse: number; admit: number }>();
      for (const r of report.rules) {
        const rule = r.rule.replace(/_per_(second|minute)$/, "");
        const tally = got.get(rule) ?? { refuse: 0, admit: 0 };
        tally.refuse += Number(r.wouldRefuse);
        tally.admit += Number(r.wouldAdmit);
        got.set(rule, tally);
      }
      expect(Object.fromEntries(got)).toEqual(Object.fromEntries(expected));
      // The seeds exercise both directions on several rules.
      expect(changed).toBeGreaterThan(50);
      expect([...expected.values()].some((t) => t.admit > 0)).toBe(true);
      expect([...expected.values()].some((t) => t.refuse > 0)).toBe(true);
    },
  );
});

/** `key=value`, `key=value*2` (2 hits) or `key=value*-1` (a refund of 1) as a descriptor. */
function parsed(text: string): DescriptorSpec {
  const [pair = "", hits] = text.split("*");
  const [key = "", value = ""] = pair.split("=");
  if (hits === undefined) return { entries: [[key, value]] };
  return {
    entries: [[key, value]],
    hits: Math.abs(Number(hits)),
    isNegativeHits: Number(hits) < 0,
  };
}
