import { createServer, type ServerResponse } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import type { ConfigReloadStatus } from "../config/reload-status.js";
import type { StatsStore } from "../stats/stats-store.js";
import { ExplainService } from "../proto.js";
import {
  adminPathPrefix,
  registerAdmin,
  type AdminParts,
} from "../admin/admin-routes.js";
import { createConnectHandler } from "./connect-handler.js";
import type { Console } from "./console.js";
import { listen, type Listening } from "./listen.js";
import {
  registerExplain,
  type BucketExplainHandlers,
  type ExplainHandler,
} from "./routes.js";

/** Options of {@link startDebugServer}. */
export interface DebugServerOptions {
  /** Returns the config in force, if any. */
  readonly currentConfig: () => RateLimitConfig | undefined;
  /**
   * Returns when the config loaded and the last failed load, for `/rlconfig?format=json`.
   * @defaultValue `loadedAt` and `lastFailedReload` answer null
   */
  readonly reloadStatus?: () => ConfigReloadStatus;
  /** Every statistic, listed by `/stats`. */
  readonly statsStore: StatsStore;
  /** Bind host (`DEBUG_HOST`). */
  readonly host: string;
  /** Bind port (`DEBUG_PORT`); 0 picks a free one. */
  readonly port: number;
  /** Where profiling failures are reported. @defaultValue none */
  readonly logger?: Logger;
  /**
   * Longest profile `?seconds=` may ask for, in seconds (≥ 1). @defaultValue 300
   */
  readonly maxProfileSeconds?: number;
  /**
   * Serves `ratelimit.explain.v1.ExplainService` over Connect and gRPC-web on this port,
   * whatever `EXPLAIN_ENABLED` says (like `/rlconfig`, the debug port is for operators).
   * Needs `logger` (handler failures are logged there). @defaultValue not served
   */
  readonly explain?: ExplainHandler;
  /**
   * Serves Explain's `ExplainBucket` and `ListBuckets` (RLQS buckets) with `explain`; without
   * it they answer FAILED_PRECONDITION. @defaultValue not served
   */
  readonly explainBuckets?: BucketExplainHandlers;
  /**
   * Serves `ratelimit.admin.v1.AdminService` over Connect and gRPC-web on this port, whatever
   * `ADMIN_ENABLED` says. Needs `logger`. @defaultValue not served
   */
  readonly admin?: AdminParts;
  /** The web console at `/` for HTML clients (see `createConsole`). @defaultValue none */
  readonly console?: Console;
}

const paths: readonly (readonly [string, string])[] = [
  [
    "/",
    "the web console (config tree, health, statistics, Explain) for browsers (Accept: text/html)",
  ],
  ["/debug/pprof/", "index of the profiling endpoints"],
  [
    "/debug/pprof/heap",
    "sampling heap profile over ?seconds=N (default 10): a .heapprofile for Chrome DevTools",
  ],
  [
    "/debug/pprof/profile",
    "CPU profile over ?seconds=N (default 30): a .cpuprofile for Chrome DevTools or speedscope",
  ],
  [
    "/ratelimit.admin.v1.AdminService/",
    "the admin API (overrides, top offenders, config canary) over Connect and gRPC-web; docs/operations.md",
  ],
  ["/rlconfig", "print out the currently loaded configuration for debugging"],
  ["/stats", "print out every statistic with its current value"],
];

const pprofIndex =
  "Profiles of this Node.js process, taken with the V8 inspector (node:inspector).\n" +
  "They are V8 profiles, not pprof protobufs: open them in Chrome DevTools\n" +
  "(Performance / Memory panels) or https://www.speedscope.app.\n\n" +
  "profile?seconds=N  CPU profile sampled for N seconds (default 30); JSON .cpuprofile\n" +
  "heap?seconds=N     sampling heap profile of allocations made during N seconds and\n" +
  "                   still live at the end (default 10); JSON .heapprofile\n";

class ProfileRequestError extends Error {
  override readonly name = "ProfileRequestError";
}

