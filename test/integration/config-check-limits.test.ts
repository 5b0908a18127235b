// ratelimit-config-check with the limits of issue 23 (token_bucket, time_zone, week_start,
// rate_limits): it validates with the service's loader, so a good config passes and every
// error is printed with its hint, line and field path.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { runConfigCheck } from "../../src/cli/config-check.js";

/** Runs the check and returns its exit code with every printed line. */
function check(argv: readonly string[]): { code: number; lines: string[] } {
  const lines: string[] = [];
  const code = runConfigCheck(argv, (line) => lines.push(line));
  return { code, lines };
}

const good = `domain: api
descriptors:
  - key: user
    rate_limits:
      - unit: second
        requests_per_unit: 10
      - unit: minute
        requests_per_unit: 100
        algorithm: token_bucket
        burst: 20
      - unit: month
        requests_per_unit: 10000
        time_zone: Europe/Berlin
  - key: team
    rate_limit:
      unit: week
      requests_per_unit: 700
      time_zone: America/New_York
      week_start: sunday
`;

describe("runConfigCheck: token buckets, calendar windows and rate_limits", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "rls-config-check-limits-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("accepts a config using every new field", async () => {
    await writeFile(join(dir, "api.yaml"), good);
    const { code, lines } = check(["-config_dir", dir]);
    expect(lines.at(-1)).toBe("all rate limit configs ok");
    expect(code).toBe(0);
  });

  it("explains a request offline against a rate_limits rule", async () => {
    await writeFile(join(dir, "api.yaml"), good);
    const { code } = check(["-config_dir", dir, "-explain", "api:user=alice"]);
    expect(code).toBe(0);
  });

  it.each([
    [
      "burst without a token bucket",
      "      - unit: hour\n        requests_per_unit: 5\n        burst: 3\n",
      "burst is only allowed with algorithm: token_bucket (add algorithm: token_bucket, or remove burst); line 9, field descriptors[0].rate_limits[1].burst",
    ],
    [
      "two limits on one counter",
      "      - unit: second\n        requests_per_unit: 50\n        name: burst\n",
      "rate_limits[0] and rate_limits[1] would share one counter (the same fixed window of 1 s) (the limits of one rule need different windows, algorithms, token buckets or calendars; remove one or change its unit, unit_multiplier, algorithm, burst or time_zone); line 7, field descriptors[0].rate_limits[1]",
    ],
    [
      "an unknown time zone",
      "      - unit: day\n        requests_per_unit: 5\n        time_zone: Europe/Berln\n",
      "invalid time zone 'Europe/Berln' (time_zone takes an IANA time zone name such as Europe/Berlin, America/New_York or UTC; list the names this Node knows with: node -p \"Intl.supportedValuesOf('timeZone').join('\\n')\"); line 9, field descriptors[0].rate_limits[1].time_zone",
    ],
    [
      "a misspelt key",
      "      - unit: day\n        requests_per_unit: 5\n        time_zome: UTC\n",
      "config error, unknown key 'time_zome' (did you mean 'time_zone'?); line 9, field descriptors[0].rate_limits[1].time_zome",
    ],
  ])("rejects %s with hint, line and field path", async (_, entry, detail) => {
    const path = join(dir, "bad.yaml");
    await writeFile(
      path,
      "domain: api\ndescriptors:\n  - key: user\n    rate_limits:\n      - unit: second\n        requests_per_unit: 10\n" +
        entry,
    );
    const { code, lines } = check(["-config_dir", dir]);
    expect(code).toBe(1);
    expect(lines.at(-1)).toBe(
      `error loading rate limit configs: ${path}: ${detail}`,
    );
  });
});
