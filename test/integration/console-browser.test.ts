import { mkdirSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { build } from "esbuild";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExplainService } from "../../src/proto.js";
import { repoRoot } from "../helpers/spawn-service.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { FakeEnvoy } from "../helpers/rlqs-stream.js";
import { waitFor } from "../helpers/wait-for.js";

// The debug console in a real browser (headless Chromium from the Debian package `chromium`,
// installed by scripts/ensure-system-deps.sh), and CORS for a page on another origin.

const chromium = "/usr/bin/chromium";
const results = join(repoRoot, "test-results");

const config = `domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: user
    descriptors:
      - key: path
        value: "/api/*"
        shadow_mode: true
        rate_limit: { unit: minute, requests_per_unit: 10 }
`;

let browser: Browser;

/** Evaluates a script in the page (written as text: the tests' TypeScript has no DOM types). */
async function inPage<T = unknown>(page: Page, script: string): Promise<T> {
  return (await page.evaluate(script)) as T;
}

beforeAll(async () => {
  mkdirSync(results, { recursive: true });
  // The console's static files are built by `make build`; built again here (esbuild takes
  // about a second) so the test checks the sources, not an older build.
  await import(join(repoRoot, "scripts", "build-console.mjs"));
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
}, 60_000);
afterAll(async () => {
  await browser.close();
});

describe("the debug console in Chromium", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ "rl.yaml": config }, { DISABLE_STATS: "true" });
  });
  afterAll(async () => {
    await t.stop();
  });

  it("shows the config tree, explains from the form, and marks the deciding descriptor", async () => {
    const page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 900 });
    try {
      await page.goto(`http://${t.addresses.debug}/`);
      await page.waitForSelector("details.domain");
      expect(
        await inPage(page, `document.getElementById("health").textContent`),
      ).toBe("healthy");
      // Expand the config tree: the domain, then every rule.
      await page.click("details.domain > summary");
      await inPage(
        page,
        `document.querySelectorAll("#config-tree details").forEach((d) => { d.open = true; })`,
      );
      const rules = await inPage<
        { key: string; summary: string; visible: boolean }[]
      >(
        page,
        `[...document.querySelectorAll("#config-tree details[data-full-key]")].map((d) => ({
          key: d.getAttribute("data-full-key"),
          summary: d.querySelector("summary").textContent,
          visible: d.offsetParent !== null,
        }))`,
      );
      expect(rules.map((r) => r.key)).toEqual([
        "rl.category_account",
        "rl.user",
        "rl.user.path_/api/*",
      ]);
      expect(rules.every((r) => r.visible)).toBe(true);
      expect(rules[0]!.summary).toContain("3 / HOUR");
      expect(rules[0]!.summary).toContain("rl.yaml:3");
      expect(rules[2]!.summary).toContain("shadow_mode");
      expect(rules[2]!.summary).toContain("rl.yaml:8");
      await page.screenshot({
        path: join(results, "console.png"),
        fullPage: true,
      });

      // The Explain form: read only first.
      await page.type("#explain-domain", "rl");
      await page.type(
        "#explain-descriptors",
        "category=account; user=u1,path=/api/x",
      );
      await inPage(page, `document.getElementById("explain-hits").value = "4"`);
      await page.click("#explain-form button[type=submit]");
      await page.waitForSelector("#explain-overall");
      expect(
        await inPage(
          page,
          `document.getElementById("explain-overall").textContent`,
        ),
      ).toBe("overall: OVER_LIMIT");
      const descriptors = await inPage<
        {
          deciding: boolean;
          verdict: string;
          outcomes: string[];
          text: string;
        }[]
      >(
        page,
        `[...document.querySelectorAll("#explain-result .descriptor")].map((d) => ({
          deciding: d.classList.contains("deciding"),
          verdict: d.getAttribute("data-verdict"),
          outcomes: [...d.querySelectorAll("li")].map((li) => li.getAttribute("data-outcome")),
          text: d.textContent,
        }))`,
      );
      expect(descriptors).toHaveLength(2);
      expect(descriptors[0]!.deciding).toBe(true);
      expect(descriptors[0]!.verdict).toBe("OVER_LIMIT");
      expect(descriptors[0]!.outcomes).toEqual(["EXACT"]);
      expect(descriptors[0]!.text).toMatch(
        /counter rl_category_account_\d+: 0 → 4/,
      );
      expect(descriptors[1]!.deciding).toBe(false);
      expect(descriptors[1]!.outcomes).toEqual(["KEY_ONLY", "WILDCARD"]);
      expect(descriptors[1]!.verdict).toBe("WITHIN_LIMIT");
      await page.screenshot({
        path: join(results, "console-explain.png"),
        fullPage: true,
      });
    } finally {
      await page.close();
    }
  });
});

