// examples/envoy/rlqs.yaml against a logging fake RLQS server (test/helpers/rlqs-fake.ts), so
// the Envoy side of RLQS is checked on its own: a request with `x-tenant: a` subscribes the
// Envoy to the bucket {tenant: a} (a report arrives), a request without the header matches no
// bucket, a pushed token bucket of N tokens per second is enforced by Envoy 1.40, and its
// refill is continuous (max_tokens bounds the burst, not the rate).

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startUpstream, type Upstream } from "../helpers/envoy.js";
import { runHttpLoad } from "../helpers/http-load.js";
import {
  rlqsExamplePath,
  startRlqsEnvoy,
  type RlqsEnvoy,
} from "../helpers/rlqs-envoy.js";
import { startRlqsFake, type RlqsFake } from "../helpers/rlqs-fake.js";
import { repoRoot } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

let fake: RlqsFake;
let upstream: Upstream;
let envoy: RlqsEnvoy;

beforeAll(async () => {
  fake = await startRlqsFake();
  upstream = await startUpstream();
  envoy = await startRlqsEnvoy(
    { host: "127.0.0.1", port: fake.port },
    { host: "127.0.0.1", port: upstream.port },
  );
}, 60_000);

afterAll(async () => {
  await envoy.stop();
  await upstream.stop();
  await fake.stop();
});

describe("examples/envoy/rlqs.yaml on Envoy 1.40 (fake RLQS server)", () => {
  it("is shown verbatim in docs/rlqs.md", () => {
    const doc = readFileSync(join(repoRoot, "docs", "rlqs.md"), "utf8");
    expect(doc).toContain("```yaml\n" + readFileSync(rlqsExamplePath, "utf8"));
  });

  it("subscribes to {tenant: a} on the first request with x-tenant: a", async () => {
    const res = await fetch(`${envoy.url}/`, { headers: { "x-tenant": "a" } });
    expect(res.status).toBe(200);
    await res.text();
    const report = await waitFor(
      () =>
        fake.reports.find((r) =>
          r.usages.some((u) => u.bucketId["tenant"] === "a"),
        ),
      "a usage report for {tenant: a}",
      10_000,
    );
    expect(report.domain).toBe("rlqs");
    expect(report.usages.map((u) => u.bucketId)).toEqual([{ tenant: "a" }]);
  });

  it("lets a request without x-tenant through without a bucket", async () => {
    const res = await fetch(`${envoy.url}/`);
    expect(res.status).toBe(200);
    await res.text();
    for (const r of fake.reports)
      for (const u of r.usages) expect(u.bucketId).toEqual({ tenant: "a" });
  });

  it("enforces a pushed token bucket of 20 per second", async () => {
    const n = 20;
    fake.assign(
      { tenant: "a" },
      {
        tokenBucket: { maxTokens: n, tokensPerFill: n, fillIntervalSeconds: 1 },
      },
      60,
    );
    const { seconds, firstError } = await runHttpLoad({
      url: `${envoy.url}/`,
      headers: { "x-tenant": "a" },
      schedule: [{ seconds: 6, rate: 3 * n }],
    });
    process.stdout.write(
      `rlqs fake, token bucket ${n}/s, 60/s offered: ${seconds
        .map((s) => `${s.ok}/${s.limited}`)
        .join(" ")} (200/429 per second)\n`,
    );
    expect(firstError).toBeUndefined();
    for (const s of seconds) expect(s.other).toBe(0);
    // The first second may also spend the initial burst (max_tokens); after it, ±1 per second.
    const steady = seconds.slice(1);
    for (const s of steady) {
      expect(s.ok).toBeGreaterThanOrEqual(n - 2);
      expect(s.ok).toBeLessThanOrEqual(n + 2);
    }
    const ok = steady.reduce((sum, s) => sum + s.ok, 0);
    expect(Math.abs(ok - n * steady.length)).toBeLessThanOrEqual(3);
    // Envoy reports what it allowed and denied (every 5 s, whatever reporting_interval says).
    const report = await waitFor(
      () =>
        fake.reports.find((r) =>
          r.usages.some((u) => u.allowed > 0 && u.denied > 0),
        ),
      "a report with allowed and denied requests",
      10_000,
    );
    expect(report.domain).toBe("rlqs");
  }, 30_000);

  it("refills at tokens_per_fill / fill_interval continuously: max_tokens is only the burst", async () => {
    // 20 per second with a burst of 4, then 60 per 3 s (also 20 per second) with a burst of 10.
    const cases = [
      { maxTokens: 4, tokensPerFill: 20, fillIntervalSeconds: 1 },
      { maxTokens: 10, tokensPerFill: 60, fillIntervalSeconds: 3 },
    ];
    const lines: string[] = [];
    for (const tokenBucket of cases) {
      fake.assign({ tenant: "a" }, { tokenBucket }, 60);
      // Idle long enough for the bucket to be full.
      await new Promise((r) => setTimeout(r, 1500));
      const { seconds } = await runHttpLoad({
        url: `${envoy.url}/`,
        headers: { "x-tenant": "a" },
        schedule: [{ seconds: 4, rate: 60 }],
      });
      lines.push(
        `${JSON.stringify(tokenBucket)}: ${seconds.map((s) => `${s.ok}/${s.limited}`).join(" ")}`,
      );
      // The first second: the burst plus the rate; then the rate alone.
      expect(seconds[0]!.ok).toBeLessThanOrEqual(
        20 + tokenBucket.maxTokens + 1,
      );
      for (const s of seconds.slice(1)) {
        expect(s.ok).toBeGreaterThanOrEqual(18);
        expect(s.ok).toBeLessThanOrEqual(22);
      }
    }
    process.stdout.write(`rlqs fake, small bursts:\n${lines.join("\n")}\n`);
  }, 30_000);
});
