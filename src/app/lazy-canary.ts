// The config canary loaded on demand (issue 34: optional subsystems load only when used). The
// canary's modules (src/canary: the candidate's loader, ledger and report) are imported when
// CANARY_CONFIG_DIR names a candidate at start, or on the first StartCanary, GetCanaryReport
// or StopCanary call; until then no process pays for them.

import type { CanaryAdmin } from "../admin/admin-routes.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import type { DecisionChannel } from "../limiter/decision-channel.js";
import type { RateLimitPipeline } from "../limiter/pipeline.js";
import type { Settings } from "../settings/settings.js";
import type { AppContext } from "./app-context.js";
import type { ConfigCanary } from "./config-canary.js";

/** The canary's admin calls and its shutdown, whether or not its modules were loaded. */
export interface LazyConfigCanary {
  readonly admin: CanaryAdmin;
  /** Stops a running canary (nothing when the canary was never loaded). */
  close(): Promise<void>;
}

/**
 * Builds the config canary lazily: with `CANARY_CONFIG_DIR` set it is built (and that
 * candidate started) now, as `createConfigCanary` does; otherwise on the first admin call. A
 * canary that was never loaded answers every call exactly as a loaded idle one would (the call
 * loads it first), and never subscribes to the decisions.
 *
 * @param storePipeline - the pipeline over the live store (see `createConfigCanary`)
 * @throws what `createConfigCanary` throws for the `CANARY_CONFIG_DIR` candidate (errors other
 *   than a `ConfigError`)
 */
export async function createLazyConfigCanary(
  settings: Settings,
  context: AppContext,
  storePipeline: RateLimitPipeline,
  decisions: DecisionChannel,
  overrides?: OverrideLookup,
): Promise<LazyConfigCanary> {
  let loading: Promise<ConfigCanary> | undefined;
  const load = (): Promise<ConfigCanary> =>
    (loading ??= import("./config-canary.js").then((m) =>
      m.createConfigCanary(
        settings,
        context,
        storePipeline,
        decisions,
        overrides,
      ),
    ));
  if (settings.canaryConfigDir !== "") await load();
  return {
    admin: {
      startCanary: async (request, callContext) =>
        (await load()).admin.startCanary(request, callContext),
      getCanaryReport: async (request, callContext) =>
        (await load()).admin.getCanaryReport(request, callContext),
      stopCanary: async (request, callContext) =>
        (await load()).admin.stopCanary(request, callContext),
    },
    async close() {
      if (loading !== undefined) await (await loading).canary.close();
    },
  };
}
