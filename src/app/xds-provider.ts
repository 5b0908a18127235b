import { accessSync, constants } from "node:fs";
import type { AppContext } from "./app-context.js";
import type { ConfigUpdate } from "../config/config-update.js";
import type { NamedYamlRoot } from "../config/load-config.js";
import type { ConfigProvider } from "../provider/config-provider.js";
import { toAdsBaseUrl } from "../provider/xds/ads-stream.js";
import { createXdsProvider as createXdsConfigProvider } from "../provider/xds/xds-provider.js";
import { SettingsError } from "../settings/settings-error.js";
import type { Settings } from "../settings/settings.js";

/**
 * Builds the xDS (ADS state-of-the-world) config provider (`CONFIG_TYPE=GRPC_XDS_SOTW`) from the
 * `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` settings; see docs/xds.md.
 * `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` is read but has no effect, as in the reference
 * (docs/reference-parity.md#xds): the `XDS_CLIENT_BACKOFF_*` settings govern every retry.
 *
 * @param load - turns the resources of one response into a config update (all or nothing)
 * @throws {@link SettingsError} listing every problem: an invalid server address, a zero
 *   initial backoff interval, a client certificate without key (or the reverse), or a TLS file
 *   that cannot be read
 */
export function createXdsProvider(
  settings: Settings,
  context: AppContext,
  load: (roots: readonly NamedYamlRoot[]) => ConfigUpdate,
): ConfigProvider {
  const problems: string[] = [];
  const useTls = settings.xdsServerUseTls;
  try {
    toAdsBaseUrl(settings.xdsServerUrl, useTls);
  } catch (err) {
    problems.push(
      `CONFIG_GRPC_XDS_SERVER_URL=${JSON.stringify(settings.xdsServerUrl)}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (settings.xdsClientBackoffInitialIntervalMs <= 0) {
    problems.push(
      "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: expected a duration greater than 0, e.g. 10s",
    );
  }
  if (useTls) {
    const cert = settings.xdsClientTlsCert;
    const key = settings.xdsClientTlsKey;
    if ((cert === "") !== (key === "")) {
      problems.push(
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both or neither",
      );
    }
    for (const [variable, path] of [
      ["CONFIG_GRPC_XDS_SERVER_TLS_CACERT", settings.xdsServerTlsCacert],
      ["CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert],
      ["CONFIG_GRPC_XDS_CLIENT_TLS_KEY", key],
    ] as const) {
      if (path === "") continue;
      try {
        accessSync(path, constants.R_OK);
      } catch {
        problems.push(`${variable}=${JSON.stringify(path)}: cannot read file`);
      }
    }
  }
  if (problems.length > 0) throw new SettingsError(problems);

  return createXdsConfigProvider({
    serverUrl: settings.xdsServerUrl,
    nodeId: settings.xdsNodeId,
    nodeMetadata: settings.xdsNodeMetadata,
    additionalHeaders: settings.xdsClientAdditionalHeaders,
    tls: useTls
      ? {
          caFile: settings.xdsServerTlsCacert,
          certFile: settings.xdsClientTlsCert,
          keyFile: settings.xdsClientTlsKey,
          serverName: settings.xdsServerTlsSan,
        }
      : undefined,
    maxReceiveBytes: settings.xdsClientMaxMsgSizeBytes,
    backoff: {
      initialIntervalMs: settings.xdsClientBackoffInitialIntervalMs,
      maxIntervalMs: settings.xdsClientBackoffMaxIntervalMs,
      randomFactor: settings.xdsClientBackoffRandomFactor,
      jitter: settings.xdsClientBackoffJitter,
    },
    load,
    logger: context.logger.child({ component: "xds-provider" }),
  });
}
