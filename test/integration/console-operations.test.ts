// The console's day-2 view (src/console/operations.ts) in headless Chromium against a real
// service on the memory backend: per-rule charts of decisions per second drawn from the polled
// statistics, the top offenders beside them, the overrides table and its form, and the
// canary's diff. Every figure the page shows is checked against what the service answered.

import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AdminService,
  RateLimitResponse_Code as Code,
  RateLimitService,
} from "../../src/proto.js";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { repoRoot } from "../helpers/spawn-service.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";
import { request } from "../helpers/requests.js";

const chromium = "/usr/bin/chromium";
const results = join(repoRoot, "test-results");

const config = `domain: shop
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
`;
/** The candidate: tenants get 3 a minute (the canary must see refusals of the live 4th and 5th). */
const candidate = `domain: shop
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: path
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
`;

let browser: Browser;
let t: TestApp;
let rls: Client<typeof RateLimitService>;
let admin: Client<typeof AdminService>;

async function inPage<T = unknown>(page: Page, script: string): Promise<T> {
  return (await page.evaluate(script)) as T;
}

beforeAll(async () => {
  mkdirSync(results, { recursive: true });
  await import(join(repoRoot, "scripts", "build-console.mjs"));
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  // The counts below (5 per minute, a 3 s trickle) need one minute window: a clock 1 s into one.
  t = await startTestApp({ "shop.yaml": config }, {}, undefined, {
    clock: windowAlignedClock(60),
  });
  rls = createClient(
    RateLimitService,
    createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
  );
  admin = createClient(
    AdminService,
    createConnectTransport({
      baseUrl: `http://${t.addresses.debug}`,
      httpVersion: "1.1",
    }),
  );
}, 60_000);
afterAll(async () => {
  await browser.close();
  await t.stop();
});