/** `?seconds=` as a whole number in [1, max], or the default. */
function profileSeconds(
  query: URLSearchParams,
  defaultSeconds: number,
  maxSeconds: number,
): number {
  const text = query.get("seconds");
  if (text === null || text === "") return Math.min(defaultSeconds, maxSeconds);
  const seconds = Number(text);
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > maxSeconds) {
    throw new ProfileRequestError(
      `invalid seconds=${text}: expected a whole number from 1 to ${maxSeconds}\n`,
    );
  }
  return seconds;
}

/** Takes one profile with an in-process inspector session; resolves to its JSON text. */
async function takeProfile(
  kind: "cpu" | "heap",
  seconds: number,
  signal: AbortSignal,
): Promise<string> {
  // node:inspector loads on the first profile, not at start.
  const { Session } = await import("node:inspector/promises");
  const session = new Session();
  session.connect();
  const wait = async (): Promise<void> => {
    try {
      await sleep(seconds * 1000, undefined, { signal, ref: false });
    } catch (err) {
      // Aborted: the client went away; stop the profiler below all the same.
      if (!signal.aborted) throw err;
    }
  };
  try {
    let profile: object;
    if (kind === "cpu") {
      await session.post("Profiler.enable");
      await session.post("Profiler.start");
      await wait();
      ({ profile } = await session.post("Profiler.stop"));
    } else {
      await session.post("HeapProfiler.enable");
      await session.post("HeapProfiler.startSampling");
      await wait();
      ({ profile } = await session.post("HeapProfiler.stopSampling"));
    }
    return signal.aborted ? "" : JSON.stringify(profile);
  } finally {
    session.disconnect();
  }
}

/** `/stats`: one line per statistic, `<name>: <value>`, sorted by name. */
function statsText(store: StatsStore): string {
  const { counters, gauges, timers } = store.snapshot();
  const lines: [string, string][] = [
    // The reference's expvar page shows these two; kept for familiarity.
    ["cmdline", JSON.stringify(process.argv)],
    ["memstats", JSON.stringify(process.memoryUsage())],
  ];
  for (const c of counters) lines.push([c.name, String(c.value())]);
  for (const g of gauges) lines.push([g.name, String(g.value())]);
  for (const t of timers) {
    const { count, sumMs } = t.value();
    const meanMs = count > 0 ? sumMs / count : 0;
    lines.push([
      t.name,
      `count=${count} sum_ms=${sumMs.toFixed(3)} mean_ms=${meanMs.toFixed(3)}`,
    ]);
  }
  lines.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return lines.map(([name, value]) => `${name}: ${value}\n`).join("");
}

/**
 * The JSON form of `/rlconfig`: `{"domains": [<sorted>], "config": <the plain dump>,
 * "loadedAt": <RFC 3339 or null>, "lastFailedReload": null | {"file", "line", "fieldPath",
 * "message", "time"}}` (docs/configuration.md#errors; the web console reads it).
 */
export function rlconfigJson(
  config: RateLimitConfig | undefined,
  status: ConfigReloadStatus | undefined,
): string {
  return JSON.stringify({
    domains: config === undefined ? [] : [...config.domains].sort(),
    config: config?.dump() ?? "",
    loadedAt: status?.loadedAt ?? null,
    lastFailedReload: status?.lastFailedReload ?? null,
  });
}

/**
 * Starts the debug server:
 * - `/` answers the web console to an HTML client (with `console`);
 * - `/ratelimit.explain.v1.ExplainService/Explain` serves Explain over Connect and gRPC-web
 *   (with `explain`), and `…/ExplainBucket`, `…/ListBuckets` the RLQS buckets (with
 *   `explainBuckets`);
 * - `/ratelimit.admin.v1.AdminService/<Method>` serves the admin API over Connect and gRPC-web
 *   (with `admin`);
 * - `/` for other clients (and any unknown path) lists the paths, one `<path>: <help>` line each, sorted;
 * - `/rlconfig` dumps the loaded config in the reference's format (empty before the first load);
 *   with `?format=json`, or an `Accept` header naming `application/json`, it answers
 *   `{"domains", "config", "loadedAt", "lastFailedReload"}` instead (see {@link rlconfigJson});
 * - `/stats` lists every statistic with its current value, including the rate-limit counters
 *   (the reference shows only its runtime variables), plus `cmdline` and `memstats`;
 * - `/debug/pprof/` indexes the profiles: `profile?seconds=N` (CPU) and `heap?seconds=N`
 *   (sampling heap profile), taken with `node:inspector`. They are V8's `.cpuprofile` /
 *   `.heapprofile` JSON, read by Chrome DevTools and speedscope, not pprof protobufs (the
 *   reference's Go pprof has no Node equivalent); one profile of each kind runs at a time
 *   (409 otherwise), and a client that disconnects stops its profile.
 *
 * @throws the listen error when the address cannot be bound
 */
