import { existsSync, mkdirSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { build } from "esbuild";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../helpers/spawn-service.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

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
  // The console's static files are built by `make build`; build them here when missing so
  // the test also runs straight from the sources.
  if (!existsSync(join(repoRoot, "dist", "console", "app.js"))) {
    await import(join(repoRoot, "scripts", "build-console.mjs"));
  }
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