describe("the debug console with token buckets, calendar windows and rate_limits: lists", () => {
  const limitsConfig = `domain: api
descriptors:
  - key: user
    rate_limits:
      - { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
      - { unit: hour, requests_per_unit: 3 }
      - { name: monthly, unit: month, requests_per_unit: 1000, time_zone: Europe/Berlin }
  - key: key
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
  - key: tenant
    rate_limit: { unit: week, requests_per_unit: 1000, time_zone: America/New_York, week_start: sunday }
`;
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp(
      { "api.yaml": limitsConfig },
      { DISABLE_STATS: "true" },
    );
  });
  afterAll(async () => {
    await t.stop();
  });

  it("shows each limit in the tree and each limit's verdict, bucket and period in Explain", async () => {
    const page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 1200 });
    try {
      await page.goto(`http://${t.addresses.debug}/`);
      await page.waitForSelector("details.domain");
      const rules = await inPage<
        { key: string; limits: { algorithm: string; text: string }[] }[]
      >(
        page,
        `[...document.querySelectorAll("#config-tree details[data-full-key]")].map((d) => ({
          key: d.getAttribute("data-full-key"),
          limits: [...d.querySelector("summary").querySelectorAll(".limit")].map((l) => ({
            algorithm: l.getAttribute("data-algorithm"),
            text: l.textContent,
          })),
        }))`,
      );
      expect(rules).toEqual([
        {
          key: "api.user",
          limits: [
            {
              algorithm: "token_bucket",
              text: "per_second: 10 / SECOND token_bucket burst 20",
            },
            { algorithm: "fixed_window", text: "per_hour: 3 / HOUR" },
            {
              algorithm: "fixed_window",
              text: "monthly: 1000 / MONTH in Europe/Berlin",
            },
          ],
        },
        {
          key: "api.key",
          limits: [
            {
              algorithm: "token_bucket",
              text: "10 / SECOND token_bucket burst 20",
            },
          ],
        },
        {
          key: "api.tenant",
          limits: [
            {
              algorithm: "fixed_window",
              text: "1000 / WEEK in America/New_York from sunday",
            },
          ],
        },
      ]);

      // Four hits: the hourly limit of the list is over (3 per hour), the bucket is not.
      await page.type("#explain-domain", "api");
      await page.type(
        "#explain-descriptors",
        "user=alice; key=k1; tenant=acme",
      );
      await inPage(page, `document.getElementById("explain-hits").value = "4"`);
      await page.click("#explain-form button[type=submit]");
      await page.waitForSelector("#explain-overall");
      const result = await inPage<{
        overall: string;
        checks: {
          index: string;
          verdict: string;
          deciding: boolean;
          text: string;
        }[];
        buckets: { remaining: string; after: string; admitted: string }[];
        periods: { label: string; zone: string; end: string }[];
        remaining: string[];
      }>(
        page,
        `({
          overall: document.getElementById("explain-overall").textContent,
          checks: [...document.querySelectorAll("#explain-result .limit-check")].map((l) => ({
            index: l.getAttribute("data-index"),
            verdict: l.getAttribute("data-verdict"),
            deciding: l.classList.contains("deciding"),
            text: l.textContent,
          })),
          buckets: [...document.querySelectorAll("#explain-result .bucket")].map((b) => ({
            remaining: b.getAttribute("data-remaining"),
            after: b.getAttribute("data-remaining-after"),
            admitted: b.getAttribute("data-admitted"),
          })),
          periods: [...document.querySelectorAll("#explain-result .period")].map((p) => ({
            label: p.getAttribute("data-label"),
            zone: p.getAttribute("data-time-zone"),
            end: p.getAttribute("data-end"),
          })),
          remaining: [...document.querySelectorAll("#explain-result .descriptor > .remaining")].map((r) => r.textContent),
        })`,
      );
      expect(result.overall).toBe("overall: OVER_LIMIT");
      expect(
        result.checks.map((c) => [c.index, c.verdict, c.deciding]),
      ).toEqual([
        ["0", "WITHIN_LIMIT", false],
        ["1", "OVER_LIMIT", true],
        ["2", "WITHIN_LIMIT", false],
      ]);
      expect(result.checks[1]!.text).toContain(
        "limits[1] per_hour: 3 per HOUR — decides",
      );
      expect(result.checks[0]!.text).toContain(
        "remaining 16 of burst 20, full in",
      );
      // The list's bucket and the key's bucket: 20 left, 16 after the 4 hits.
      expect(result.buckets).toEqual([
        { remaining: "20", after: "16", admitted: "true" },
        { remaining: "20", after: "16", admitted: "true" },
      ]);
      expect(result.periods.map((p) => [p.label.length > 0, p.zone])).toEqual([
        [true, "Europe/Berlin"],
        [true, "America/New_York"],
      ]);
      expect(result.periods[0]!.end).toMatch(
        /^\d{4}-\d{2}-01T00:00:00\+0[12]:00$/,
      );
      expect(result.periods[1]!.end).toMatch(/T00:00:00-0[45]:00$/);
      expect(result.remaining[0]).toMatch(/^remaining 0 of 3, resets in /);
      expect(result.remaining[1]).toMatch(
        /^remaining 16 of burst 20, full in /,
      );
      expect(result.remaining[2]).toMatch(/^remaining 996 of 1000, resets in /);
      await inPage(
        page,
        `document.querySelectorAll("#config-tree details").forEach((d) => { d.open = true; })`,
      );
      await page.screenshot({
        path: join(results, "console-limits.png"),
        fullPage: true,
      });
    } finally {
      await page.close();
    }
  });
});

