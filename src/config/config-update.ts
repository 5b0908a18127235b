import type { ConfigError } from "./config-error.js";
import type { RateLimitConfig } from "./rate-limit-config.js";

/** Result of one config load by a provider: a new config or why it was rejected. */
export type ConfigUpdate =
  | { readonly ok: true; readonly config: RateLimitConfig }
  | { readonly ok: false; readonly error: ConfigError };

/** Receives config updates from a provider. */
export type ConfigUpdateListener = (update: ConfigUpdate) => void;
