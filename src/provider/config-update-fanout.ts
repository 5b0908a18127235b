import type { Logger } from "pino";
import { ConfigError } from "../config/config-error.js";
import type {
  ConfigUpdate,
  ConfigUpdateListener,
} from "../config/config-update.js";

/**
 * The subscriber list of a {@link ConfigProvider}, shared by the file and xDS providers:
 * delivers each update to every listener in order; a throwing listener is logged and does not
 * stop the others (nor the provider's watch or stream).
 */
export class ConfigUpdateFanout {
  private readonly listeners = new Set<ConfigUpdateListener>();
  private readonly logger: Logger;

  constructor(logger: Logger) {
    this.logger = logger;
  }

  /** Adds a listener; returns its unsubscribe. The same function twice is two subscriptions. */
  subscribe(listener: ConfigUpdateListener): () => void {
    const entry: ConfigUpdateListener = (update) => {
      listener(update);
    };
    this.listeners.add(entry);
    return () => {
      this.listeners.delete(entry);
    };
  }

  /** Delivers one update to every current listener. */
  deliver(update: ConfigUpdate): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(update);
      } catch (err) {
        // A listener bug must not stop the other listeners or the provider.
        this.logger.error({ err }, "config update listener failed");
      }
    }
  }

  /**
   * Runs a provider's injected `load` and turns anything it throws into a failed update: a
   * {@link ConfigError} as is, anything else (a bug) as `unexpected error loading config`.
   */
  loadSafely<T>(load: (input: T) => ConfigUpdate, input: T): ConfigUpdate {
    try {
      return load(input);
    } catch (err) {
      if (err instanceof ConfigError) return { ok: false, error: err };
      this.logger.error({ err }, "unexpected error loading config");
      const message = err instanceof Error ? err.message : String(err);
      return {
        ok: false,
        error: new ConfigError(`unexpected error loading config: ${message}`, {
          cause: err,
        }),
      };
    }
  }
}
