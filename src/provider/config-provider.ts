import type { ConfigUpdateListener } from "../config/config-update.js";

/** A source of rate-limit configuration (file tree, xDS management server). */
export interface ConfigProvider {
  /**
   * Registers a listener for every config update (success or failure); returns a function
   * that removes it. Updates are delivered in order, one at a time.
   */
  subscribe(listener: ConfigUpdateListener): () => void;
  /**
   * Starts the provider. For the file provider the initial load has been delivered to the
   * listeners when the promise resolves; the watch is active from then on.
   */
  start(): Promise<void>;
  /** Stops watching and releases resources; idempotent. */
  close(): Promise<void>;
}
