import type { AppContext } from "./app-context.js";
import type { ConfigUpdate } from "./config/config-update.js";
import type { NamedYamlRoot } from "./config/load-config.js";
import type { ConfigProvider } from "./provider/config-provider.js";
import { SettingsError } from "./settings/settings-error.js";
import type { Settings } from "./settings/settings.js";

/**
 * Builds the xDS (ADS state-of-the-world) config provider (`CONFIG_TYPE=GRPC_XDS_SOTW`).
 *
 * @param load - turns the resources of one response into a config update (all or nothing)
 * @throws {@link SettingsError} while the provider is not built
 */
export function createXdsProvider(
  settings: Settings,
  _context: AppContext,
  _load: (roots: readonly NamedYamlRoot[]) => ConfigUpdate,
): ConfigProvider {
  throw new SettingsError([
    `CONFIG_TYPE=${settings.configType}: configuration from a management server is not implemented in this build yet; use CONFIG_TYPE=FILE`,
  ]);
}
