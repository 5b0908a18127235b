import { afterEach, describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import { RateLimitResponse_Code as Code } from "../../../src/proto.js";
import {
  countOf,
  startCanaryHarness,
  yaml,
  type Harness,
} from "./canary-harness.js";

// Times are 40 s into a minute (1_700_000_040): the minute window starts at 1_700_000_040 - 0
// (1_700_000_040 is a multiple of 60), the hour window at 1_699_999_200.
const minuteStart = 1_700_000_040;

const user = (rpu: number, unit = "minute", extra = ""): string =>
  `  - key: user\n    rate_limit: { unit: ${unit}, requests_per_unit: ${rpu}${extra} }\n`;

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function sendTimes(
  harness: Harness,
  n: number,
  ...descriptors: string[]
): Promise<Code[]> {
  const codes: Code[] = [];
  for (let i = 0; i < n; i++)
    codes.push(await harness.send("rl", ...descriptors));
  return codes;
}

describe("config canary", () => {
  it("reads a counter the live rule shares, never charging it twice", async () => {
    h = startCanaryHarness({ "rl.yaml": yaml("rl", user(10)) });
    await h.canary.start({
      files: [{ name: "c.yaml", text: yaml("rl", user(5)) }],
    });
    const codes = await sendTimes(h, 8, "user=alice");
    expect(codes.every((c) => c === Code.OK)).toBe(true);
    expect(await h.changes()).toEqual({ "rl.user": "+3 -0" });
    const key = `rl_user_alice_${minuteStart}`;
    expect(countOf(h.live, key)).toBe(8);
    // The candidate read the live counter: its own store holds no extra for it.
    expect(h.own()?.extra(key)).toBe(0);
    const report = await h.report();
    expect(report.requests).toBe(8n);
    expect(report.changedRequests).toBe(3n);
    expect(report.rules[0]?.top).toMatchObject([
      { descriptor: "user=alice", hits: 3n, overLimit: 3n, error: 0n },
    ]);
  });

  it("reports requests the candidate would admit where the live limit refuses", async () => {
    h = startCanaryHarness({ "rl.yaml": yaml("rl", user(3)) });
    await h.canary.start({
      files: [{ name: "c.yaml", text: yaml("rl", user(5)) }],
    });
    const codes = await sendTimes(h, 7, "user=bob");
    expect(codes.filter((c) => c === Code.OVER_LIMIT)).toHaveLength(4);
    // Requests 4 and 5 fit 5; 6 and 7 are over both.
    expect(await h.changes()).toEqual({ "rl.user": "+0 -2" });
    expect(countOf(h.live, `rl_user_bob_${minuteStart}`)).toBe(7);
  });

  it("counts a new rule's hits in its own store only", async () => {
    h = startCanaryHarness({ "rl.yaml": yaml("rl", user(100)) });
    await h.canary.start({
      files: [
        {
          name: "c.yaml",
          text: yaml(
            "rl",
            user(100) +
              "  - key: path\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
          ),
        },
      ],
    });
    await sendTimes(h, 5, "user=u", "path=/x");
    expect(await h.changes()).toEqual({ "rl.path": "+3 -0" });
    const pathKey = `rl_path_/x_${minuteStart}`;
    expect(countOf(h.live, pathKey)).toBe(0);
    expect(h.own()?.count(pathKey)).toBe(5);
    // The shared key stays in the live store only.
    const userKey = `rl_user_u_${minuteStart}`;
    expect(countOf(h.live, userKey)).toBe(5);
    expect(h.own()?.extra(userKey)).toBe(0);
  });

  it("gives a changed window its own counter (minute → hour)", async () => {
    h = startCanaryHarness(
      { "rl.yaml": yaml("rl", user(3)) },
      { nowSeconds: minuteStart + 30 },
    );
    await h.canary.start({
      files: [{ name: "c.yaml", text: yaml("rl", user(4, "hour")) }],
    });
    await sendTimes(h, 3, "user=a");
    // The next minute: the live counter starts again, the candidate's hour keeps counting.
    h.clock.seconds += 60;
    const codes = await sendTimes(h, 3, "user=a");
    expect(codes).toEqual([Code.OK, Code.OK, Code.OK]);
    expect(await h.changes()).toEqual({ "rl.user": "+2 -0" });
    expect(h.own()?.count("rl_user_a_1699999200")).toBe(6);
  });

  it("keeps a window of another length apart where its key equals the live one's (minute → second at a minute's start)", async () => {
    // At a multiple of 60 the second's window and the minute's window start together: the
    // same cache key, two counters.
    h = startCanaryHarness(
      { "rl.yaml": yaml("rl", user(10)) },
      { nowSeconds: minuteStart },
    );
    await h.canary.start({
      files: [{ name: "c.yaml", text: yaml("rl", user(2, "second")) }],
    });
    const codes = await sendTimes(h, 6, "user=m");
    expect(codes.every((c) => c === Code.OK)).toBe(true);
    // Requests 3 to 6 are over 2 per second.
    expect(await h.changes()).toEqual({ "rl.user": "+4 -0" });
    const key = `rl_user_m_${minuteStart}`;
    expect(countOf(h.live, key)).toBe(6);
    expect(h.own()?.count(key)).toBe(6);
    // The next second: the candidate's counter starts again; the live minute keeps counting.
    h.clock.seconds += 1;
    await sendTimes(h, 3, "user=m");
    expect(await h.changes()).toEqual({ "rl.user": "+5 -0" });
  });

  it("skips domains whose rules did not change and evaluates nothing for them", async () => {
    h = startCanaryHarness({
      "rl.yaml": yaml("rl", user(1)),
      "other.yaml": yaml("other", user(1)),
    });
    await h.canary.start({
      files: [
        { name: "rl.yaml", text: yaml("rl", user(1)) },
        { name: "other.yaml", text: yaml("other", user(50)) },
      ],
    });
    await sendTimes(h, 3, "user=x");
    for (let i = 0; i < 3; i++) await h.send("other", "user=x");
    const report = await h.report();
    expect(report.requests).toBe(6n);
    expect(report.changedRequests).toBe(2n);
    expect(report.rules.map((r) => [r.rule, r.wouldAdmit])).toEqual([
      ["other.user", 2n],
    ]);
    expect(report.unevaluatedRequests).toBe(0n);
  });

  it("leaves answers, live counters and live statistics as without a canary", async () => {
    const runs: { codes: Code[]; stats: Record<string, number> }[] = [];
    for (const withCanary of [false, true]) {
      const harness = startCanaryHarness({ "rl.yaml": yaml("rl", user(4)) });
      if (withCanary)
        await harness.canary.start({
          files: [
            {
              name: "c.yaml",
              text: yaml(
                "rl",
                user(2) +
                  "  - key: path\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
              ),
            },
          ],
        });
      const codes = await sendTimes(harness, 6, "user=z", "path=/p");
      await harness.report();
      const stats = Object.fromEntries(
        harness.liveStats.snapshot().counters.map((c) => [c.name, c.value()]),
      );
      runs.push({ codes, stats });
      await harness.close();
    }
    expect(runs[1]).toEqual(runs[0]);
  });

  it("refuses a bad candidate with the loader's error and keeps the running canary", async () => {
    h = startCanaryHarness({ "rl.yaml": yaml("rl", user(10)) });
    await h.canary.start({
      files: [{ name: "good.yaml", text: yaml("rl", user(5)) }],
    });
    const bad = yaml(
      "rl",
      "  - key: user\n    rate_limit: { unit: minute, requets_per_unit: 5 }\n",
    );
    const error = await h.canary
      .start({ files: [{ name: "bad.yaml", text: bad }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    const configError = error as ConfigError;
    expect(configError.file).toBe("bad.yaml");
    expect(configError.line).toBe(4);
    expect(configError.fieldPath).toBe(
      "descriptors[0].rate_limit.requets_per_unit",
    );
    await sendTimes(h, 6, "user=q");
    expect(await h.changes()).toEqual({ "rl.user": "+1 -0" });
    expect((await h.report()).source).toBe("inline");
  });

  it("stops: no more evaluations, the last report kept", async () => {
    h = startCanaryHarness({ "rl.yaml": yaml("rl", user(10)) });
    await h.canary.start({
      files: [{ name: "c.yaml", text: yaml("rl", user(1)) }],
    });
    await sendTimes(h, 3, "user=s");
    const last = await h.canary.stop();
    expect(last?.active).toBe(false);
    expect(last?.changedRequests).toBe(2n);
    await sendTimes(h, 3, "user=s");
    const after = await h.report();
    expect(after.active).toBe(false);
    expect(after.requests).toBe(3n);
    expect(await h.canary.stop()).toBeUndefined();
  });
});
