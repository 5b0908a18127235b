import { createServer } from "node:http";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import type { StatsStore } from "../stats/stats-store.js";
import { listen, type Listening } from "./listen.js";

/** Options of {@link startDebugServer}. */
export interface DebugServerOptions {
  /** Returns the config in force, if any. */
  readonly currentConfig: () => RateLimitConfig | undefined;
  readonly statsStore: StatsStore;
  /** Bind host (`DEBUG_HOST`). */
  readonly host: string;
  /** Bind port (`DEBUG_PORT`); 0 picks a free one. */
  readonly port: number;
}

const paths: readonly (readonly [string, string])[] = [
  ["/rlconfig", "print out the currently loaded configuration for debugging"],
  ["/stats", "print out stats"],
];

/**
 * Starts the debug server: `/` (and any unknown path) lists the paths, `/rlconfig` dumps the
 * loaded config in the reference's format (empty body before the first load), `/stats` lists
 * every statistic with its current value (the reference shows only runtime variables).
 *
 * @throws the listen error when the address cannot be bound
 */
export function startDebugServer(
  options: DebugServerOptions,
): Promise<Listening> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0];
    res.setHeader("content-type", "text/plain; charset=utf-8");
    if (path === "/rlconfig") {
      res.end(options.currentConfig()?.dump() ?? "");
      return;
    }
    if (path === "/stats") {
      const { counters, gauges, timers } = options.statsStore.snapshot();
      let body = "";
      for (const c of counters) body += `${c.name}: ${c.value()}\n`;
      for (const g of gauges) body += `${g.name}: ${g.value()}\n`;
      for (const t of timers) {
        const { count, sumMs } = t.value();
        body += `${t.name}: count=${count} sum_ms=${sumMs.toFixed(3)}\n`;
      }
      res.end(body);
      return;
    }
    res.end(paths.map(([p, help]) => `${p}: ${help}\n`).join(""));
  });
  return listen(server, { host: options.host, port: options.port });
}