export function startDebugServer(
  options: DebugServerOptions,
): Promise<Listening> {
  const maxSeconds = options.maxProfileSeconds ?? 300;
  const running = new Set<"cpu" | "heap">();

  function profile(
    kind: "cpu" | "heap",
    query: URLSearchParams,
    res: ServerResponse,
  ): void {
    let seconds: number;
    try {
      seconds = profileSeconds(query, kind === "cpu" ? 30 : 10, maxSeconds);
    } catch (err) {
      res.statusCode = 400;
      res.end(err instanceof Error ? err.message : String(err));
      return;
    }
    if (running.has(kind)) {
      res.statusCode = 409;
      res.end(`a ${kind} profile is already running\n`);
      return;
    }
    running.add(kind);
    const aborter = new AbortController();
    res.on("close", () => {
      aborter.abort();
    });
    takeProfile(kind, seconds, aborter.signal)
      .then((json) => {
        if (aborter.signal.aborted) return;
        const stamp = new Date().toISOString().replace(/[:.]/g, "-");
        const extension = kind === "cpu" ? "cpuprofile" : "heapprofile";
        res.setHeader("content-type", "application/json");
        res.setHeader(
          "content-disposition",
          `attachment; filename="${kind}-${stamp}.${extension}"`,
        );
        res.end(json);
      })
      .catch((err: unknown) => {
        if (aborter.signal.aborted) return;
        options.logger?.error({ err, kind }, "profiling failed");
        res.statusCode = 500;
        res.end(`profiling failed: ${String(err)}\n`);
      })
      .finally(() => {
        running.delete(kind);
      });
  }

  const { explain, admin, logger } = options;
  const connect =
    (explain === undefined && admin === undefined) || logger === undefined
      ? undefined
      : createConnectHandler({
          routes: (router) => {
            if (explain !== undefined)
              registerExplain(router, explain, options.explainBuckets);
            if (admin !== undefined) registerAdmin(router, admin);
          },
          logger,
        });
  const explainPrefix = `/${ExplainService.typeName}/`;

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://debug");
    const path = url.pathname;
    if (
      connect !== undefined &&
      (path.startsWith(explainPrefix) || path.startsWith(adminPathPrefix))
    ) {
      connect(req, res);
      return;
    }
    if (options.console?.handle(req, res, path) === true) return;
    res.setHeader("content-type", "text/plain; charset=utf-8");
    switch (path) {
      case "/rlconfig":
        if (
          url.searchParams.get("format") === "json" ||
          (req.headers.accept ?? "").includes("application/json")
        ) {
          res.setHeader("content-type", "application/json");
          res.end(
            rlconfigJson(options.currentConfig(), options.reloadStatus?.()),
          );
          return;
        }
        res.end(options.currentConfig()?.dump() ?? "");
        return;
      case "/stats":
        res.end(statsText(options.statsStore));
        return;
      case "/debug/pprof":
      case "/debug/pprof/":
        res.end(pprofIndex);
        return;
      case "/debug/pprof/profile":
        profile("cpu", url.searchParams, res);
        return;
      case "/debug/pprof/heap":
        profile("heap", url.searchParams, res);
        return;
      default:
        res.end(paths.map(([p, help]) => `${p}: ${help}\n`).join(""));
    }
  });
  return listen(server, { host: options.host, port: options.port });
}