describe("the console's day-2 view in Chromium", () => {
  it("charts each rule's decisions, lists its top offenders, overrides and the canary's diff", async () => {
    const dir = mkdtempSync(join(tmpdir(), "canary-"));
    writeFileSync(join(dir, "shop.yaml"), candidate);
    await admin.startCanary({ configDir: dir });

    const page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 1200 });
    try {
      // ?refresh=1: a sample a second, so the charts have lines within the test's time.
      await page.goto(`http://${t.addresses.debug}/?refresh=1`);
      await page.waitForSelector("#rules-section");
      // Traffic after the first poll, so the charts see it as a rate.
      await waitFor(
        async () =>
          (await inPage<number>(
            page,
            `document.querySelectorAll("#rule-charts p.muted").length`,
          )) > 0
            ? true
            : undefined,
        "the first poll",
      );
      const answers: Code[] = [];
      for (let i = 0; i < 7; i++)
        answers.push(
          (await rls.shouldRateLimit(request("shop", [["tenant", "acme"]])))
            .overallCode,
        );
      for (let i = 0; i < 2; i++)
        await rls.shouldRateLimit(request("shop", [["tenant", "globex"]]));
      for (let i = 0; i < 3; i++)
        await rls.shouldRateLimit(request("shop", [["path", "/cart"]]));
      // Then a trickle over a few polls, so the charts have steps to draw.
      for (let i = 0; i < 10; i++) {
        await rls.shouldRateLimit(request("shop", [["tenant", "umbrella"]]));
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
      expect(answers).toEqual([
        Code.OK,
        Code.OK,
        Code.OK,
        Code.OK,
        Code.OK,
        Code.OVER_LIMIT,
        Code.OVER_LIMIT,
      ]);

      // A card per rule with traffic, a line per series that had hits.
      await page.waitForSelector(
        '.rule-card[data-rule="shop.tenant"] polyline[data-series="over_limit"]',
        { timeout: 15_000 },
      );
      await page.waitForSelector(
        '.rule-card[data-rule="shop.path"] polyline[data-series="shadow_mode"]',
        { timeout: 15_000 },
      );
      const tenantSeries = await inPage<string[]>(
        page,
        `[...document.querySelectorAll('.rule-card[data-rule="shop.tenant"] polyline')].map((p) => p.getAttribute("data-series"))`,
      );
      // NEAR_LIMIT_RATIO 0.8 of 5: the 5th hit is near the limit.
      expect(tenantSeries).toEqual([
        "within_limit",
        "near_limit",
        "over_limit",
      ]);

      // The top offenders beside the chart: the API's exact counts for so few values, once a
      // poll after the last request has drawn them.
      const expected = [
        ["tenant=umbrella", "10", "5"],
        ["tenant=acme", "7", "2"],
        ["tenant=globex", "2", "0"],
      ];
      const rowsScript = `[...document.querySelectorAll('.rule-card[data-rule="shop.tenant"] tbody tr')].map((r) => [...r.children].map((c) => c.textContent))`;
      let offenders: string[][] = [];
      await waitFor(
        async () => {
          offenders = await inPage<string[][]>(page, rowsScript);
          return JSON.stringify(offenders) === JSON.stringify(expected)
            ? true
            : undefined;
        },
        "the offenders table to show every request",
        15_000,
      ).catch(() => undefined);
      expect(offenders).toEqual(expected);

      // An override from the form: the table lists it, and the service decides with it.
      await page.type("#override-domain", "shop");
      await page.type("#override-entries", "tenant=initech");
      await page.type("#override-requests", "1");
      await page.select("#override-unit", "HOUR");
      await page.type("#override-ttl", "600");
      await page.type("#override-reason", "trial account");
      await page.click("#override-form button[type=submit]");
      await page.waitForSelector(
        '#overrides tr[data-descriptor="tenant=initech"]',
        {
          timeout: 15_000,
        },
      );
      const row = await inPage<string[]>(
        page,
        `[...document.querySelector('#overrides tr[data-descriptor="tenant=initech"]').children].map((c) => c.textContent)`,
      );
      expect(row.slice(0, 4)).toEqual([
        "shop",
        "tenant=initech",
        "1/HOUR",
        "shop.tenant",
      ]);
      expect(row[5]).toBe("trial account");
      expect(Date.parse(row[4]!)).toBeGreaterThan(Date.now() + 500_000);
      const initech = [
        (await rls.shouldRateLimit(request("shop", [["tenant", "initech"]])))
          .overallCode,
        (await rls.shouldRateLimit(request("shop", [["tenant", "initech"]])))
          .overallCode,
      ];
      expect(initech).toEqual([Code.OK, Code.OVER_LIMIT]);

      // The canary's diff: the candidate's 3 a minute refuses acme's 4th and 5th (OK live).
      const report = await admin.getCanaryReport({});
      const tenantReport = report.rules.find((r) => r.rule === "shop.tenant");
      expect(tenantReport?.wouldRefuse).toBeGreaterThanOrEqual(2n);
      await page.waitForFunction(
        `document.querySelector('#canary tr[data-rule="shop.tenant"]') !== null`,
        { timeout: 15_000 },
      );
      const canaryRow = await inPage<string[]>(
        page,
        `[...document.querySelector('#canary tr[data-rule="shop.tenant"]').children].map((c) => c.textContent)`,
      );
      const latest = await admin.getCanaryReport({});
      const latestTenant = latest.rules.find((r) => r.rule === "shop.tenant");
      expect(canaryRow[0]).toBe("shop.tenant");
      expect(canaryRow[1]).toBe(String(latestTenant?.wouldRefuse));
      expect(canaryRow[2]).toBe(String(latestTenant?.wouldAdmit));
      expect(canaryRow[3]).toContain("tenant=acme");

      await page.screenshot({
        path: join(results, "console-operations.png"),
        fullPage: true,
      });
    } finally {
      await page.close();
      await admin.stopCanary({}).catch(() => undefined);
    }
  }, 90_000);
});