describe("the debug console's refresh in Chromium", () => {
  const other =
    "domain: other\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
  const totalHits =
    "ratelimit.service.rate_limit.rl.category_account.total_hits";
  const loadErrors = "ratelimit.service.config_load_error";
  let t: TestApp;
  let page: Page;
  /** Requests the page made for its state, counted by the test. */
  let stateRequests = 0;
  beforeAll(async () => {
    // The hits on the 3-per-hour rule span tests seconds apart: a clock 1 s into an hour keeps
    // them in one window.
    t = await startTestApp(
      { "rl.yaml": config, "other.yaml": other },
      { DISABLE_STATS: "true" },
      undefined,
      { clock: windowAlignedClock(3600) },
    );
    page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 900 });
    page.on("request", (req) => {
      if (req.url().endsWith("/console/state.json")) stateRequests++;
    });
    // One refresh a second (the default is 3) keeps the waits below short.
    await page.goto(`http://${t.addresses.debug}/?refresh=1`);
    await page.waitForSelector("details.domain");
  });
  afterAll(async () => {
    await page.close();
    await t.stop();
  });

  /** The value the page shows for one statistic, or undefined when it lists none such. */
  function statisticScript(name: string): string {
    return `document.querySelector('#statistics tr[data-name="${name}"] td.value')?.textContent`;
  }

  it("refreshes health, uptime and statistics without a reload", async () => {
    const uptime = Number(
      await inPage(
        page,
        `document.getElementById("uptime").getAttribute("data-seconds")`,
      ),
    );
    await page.waitForFunction(
      `Number(document.getElementById("uptime").getAttribute("data-seconds")) > ${uptime}`,
      { timeout: 10_000 },
    );
    // Per-rule statistics exist from the config load on, at 0.
    expect(await inPage(page, statisticScript(totalHits))).toBe("0");
    const res = await fetch(`http://${t.addresses.http}/json`, {
      method: "POST",
      body: JSON.stringify({
        domain: "rl",
        descriptors: [{ entries: [{ key: "category", value: "account" }] }],
      }),
    });
    expect(res.status).toBe(200);
    await page.waitForFunction(`${statisticScript(totalHits)} === "1"`, {
      timeout: 10_000,
    });
    // What SIGTERM does first: health fails while the listeners drain.
    t.app.health.fail("sigterm");
    try {
      await page.waitForFunction(
        `document.getElementById("health").textContent === "unhealthy"`,
        { timeout: 10_000 },
      );
    } finally {
      t.app.health.ok("sigterm");
    }
    await page.waitForFunction(
      `document.getElementById("health").textContent === "healthy"`,
      { timeout: 10_000 },
    );
  });

  it("stops refreshing while the tab is hidden, and refreshes when it shows again", async () => {
    // Another tab in front hides this one (document.visibilityState "hidden").
    const front = await browser.newPage();
    try {
      await front.bringToFront();
      expect(await inPage(page, "document.visibilityState")).toBe("hidden");
      // A refresh already under way may still land; then none for three periods.
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const before = stateRequests;
      await new Promise((resolve) => setTimeout(resolve, 3_500));
      expect(stateRequests).toBe(before);
      const refreshed = page.waitForRequest((req) =>
        req.url().endsWith("/console/state.json"),
      );
      await page.bringToFront();
      await refreshed;
    } finally {
      await front.close();
    }
  });

  it("keeps open tree nodes after an Explain and a config change, and shows remaining and reset per descriptor", async () => {
    await page.click('details[data-domain="rl"] > summary');
    await page.click('details[data-full-key="rl.user"] > summary');
    const openNodes = `[...document.querySelectorAll("#config-tree details[open]")].map((d) => d.getAttribute("data-domain") ?? d.getAttribute("data-full-key"))`;
    expect(await inPage(page, openNodes)).toEqual(["rl", "rl.user"]);

    await inPage(
      page,
      `(() => {
        document.getElementById("explain-domain").value = "rl";
        document.getElementById("explain-descriptors").value = "category=account; user=u1,path=/api/x; user=u2";
        document.getElementById("explain-charge").checked = true;
      })()`,
    );
    const hitsBefore = Number(
      await inPage<string>(page, statisticScript(totalHits)),
    );
    await page.click("#explain-form button[type=submit]");
    await page.waitForSelector("#explain-overall");
    // The charge reaches the statistics (one refresh at least), the tree stays as it was.
    await page.waitForFunction(
      `${statisticScript(totalHits)} === "${hitsBefore + 1}"`,
      {
        timeout: 10_000,
      },
    );
    expect(await inPage(page, openNodes)).toEqual(["rl", "rl.user"]);

    const remaining = await inPage<
      ({
        remaining: string;
        resetSeconds: string | null;
        text: string;
      } | null)[]
    >(
      page,
      `[...document.querySelectorAll("#explain-result .descriptor")].map((d) => {
        const r = d.querySelector(".remaining");
        return r === null ? null : {
          remaining: r.getAttribute("data-remaining"),
          resetSeconds: r.getAttribute("data-reset-seconds"),
          text: r.textContent,
        };
      })`,
    );
    expect(remaining).toHaveLength(3);
    // 3 per hour, minus the earlier hits and this Explain's.
    const left = String(Math.max(0, 3 - hitsBefore - 1));
    expect(remaining[0]).toMatchObject({ remaining: left });
    expect(remaining[0]!.text).toMatch(
      new RegExp(`^remaining ${left} of 3, resets in \\d`),
    );
    const reset = Number(remaining[0]!.resetSeconds);
    expect(reset).toBeGreaterThan(0);
    expect(reset).toBeLessThanOrEqual(3600);
    expect(remaining[1]).toMatchObject({ remaining: "9" });
    expect(Number(remaining[1]!.resetSeconds)).toBeLessThanOrEqual(60);
    // user=u2 matches no limit: nothing to show.
    expect(remaining[2]).toBeNull();

    // A reload rebuilds the tree; the nodes open before stay open.
    await t.writeConfig(
      "rl.yaml",
      `${config}  - key: added\n    rate_limit: { unit: day, requests_per_unit: 5 }\n`,
    );
    await page.waitForSelector('details[data-full-key="rl.added"]', {
      timeout: 10_000,
    });
    expect(await inPage(page, openNodes)).toEqual(["rl", "rl.user"]);
  });

  it("offers the loaded domains and calls its statistics statistics", async () => {
    await page.waitForFunction(
      `document.querySelectorAll("#domain-list option").length === 2`,
      { timeout: 10_000 },
    );
    expect(
      await inPage(
        page,
        `[...document.querySelectorAll("#domain-list option")].map((o) => o.value)`,
      ),
    ).toEqual(["other", "rl"]);
    expect(
      await inPage(
        page,
        `document.getElementById("explain-domain").getAttribute("list")`,
      ),
    ).toBe("domain-list");
    const text = await inPage<string>(page, "document.body.innerText");
    expect(text).toContain("Statistics");
    expect(text).not.toMatch(/\bstats\b/i);
    expect(text).not.toMatch(/\bcounters\b/i);
  });

  it("shows the last failed reload when /rlconfig reports it", async () => {
    const base = `http://${t.addresses.debug}`;
    const errorsBefore = Number(
      (await inPage<string | undefined>(page, statisticScript(loadErrors))) ??
        "0",
    );
    await t.writeConfig("other.yaml", "domain: other\ndescriptors: [\n");
    await page.waitForFunction(
      `Number(${statisticScript(loadErrors)} ?? "0") > ${errorsBefore}`,
      { timeout: 10_000 },
    );
    const report = await fetch(`${base}/rlconfig?format=json`);
    expect(report.headers.get("content-type")).toContain("application/json");
    const { lastFailedReload } = (await report.json()) as {
      lastFailedReload: { file: string | null } | null;
    };
    expect(lastFailedReload?.file).toBe("other.yaml");
    await page.waitForFunction(
      `!document.getElementById("reload-error").hidden`,
      { timeout: 10_000 },
    );
    const banner = await inPage<string>(
      page,
      `document.getElementById("reload-error").textContent`,
    );
    expect(banner).toMatch(
      /^last config reload failed at \S+: other\.yaml:\d+: /,
    );
    expect(
      await inPage(page, `document.getElementById("refresh-status").hidden`),
    ).toBe(true);
    expect(
      await inPage(
        page,
        `[...document.querySelectorAll("#domain-list option")].map((o) => o.value)`,
      ),
    ).toEqual(["other", "rl"]);

    // The next successful load clears it.
    await t.writeConfig("other.yaml", other);
    await page.waitForFunction(
      `document.getElementById("reload-error").hidden`,
      { timeout: 10_000 },
    );
  });
});

