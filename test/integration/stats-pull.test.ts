import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import parsePrometheusTextFormat, {
  type PrometheusMetricFamily,
} from "parse-prometheus-text-format";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RateLimitService } from "../../src/proto.js";
import { SettingsError } from "../../src/settings/settings-error.js";
import { loadSettings } from "../../src/settings/settings.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort } from "../helpers/spawn-service.js";
import { request } from "../helpers/requests.js";

const config = `
domain: rl
descriptors:
  - key: key
    value: value
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: user
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 100 }
`;

async function drive(t: TestApp): Promise<void> {
  const client = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  for (let i = 0; i < 3; i++)
    await client.shouldRateLimit(request("rl", [["key", "value"]]));
  await client.shouldRateLimit(
    request("rl", [
      ["user", "u1"],
      ["path", "/a"],
    ]),
  );
}

async function scrape(port: number, path = "/metrics") {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(
    /^text\/plain; version=0\.0\.4/,
  );
  const text = await res.text();
  const families = parsePrometheusTextFormat(text);
  return Object.assign(
    (name: string): PrometheusMetricFamily | undefined =>
      families.find((f) => f.name === name),
    { text },
  );
}

/** Value of the one series of `family` whose labels include `labels`. */
function valueOf(
  family: PrometheusMetricFamily | undefined,
  labels: Record<string, string> = {},
): number | undefined {
  const series = family?.metrics.find((m) =>
    Object.entries(labels).every(([k, v]) => m.labels?.[k] === v),
  );
  return series !== undefined && "value" in series
    ? Number(series.value)
    : undefined;
}

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "rls-pull-"));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});
const apps: TestApp[] = [];
afterEach(async () => {
  for (const t of apps.splice(0)) await t.stop();
});

async function start(
  env: Record<string, string>,
): Promise<{ t: TestApp; port: number }> {
  const port = await freePort();
  const t = await startTestApp(
    { "rl.yaml": config },
    {
      USE_PUSHSTATS: "false",
      USE_PULLSTATS: "true",
      DISABLE_STATS: "false",
      PULLSTATS_ADDR: `127.0.0.1:${port}`,
      ...env,
    },
    undefined,
    // Counts of hits on a 2-per-minute rule: a clock 1 s into a minute keeps them in one window.
    { clock: windowAlignedClock(60) },
  );
  apps.push(t);
  return { t, port };
}

