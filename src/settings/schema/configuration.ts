// Configuration source: files in a watched runtime tree, or xDS (see ./xds.ts).

import { flag, oneOf, text } from "./codecs.js";
import { setting, settingsGroup } from "./define.js";

/** Where rate-limit configuration comes from (`CONFIG_TYPE`). */
export type ConfigType = "FILE" | "GRPC_XDS_SOTW";

const configType = oneOf<ConfigType>(
  new Map<string, ConfigType>([
    ["FILE", "FILE"],
    ["GRPC_XDS_SOTW", "GRPC_XDS_SOTW"],
  ]),
  "FILE or GRPC_XDS_SOTW",
);

export const configuration = settingsGroup("configuration", {
  /** Configuration source, exactly `FILE` or `GRPC_XDS_SOTW`. */
  configType: setting({
    env: "CONFIG_TYPE",
    codec: configType,
    default: "FILE",
    meaning: "Configuration source: FILE or GRPC_XDS_SOTW.",
  }),
  /**
   * Start the servers without waiting for the first configuration
   * .
   */
  forceStartWithoutInitialConfig: setting({
    env: "FORCE_START_WITHOUT_INITIAL_CONFIG",
    codec: flag,
    default: false,
    meaning: "Start serving without waiting for the first configuration.",
  }),
  /** Root of the watched runtime tree. */
  runtimeRoot: setting({
    env: "RUNTIME_ROOT",
    codec: text,
    default: "/srv/runtime_data/current",
    meaning: "Root of the watched configuration tree.",
  }),
  /** Subdirectory below the root. */
  runtimeSubdirectory: setting({
    env: "RUNTIME_SUBDIRECTORY",
    codec: text,
    default: "",
    meaning: "Subdirectory below the root.",
  }),
  /** Directory holding the YAML files. */
  runtimeAppDirectory: setting({
    env: "RUNTIME_APPDIRECTORY",
    codec: text,
    default: "config",
    meaning: "Directory holding the YAML files.",
  }),
  /** Ignore dot files in the runtime tree. */
  runtimeIgnoreDotFiles: setting({
    env: "RUNTIME_IGNOREDOTFILES",
    codec: flag,
    default: false,
    meaning: "Ignore dot files.",
  }),
  /**
   * `true`: reload when the root symlink is re-pointed; `false`: reload on changes inside the
   * application directory.
   */
  runtimeWatchRoot: setting({
    env: "RUNTIME_WATCH_ROOT",
    codec: flag,
    default: true,
    meaning:
      "true: reload when the root symlink moves; false: reload on file changes in the directory.",
  }),
  /** Allow one domain in several files or resources. */
  mergeDomainConfig: setting({
    env: "MERGE_DOMAIN_CONFIG",
    codec: flag,
    default: false,
    meaning: "Allow one domain in several files.",
  }),
});
