import { existsSync, readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { fileURLToPath } from "node:url";
import type {
  DescriptorLevel,
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import {
  ruleTrees,
  type DomainTree,
  type RuleTreeNode,
} from "../config/rule-tree.js";
import { bucketOf, calendarOf } from "../config/algorithm.js";
import { unitName } from "../config/units.js";
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
 * One limit of a rule as the console's tree shows it: every limit of a `rate_limits:` list, or
 * the rule's one `rate_limit:`, with the extensions' fields.
 */
export interface ConsoleLimit {
  /** `name` of the limit; "" when unnamed. */
  readonly name: string;
  /** Unit name (`SECOND` … `YEAR`). */
  readonly unit: string;
  readonly requestsPerUnit: number;
  /** `unit_multiplier` (1 when not set). */
  readonly unitMultiplier: number;
  /** Window length in seconds (unit × unit_multiplier; a calendar unit's nominal length). */
  readonly windowSeconds: number;
  /** `algorithm`: `fixed_window`, `sliding_window` or `token_bucket`. */
  readonly algorithm: "fixed_window" | "sliding_window" | "token_bucket";
  /** Token buckets: hits a full bucket admits at once; absent otherwise. */
  readonly burst?: number;
  /** Token buckets: the emission interval (one hit's worth of time), µs; absent otherwise. */
  readonly emissionIntervalUs?: number;
  /** Calendar windows: the IANA time zone; absent otherwise. */
  readonly timeZone?: string;
  /** Calendar weeks: the day weeks start on; absent otherwise. */
  readonly weekStart?: string;
  /** Appended to the stats key of a limit in a `rate_limits:` list; "" otherwise. */
  readonly statsKeySuffix: string;
}

/** One rule of the console's tree: the config's rule tree node, with its limits in full. */
export interface ConsoleRuleNode extends RuleTreeNode {
  /**
   * The limits the rule checks, in list order: one for `rate_limit:`, each entry of a
   * `rate_limits:` list; empty for a rule without a limit or an unlimited one.
   */
  readonly limits: readonly ConsoleLimit[];
  /** `rate_limits:`: the rule has a list (even of one limit). */
  readonly list: boolean;
  readonly children: readonly ConsoleRuleNode[];
}

/** The rules of one domain as the console's tree shows them. */
export interface ConsoleDomainTree extends DomainTree {
  readonly rules: readonly ConsoleRuleNode[];
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
  readonly domains: readonly ConsoleDomainTree[];
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

/** One limit's fields for the console (see {@link ConsoleLimit}). */
function consoleLimit(limit: RateLimit): ConsoleLimit {
  const algorithm = limit.algorithm;
  const bucket = bucketOf(algorithm);
  const calendar = calendarOf(algorithm);
  return {
    name: limit.name,
    unit: unitName(limit.unit),
    requestsPerUnit: limit.requestsPerUnit,
    unitMultiplier: limit.unitMultiplier,
    windowSeconds: limit.windowSeconds,
    algorithm: algorithm.kind,
    ...(bucket !== undefined
      ? { burst: bucket.burst, emissionIntervalUs: bucket.emissionIntervalUs }
      : {}),
    ...(calendar !== undefined ? { timeZone: calendar.timeZone } : {}),
    ...(calendar?.unit === "week" ? { weekStart: calendar.weekStart } : {}),
    statsKeySuffix: limit.statsKeySuffix,
  };
}

/**
 * Adds each rule's limits in full to the config's rule tree (which carries the first limit's
 * reference fields only), reading the same compiled level by composite key.
 */
function withLimits(
  nodes: readonly RuleTreeNode[],
  level: DescriptorLevel | undefined,
): ConsoleRuleNode[] {
  return nodes.map((node) => {
    const compiled = level?.nodes.get(node.compositeKey);
    const limit = compiled?.limit;
    const limits =
      limit === undefined || limit.unlimited
        ? []
        : [limit, ...(limit.extraLimits ?? [])].map(consoleLimit);
    return {
      ...node,
      limits,
      list: limit?.extraLimits !== undefined,
      children: withLimits(node.children, compiled?.children),
    };
  });
}

/** The console's tree of every loaded domain (see {@link ConsoleRuleNode}). */
export function consoleTrees(config: RateLimitConfig): ConsoleDomainTree[] {
  return ruleTrees(config).map((tree) => ({
    domain: tree.domain,
    rules: withLimits(tree.rules, config.view?.domainRules(tree.domain)),
  }));
}

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
      domains: config === undefined ? [] : consoleTrees(config),
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