/** Serves one page, on its own origin, whose script calls ShouldRateLimit with gRPC-web. */
async function startOtherOrigin(): Promise<{ server: Server; origin: string }> {
  const bundle = await build({
    stdin: {
      contents: `
        import { createClient } from "@connectrpc/connect";
        import { createGrpcWebTransport } from "@connectrpc/connect-web";
        import { RateLimitService } from "./src/proto.js";
        window.callShouldRateLimit = async (baseUrl) => {
          const client = createClient(RateLimitService, createGrpcWebTransport({ baseUrl }));
          const r = await client.shouldRateLimit({
            domain: "rl",
            descriptors: [{ entries: [{ key: "category", value: "account" }] }],
          });
          return r.overallCode;
        };`,
      resolveDir: repoRoot,
      loader: "ts",
    },
    bundle: true,
    format: "esm",
    platform: "browser",
    write: false,
    logLevel: "silent",
  });
  const script = bundle.outputFiles[0]!.text;
  const server = createServer((req, res) => {
    if (req.url === "/app.js") {
      res.writeHead(200, { "content-type": "text/javascript" });
      res.end(script);
      return;
    }
    res.writeHead(200, { "content-type": "text/html" });
    res.end(
      `<!doctype html><title>other origin</title><script type="module" src="/app.js"></script>`,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return { server, origin: `http://127.0.0.1:${port}` };
}

describe("the debug console's RLQS view in Chromium", () => {
  const rlqsConfig = `domain: rlqs
descriptors:
  - key: tenant
    value: gold
    rate_limit: { unit: second, requests_per_unit: 100 }
  - key: tenant
    value: trial
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 30 }
`;
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp(
      { "rlqs.yaml": rlqsConfig },
      { DISABLE_STATS: "true", RLQS_REPORT_INTERVAL: "1s" },
    );
  });
  afterAll(async () => {
    await t.stop();
  });

  /** The bucket table as the page shows it. */
  function bucketRows(page: Page) {
    return inPage<
      {
        domain: string;
        bucket: string;
        policy: string;
        limit: number;
        shareSum: number;
        streams: {
          id: string;
          demand: string;
          share: number;
          assigned: number;
        }[];
      }[]
    >(
      page,
      `[...document.querySelectorAll("#rlqs-buckets tr[data-bucket]")].map((tr) => ({
        domain: tr.getAttribute("data-domain"),
        bucket: tr.getAttribute("data-bucket"),
        policy: tr.getAttribute("data-policy"),
        limit: Number(tr.getAttribute("data-limit")),
        shareSum: Number(tr.getAttribute("data-share-sum")),
        streams: [...tr.querySelectorAll("li[data-stream-id]")].map((li) => ({
          id: li.getAttribute("data-stream-id"),
          demand: li.getAttribute("data-demand"),
          share: Number(li.getAttribute("data-share")),
          assigned: Number(li.getAttribute("data-assigned")),
        })),
      }))`,
    );
  }

  it("lists the buckets with each stream's demand and share, as pushed, and explains one from the form or a row", async () => {
    const page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 1000 });
    const a = new FakeEnvoy(t);
    const b = new FakeEnvoy(t);
    try {
      await page.goto(`http://${t.addresses.debug}/?refresh=1`);
      await page.waitForSelector("#rlqs-section");
      await page.waitForFunction(
        `document.querySelector("#rlqs-buckets tbody")?.textContent === "no bucket is subscribed"`,
        { timeout: 10_000 },
      );
      // a first, so that its stream id is the smaller.
      a.report("gold");
      await waitFor(() => a.rate("gold") === 100, "a alone");
      b.report("gold");
      b.report("trial");
      await waitFor(
        () => a.rate("gold") === 50 && b.rate("gold") === 50,
        "50/50",
      );
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      a.report("gold", 120, 120); // about 120/s
      b.report("gold", 40, 0); // about 20/s
      // Only the final split (about 81/19) passes.
      await waitFor(() => {
        const ra = a.rate("gold") ?? 0;
        const rb = b.rate("gold") ?? 0;
        return rb < 25 && ra > 75;
      }, "the split by measured demand");
      // The next refresh shows both demands measured.
      await page.waitForFunction(
        `[...document.querySelectorAll('#rlqs-buckets tr[data-bucket="tenant=gold"] li')].filter((li) => li.getAttribute("data-demand") !== "").length === 2`,
        { timeout: 10_000 },
      );
      const rows = await bucketRows(page);
      expect(rows.map((r) => [r.domain, r.bucket, r.policy, r.limit])).toEqual([
        ["rlqs", "tenant=gold", "SHARED_LIMIT", 100],
        ["rlqs", "tenant=trial", "ALLOW_ALL", 30],
      ]);
      const gold = rows[0]!;
      const streams = [...gold.streams].sort(
        (x, y) => Number(x.id) - Number(y.id),
      );
      // Each stream's token bucket is what it was pushed.
      expect(streams.map((s) => s.assigned)).toEqual([
        a.rate("gold"),
        b.rate("gold"),
      ]);
      expect(gold.shareSum).toBeCloseTo(100, 6);
      // The same figures as ExplainBucket.
      const explained = await createClient(
        ExplainService,
        createConnectTransport({
          baseUrl: `http://${t.addresses.debug}`,
          httpVersion: "1.1",
        }),
      ).explainBucket({ domain: "rlqs", bucket: { tenant: "gold" } });
      expect(
        gold.streams.map((s) => [s.id, Number(s.demand), s.share]),
      ).toEqual(
        explained.streams.map((s) => [
          s.streamId,
          s.demandPerSecond,
          s.sharePerSecond,
        ]),
      );
      await page.screenshot({
        path: join(results, "console-rlqs.png"),
        fullPage: true,
      });

      // The form explains one bucket in full.
      await page.type("#rlqs-domain", "rlqs");
      await page.type("#rlqs-bucket", "tenant=gold");
      await page.click("#rlqs-explain-form button[type=submit]");
      await page.waitForSelector("#rlqs-explain-summary");
      const summary = await inPage<{ policy: string; text: string }>(
        page,
        `({
          policy: document.getElementById("rlqs-explain-summary").getAttribute("data-policy"),
          text: document.getElementById("rlqs-explain-summary").textContent,
        })`,
      );
      expect(summary.policy).toBe("SHARED_LIMIT");
      expect(summary.text).toMatch(
        /^SHARED_LIMIT: L = 100\/s \(rlqs\.tenant_gold\) shared by 2 streams/,
      );
      expect(
        await inPage(
          page,
          `document.querySelector("#rlqs-explain-result .rlqs-rule").textContent`,
        ),
      ).toBe(
        "rule rlqs.tenant_gold: 100 per SECOND (rlqs.yaml:3); entries in tree order: tenant=gold",
      );
      expect(
        await inPage(
          page,
          `document.querySelectorAll("#rlqs-explain-result .rlqs-split tr[data-stream-id]").length`,
        ),
      ).toBe(2);

      // A click on a row explains its bucket: the shadow-mode one.
      await page.click('#rlqs-buckets tr[data-bucket="tenant=trial"]');
      await page.waitForFunction(
        `document.getElementById("rlqs-explain-summary")?.getAttribute("data-reason") === "SHADOW_MODE"`,
        { timeout: 10_000 },
      );
      expect(
        await inPage(page, `document.getElementById("rlqs-bucket").value`),
      ).toBe("tenant=trial");
      expect(
        await inPage(
          page,
          `document.querySelector("#rlqs-explain-result .rlqs-split tbody td:nth-child(5)").textContent`,
        ),
      ).toBe("ALLOW_ALL (30 per 1s, max 3)");
      await page.screenshot({
        path: join(results, "console-rlqs-explain.png"),
        fullPage: true,
      });

      // Streams that end leave their buckets; the table follows.
      a.end();
      b.end();
      await Promise.all([a.done, b.done]);
      await page.waitForFunction(
        `document.querySelector("#rlqs-buckets tbody")?.textContent === "no bucket is subscribed"`,
        { timeout: 10_000 },
      );
    } finally {
      a.end();
      b.end();
      await page.close();
    }
  });
});