describe("pull statistics (Prometheus)", () => {
  it("serves the built-in mapping, current at every scrape", async () => {
    const { t, port } = await start({ EXTRA_TAGS: "env:test" });
    await drive(t);
    const metric = await scrape(port);
    const rl = { domain: "rl", key1: "key_value", env: "test" };
    expect(metric("ratelimit_service_rate_limit_total_hits")?.type).toBe(
      "COUNTER",
    );
    expect(valueOf(metric("ratelimit_service_rate_limit_total_hits"), rl)).toBe(
      3,
    );
    expect(valueOf(metric("ratelimit_service_rate_limit_over_limit"), rl)).toBe(
      1,
    );
    expect(
      valueOf(metric("ratelimit_service_rate_limit_within_limit"), rl),
    ).toBe(2);
    expect(
      valueOf(metric("ratelimit_service_rate_limit_total_hits"), {
        domain: "rl",
        key1: "user",
        key2: "path",
      }),
    ).toBe(1);
    expect(
      valueOf(metric("ratelimit_service_total_requests"), {
        grpc_method: "ShouldRateLimit",
      }),
    ).toBe(4);
    expect(valueOf(metric("ratelimit_service_config_load_success"))).toBe(1);
    const time = metric("ratelimit_service_response_time_seconds");
    expect(time?.type).toBe("HISTOGRAM");
    // The parser drops labelled histogram counts; read them from the text.
    const count =
      /ratelimit_service_response_time_seconds_count\{[^}]*grpc_method="ShouldRateLimit"[^}]*\} (\S+)\n/.exec(
        metric.text,
      );
    const sum =
      /ratelimit_service_response_time_seconds_sum\{[^}]*grpc_method="ShouldRateLimit"[^}]*\} (\S+)\n/.exec(
        metric.text,
      );
    expect(Number(count?.[1])).toBe(4);
    // Scaled from milliseconds to seconds: four loopback calls take well under a second.
    expect(Number(sum?.[1])).toBeGreaterThan(0);
    expect(Number(sum?.[1])).toBeLessThan(1);
    // Node.js process metrics, as the reference exports its Go ones.
    expect(metric("process_cpu_user_seconds_total")).toBeDefined();

    // A second scrape sees new hits at once (no wait for STATS_FLUSH_INTERVAL), once.
    await drive(t);
    const again = await scrape(port);
    expect(valueOf(again("ratelimit_service_rate_limit_total_hits"), rl)).toBe(
      6,
    );
    const res = await fetch(`http://127.0.0.1:${port}/other`);
    expect(res.status).toBe(404);
  });

  it("loads a mapping file with globs, regexes, drops, types and scale", async () => {
    const file = join(root, "mapping.yaml");
    await writeFile(
      file,
      `defaults:
  observer_type: histogram
mappings:
  - match: ratelimit.service.rate_limit.*.*.total_hits
    name: rl_hits
    labels: { domain: "$1", rule: "$2" }
  - match: 'ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.+)\\.(over|within)_limit'
    match_type: regex
    name: rl_\${3}_limit
    labels: { domain: "$1", path: "$2" }
  - match: ratelimit.service.rate_limit.*.*.*.total_hits
    name: rl_nested_hits
    labels: { rule: "$2.$3" }
  - match: ratelimit_server.*.response_time
    name: rl_response_ms
    observer_type: summary
    quantiles: [{ quantile: 0.5, error: 0.05 }]
    labels: { method: "$1" }
  - match: ratelimit_server.*.total_requests
    match_metric_type: gauge
    name: never_used
  - match: ratelimit.service.*
    action: drop
`,
    );
    const { t, port } = await start({
      PULLSTATS_MAPPER_YAML: file,
      PULLSTATS_PATH: "/custom",
    });
    await drive(t);
    const metric = await scrape(port, "/custom");
    expect(
      valueOf(metric("rl_hits"), { domain: "rl", rule: "key_value" }),
    ).toBe(3);
    expect(
      valueOf(metric("rl_over_limit"), { domain: "rl", path: "key_value" }),
    ).toBe(1);
    expect(
      valueOf(metric("rl_within_limit"), { domain: "rl", path: "key_value" }),
    ).toBe(2);
    expect(valueOf(metric("rl_nested_hits"), { rule: "user.path" })).toBe(1);
    const summary = metric("rl_response_ms");
    expect(summary?.type).toBe("SUMMARY");
    const s = summary?.metrics[0];
    expect(
      s !== undefined && "quantiles" in s ? Object.keys(s.quantiles ?? {}) : [],
    ).toEqual(["0.5"]);
    // The parser drops summary labels; read them from the text.
    expect(metric.text).toContain(
      'rl_response_ms_count{method="ShouldRateLimit"} 4\n',
    );
    // match_metric_type gauge does not catch the counter: it falls through, escaped.
    expect(metric("never_used")).toBeUndefined();
    expect(
      valueOf(metric("ratelimit_server_ShouldRateLimit_total_requests")),
    ).toBe(4);
    // Dropped by the last rule.
    expect(metric("ratelimit_service_config_load_success")).toBeUndefined();
  });

  it("fails start-up on a bad mapping file, naming the file and line", async () => {
    const file = join(root, "bad.yaml");
    await writeFile(
      file,
      "mappings:\n  - match: a.*\n    name: ok\n  - match: b.*\n    nmae: typo\n",
    );
    const port = await freePort();
    const error = await startTestApp(
      { "rl.yaml": config },
      {
        USE_PUSHSTATS: "false",
        USE_PULLSTATS: "true",
        DISABLE_STATS: "false",
        PULLSTATS_ADDR: `127.0.0.1:${port}`,
        PULLSTATS_MAPPER_YAML: file,
      },
    ).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(SettingsError);
    expect((error as Error).message).toContain(
      `PULLSTATS_MAPPER_YAML=${JSON.stringify(file)}: line 5: mappings[1]: unknown key "nmae"`,
    );
  });

  it("rejects two sinks at once as a settings error naming the variables", () => {
    expect(() => loadSettings({ USE_PULLSTATS: "true" })).toThrow(
      SettingsError,
    );
    expect(() => loadSettings({ USE_PULLSTATS: "true" })).toThrow(
      /USE_PUSHSTATS=true and USE_PULLSTATS=true/,
    );
  });
});
