// Environment of a launched server, by flavour: `neutral` uses the spec's names
// (rate-limit-service.md, docs/settings.md), `reference` the Go service's
// (docs/reference-parity.md#names and docs/migration.md's name table). Only names both
// document are used.
import type { ProfileSettings } from "./model.js";

/** Which environment names the launched server reads. */
export type Flavour = "neutral" | "reference";

/** The counter store the launched server uses. */
export type Backend = "memory" | "kv" | "mc";

/** Where a launched server listens and reads its config. */
export interface LaunchLayout {
  readonly httpPort: number;
  readonly grpcPort: number;
  readonly debugPort: number;
  /** `RUNTIME_ROOT`; files go to `<root>/<subdirectory>/<appdirectory>`. */
  readonly runtimeRoot: string;
  readonly subdirectory: string;
  readonly appDirectory: string;
  /** `host:port` of the store, for kv and mc. */
  readonly store?: string;
}

/**
 * The environment variables for one launched server: loopback listeners, the file provider
 * in directory mode (a change to a file reloads), the backend, no statistics sink, and the
 * section's settings.
 *
 * @throws Error for a flavour without that backend (the reference has no in-process store)
 */
export function launchEnv(
  flavour: Flavour,
  backend: Backend,
  layout: LaunchLayout,
  settings: ProfileSettings,
): Record<string, string> {
  const env: Record<string, string> = {
    HOST: "127.0.0.1",
    PORT: String(layout.httpPort),
    GRPC_HOST: "127.0.0.1",
    GRPC_PORT: String(layout.grpcPort),
    DEBUG_HOST: "127.0.0.1",
    DEBUG_PORT: String(layout.debugPort),
    RUNTIME_ROOT: layout.runtimeRoot,
    RUNTIME_SUBDIRECTORY: layout.subdirectory,
    RUNTIME_APPDIRECTORY: layout.appDirectory,
    RUNTIME_WATCH_ROOT: "false",
    LOG_LEVEL: "warn",
  };
  if (settings.globalShadowMode === true) env["SHADOW_MODE"] = "true";
  if (settings.responseHeaders === true)
    env["LIMIT_RESPONSE_HEADERS_ENABLED"] = "true";
  if (settings.healthNeedsConfig === true)
    env["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"] = "true";
  const store = layout.store ?? "";
  if (flavour === "neutral") {
    env["USE_PUSHSTATS"] = "false";
    env["BACKEND_TYPE"] = backend;
    if (backend === "kv") {
      env["KV_SOCKET_TYPE"] = "tcp";
      env["KV_URL"] = store;
    } else if (backend === "mc") {
      env["MC_HOST_PORT"] = store;
    }
    return env;
  }
  env["USE_STATSD"] = "false";
  switch (backend) {
    case "memory":
      throw new Error(
        "the reference flavour has no memory backend: use --backend kv or mc",
      );
    case "kv":
      env["BACKEND_TYPE"] = "redis";
      env["REDIS_SOCKET_TYPE"] = "tcp";
      env["REDIS_URL"] = store;
      break;
    case "mc":
      env["BACKEND_TYPE"] = "memcache";
      env["MEMCACHE_HOST_PORT"] = store;
      break;
  }
  return env;
}
