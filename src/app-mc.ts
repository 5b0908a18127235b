import type { AppContext } from "./app-context.js";
import type { RateLimitCache } from "./limiter/rate-limit-cache.js";
import { SettingsError } from "./settings/settings-error.js";
import type { Settings } from "./settings/settings.js";

/**
 * Builds the memcached-protocol backend (`BACKEND_TYPE=mc`) from settings.
 *
 * @throws {@link SettingsError} while the backend is not built
 */
export function createMcCache(
  settings: Settings,
  _context: AppContext,
): RateLimitCache {
  throw new SettingsError([
    `BACKEND_TYPE=${settings.backendType}: the memcached-protocol backend is not implemented in this build yet; set BACKEND_TYPE=memory`,
  ]);
}
