import { existsSync, readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { fileURLToPath } from "node:url";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import { ruleTrees, type DomainTree } from "../config/rule-tree.js";
import type { HealthChecker } from "../health/health.js";
import type { StatsStore } from "../stats/stats-store.js";

/** Options of {@link createConsole}. */
export interface ConsoleOptions {
  /** Returns the config in force, if any. */
  readonly currentConfig: () => RateLimitConfig | undefined;
  readonly health: HealthChecker;
  readonly statsStore: StatsStore;
  /** Process start, milliseconds since the Unix epoch (uptime). */
  readonly startedAtMs: number;
  /** Current time in milliseconds. @defaultValue Date.now */
  readonly nowMs?: () => number;
  /**
   * Folder holding the built console (`app.js`, `app.css`), made by `make build`
   * (scripts/build-console.mjs). @defaultValue dist/console next to the compiled code
   */
  readonly assetsDir?: string;
}

/** The console's routes, served by the debug server. */
export interface Console {
  /**
   * Answers a console path (`/` for an HTML client, `/console/*`); returns false for any
   * other request.
   */
  handle(req: IncomingMessage, res: ServerResponse, path: string): boolean;
}

/**
 * The state the console page shows, as `/console/state.json` returns it; the page polls it
 * every few seconds while visible.
 */
export interface ConsoleState {
  /** Overall health, as `/healthcheck` on the HTTP port answers it. */
  readonly healthy: boolean;
  /** Each registered health component: true when healthy. */
  readonly components: Record<string, boolean>;
  /** Components the service runs without (`degraded: …` of `/healthcheck`); empty when fully up. */
  readonly degraded: readonly string[];
  /** Whole seconds since the process started. */
  readonly uptimeSeconds: number;
  readonly configLoaded: boolean;
  readonly domains: readonly DomainTree[];
  /** The service's statistics: `ratelimit.service.*`, per-rule ones included, sorted by name. */
  readonly statistics: readonly { name: string; value: number }[];
}

const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ratelimit console</title>
<link rel="stylesheet" href="/console/app.css">
</head>
<body>
<header><h1>ratelimit console</h1><span id="health" class="badge">…</span><span id="uptime"></span><span id="refresh-status" class="error" role="status" hidden></span></header>
<main>
<section id="explain-section">
<h2>Explain</h2>
<form id="explain-form">
<label>Domain <input id="explain-domain" name="domain" list="domain-list" autocomplete="off" required></label>
<datalist id="domain-list"></datalist>
<label>Descriptors <input id="explain-descriptors" name="descriptors" placeholder="key=value,key2=value2; key=value" required></label>
<label>Hits addend <input id="explain-hits" name="hits" type="number" min="0" value="1"></label>
<label class="check"><input id="explain-charge" name="charge" type="checkbox"> charge (count the request)</label>
<button type="submit">Explain</button>
</form>
<div id="explain-result" aria-live="polite"></div>
</section>
<section id="config-section"><h2>Configuration</h2><div id="config-loaded" class="muted"></div><div id="reload-error" class="error" role="alert" hidden></div><div id="config-tree"></div></section>
<section id="statistics-section"><h2>Statistics</h2><p class="muted">The service's statistics; <a href="/stats">all statistics</a> as plain text.</p><table id="statistics"><tbody></tbody></table></section>
</main>
<script type="module" src="/console/app.js"></script>
</body>
</html>
`;

/** Where the built console is: dist/console from dist/src/server, or from src/server. */
function defaultAssetsDir(): string {
  const candidates = [
    fileURLToPath(new URL("../../console/", import.meta.url)),
    fileURLToPath(new URL("../../dist/console/", import.meta.url)),
  ];
  return (
    candidates.find((dir) => existsSync(`${dir}app.js`)) ?? candidates[0] ?? ""
  );
}

const assetTypes: Record<string, string> = {
  "/console/app.js": "text/javascript; charset=utf-8",
  "/console/app.css": "text/css; charset=utf-8",
};

/**
 * Creates the web console of the debug port: `/` answers the HTML page when the client
 * accepts `text/html` (the plain-text index stays for curl), `/console/app.js` and
 * `/console/app.css` the built static files (read once, nothing fetched at run time), and
 * `/console/state.json` the config tree (with source file and line), health, uptime and the
 * service's statistics. The page polls that state every few seconds while visible, reads the
 * loaded domains and the last failed reload from `/rlconfig?format=json` when the debug server
 * offers it, and explains requests through the debug port's own Explain route.
 */
export function createConsole(options: ConsoleOptions): Console {
  const assetsDir = options.assetsDir ?? defaultAssetsDir();
  const nowMs = options.nowMs ?? Date.now;
  const assets = new Map<string, Buffer>();

  function asset(path: string): Buffer | undefined {
    let body = assets.get(path);
    if (body === undefined) {
      const file = `${assetsDir}${path.slice("/console/".length)}`;
      if (!existsSync(file)) return undefined;
      body = readFileSync(file);
      assets.set(path, body);
    }
    return body;
  }

  function state(): ConsoleState {
    const config = options.currentConfig();
    const statistics = options.statsStore
      .snapshot()
      .counters.filter((c) => c.name.startsWith("ratelimit.service."))
      .map((c) => ({ name: c.name, value: c.value() }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return {
      healthy: options.health.isHealthy(),
      components: options.health.components(),
      degraded: options.health.degradedComponents(),
      uptimeSeconds: Math.floor((nowMs() - options.startedAtMs) / 1000),
      configLoaded: config !== undefined,
      domains: config === undefined ? [] : ruleTrees(config),
      statistics,
    };
  }

  return {
    handle(req, res, path) {
      if (path === "/") {
        if (req.headers.accept?.includes("text/html") !== true) return false;
        res.setHeader("content-type", "text/html; charset=utf-8");
        res.end(page);
        return true;
      }
      if (path === "/console/state.json") {
        res.setHeader("content-type", "application/json");
        res.setHeader("cache-control", "no-store");
        res.end(JSON.stringify(state()));
        return true;
      }
      const type = assetTypes[path];
      if (type === undefined) return false;
      const body = asset(path);
      if (body === undefined) {
        res.statusCode = 404;
        res.setHeader("content-type", "text/plain; charset=utf-8");
        res.end(
          `console not built: ${path} is missing under ${assetsDir} (run make build)\n`,
        );
        return true;
      }
      res.setHeader("content-type", type);
      res.end(body);
      return true;
    },
  };
}