describe("CORS for a page on another origin (gRPC-web)", () => {
  let other: { server: Server; origin: string };
  beforeAll(async () => {
    other = await startOtherOrigin();
  });
  afterAll(
    () =>
      new Promise<void>((resolve) => {
        other.server.close(() => {
          resolve();
        });
        // The browser keeps its connections alive.
        other.server.closeAllConnections();
      }),
  );

  async function callFromOtherOrigin(t: TestApp): Promise<string> {
    const page = await browser.newPage();
    try {
      await page.goto(`${other.origin}/`);
      await page.waitForFunction(`"callShouldRateLimit" in window`);
      const baseUrl = JSON.stringify(`http://${t.addresses.http}`);
      return await inPage<string>(
        page,
        `window.callShouldRateLimit(${baseUrl}).then(
          (code) => "code " + code,
          (err) => "refused: " + String(err),
        )`,
      );
    } finally {
      await page.close();
    }
  }

  it("is allowed with CORS_ALLOWED_ORIGINS naming the origin", async () => {
    const t = await startTestApp(
      { "rl.yaml": config },
      { DISABLE_STATS: "true", CORS_ALLOWED_ORIGINS: other.origin },
    );
    try {
      expect(await callFromOtherOrigin(t)).toBe("code 1");
    } finally {
      await t.stop();
    }
  });

  it("is refused with CORS off", async () => {
    const t = await startTestApp(
      { "rl.yaml": config },
      { DISABLE_STATS: "true" },
    );
    try {
      const result = await callFromOtherOrigin(t);
      expect(result).toMatch(/^refused: /);
    } finally {
      await t.stop();
    }
  });
});
