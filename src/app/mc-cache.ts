import { readFileSync } from "node:fs";
import type { AppContext } from "./app-context.js";
import { hasIllegalKeyCharacter } from "../backends/mc/mc-keys.js";
import {
  parseNodeAddress,
  type McTlsOptions,
} from "../backends/mc/mc-options.js";
import { McCounterBackend } from "../backends/mc/mc-counter-backend.js";
import { RateLimitPipeline } from "../limiter/pipeline.js";
import { SettingsError } from "../settings/settings-error.js";
import type { Settings } from "../settings/settings.js";

/**
 * Builds the memcached-protocol backend (`BACKEND_TYPE=mc`) from the `MC_*` settings and
 * `CACHE_KEY_PREFIX`; reads the `MC_TLS_*` files. Nodes are contacted in `start()`.
 * `failOpen` false makes node failures reject (for a `BACKEND_FAILURE_MODE` other than
 * `error`); true keeps the reference's fail-open reads.
 *
 * @throws {@link SettingsError} listing every problem: a malformed `MC_HOST_PORT` item, an
 *   unreadable TLS file, a client certificate without key (or the reverse), a
 *   `CACHE_KEY_PREFIX` with whitespace or control characters
 */
export function createMcCache(
  settings: Settings,
  context: AppContext,
  failOpen = true,
): RateLimitPipeline<McCounterBackend> {
  const problems: string[] = [];
  for (const item of settings.mcHostPort) {
    try {
      parseNodeAddress(item);
    } catch (err) {
      problems.push(`MC_HOST_PORT: ${(err as Error).message}`);
    }
  }
  if (hasIllegalKeyCharacter(settings.cacheKeyPrefix)) {
    problems.push(
      `CACHE_KEY_PREFIX=${JSON.stringify(settings.cacheKeyPrefix)}: contains whitespace or control characters, which memcached keys cannot hold (BACKEND_TYPE=mc)`,
    );
  }
  let tls: McTlsOptions | undefined;
  if (settings.mcTls) {
    const read = (name: string, path: string): Buffer | undefined => {
      if (path === "") return undefined;
      try {
        return readFileSync(path);
      } catch (err) {
        problems.push(
          `${name}=${JSON.stringify(path)}: cannot read the file: ${(err as Error).message}`,
        );
        return undefined;
      }
    };
    const ca = read("MC_TLS_CACERT", settings.mcTlsCacert);
    const cert = read("MC_TLS_CLIENT_CERT", settings.mcTlsClientCert);
    const key = read("MC_TLS_CLIENT_KEY", settings.mcTlsClientKey);
    if (
      (settings.mcTlsClientCert === "") !==
      (settings.mcTlsClientKey === "")
    ) {
      problems.push(
        "MC_TLS_CLIENT_CERT and MC_TLS_CLIENT_KEY: expected both or neither",
      );
    }
    tls = {
      ...(ca !== undefined ? { ca } : {}),
      ...(cert !== undefined && key !== undefined ? { cert, key } : {}),
      skipHostnameVerification: settings.mcTlsSkipHostnameVerification,
    };
  }
  if (problems.length > 0) throw new SettingsError(problems);
  const backend = new McCounterBackend({
    clock: context.clock,
    logger: context.logger.child({ component: "mc" }),
    health: context.health,
    statsStore: context.statsManager.store,
    hostPorts: settings.mcHostPort,
    srv: settings.mcSrv,
    srvRefreshMs: settings.mcSrvRefreshMs,
    maxIdleConns: settings.mcMaxIdleConns,
    ...(tls !== undefined ? { tls } : {}),
    failOpen,
  });
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT does not apply to mc, as upstream.
  return new RateLimitPipeline({
    backend,
    decider: context.decider,
    statsStore: context.statsManager.store,
    leaseClock: context.clock,
  });
}
