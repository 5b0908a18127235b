// The xDS configuration client (CONFIG_TYPE=GRPC_XDS_SOTW).

import {
  durationMs,
  flag,
  float,
  integer,
  map,
  mapOf,
  text,
} from "./codecs.js";
import { nonNegativeInteger } from "../env-parsers.js";
import { setting, settingsGroup } from "./define.js";

/** `k=v,k2=v2`, split at the first `=`; items without `=` are skipped (reference behaviour). */
function parseNodeMetadata(value: string): Record<string, string> {
  const entries: [string, string][] = [];
  for (const item of value.split(",")) {
    const at = item.indexOf("=");
    if (at >= 0) entries.push([item.slice(0, at), item.slice(at + 1)]);
  }
  return Object.fromEntries(entries);
}
const nodeMetadata = mapOf(parseNodeMetadata);

export const xds = settingsGroup("xds", {
  /** Node id sent to the xDS server. */
  xdsNodeId: setting({
    env: "CONFIG_GRPC_XDS_NODE_ID",
    codec: text,
    default: "default",
    meaning: "Node id sent to the xDS server.",
  }),
  /**
   * Node metadata string fields, from `k=v,k2=v2` split at the first `=`; items without `=` are
   * ignored, as in the reference.
   */
  xdsNodeMetadata: setting({
    env: "CONFIG_GRPC_XDS_NODE_METADATA",
    codec: nodeMetadata,
    default: {},
    meaning: "Node metadata as k=v,k2=v2.",
  }),
  /** xDS server address. */
  xdsServerUrl: setting({
    env: "CONFIG_GRPC_XDS_SERVER_URL",
    codec: text,
    default: "localhost:18000",
    meaning: "xDS server address.",
  }),
  /**
   * Connect retry interval in milliseconds; the reference ignores it (docs/reference-parity.md#xds)
   * (Go duration).
   */
  xdsServerConnectRetryIntervalMs: setting({
    env: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    codec: durationMs("non-negative"),
    default: 3 * 1000,
    meaning:
      "Connect retry interval (kept for compatibility; backoff settings govern retries).",
  }),
  /**
   * gRPC metadata sent on the xDS stream, from `k1:v1,k2:v2`; may hold credentials, so its value
   * never appears in errors.
   */
  xdsClientAdditionalHeaders: setting({
    env: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    codec: map,
    default: {},
    meaning: "Headers sent to the xDS server, as k1:v1,k2:v2.",
    secret: true,
  }),
  /** Use TLS towards the xDS server. */
  xdsServerUseTls: setting({
    env: "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    codec: flag,
    default: false,
    meaning: "Use TLS towards the xDS server.",
  }),
  /** Client certificate file for xDS. */
  xdsClientTlsCert: setting({
    env: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    codec: text,
    default: "",
    meaning: "Client certificate file for xDS.",
  }),
  /** Client key file for xDS. */
  xdsClientTlsKey: setting({
    env: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    codec: text,
    default: "",
    meaning: "Client key file for xDS.",
  }),
  /** CA file added to the system roots to verify the xDS server. */
  xdsServerTlsCacert: setting({
    env: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    codec: text,
    default: "",
    meaning: "CA file to verify the xDS server.",
  }),
  /** Name to verify in the xDS server certificate instead of the host. */
  xdsServerTlsSan: setting({
    env: "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    codec: text,
    default: "",
    meaning: "Name to verify in the xDS server certificate.",
  }),
  /** First reconnect wait in milliseconds (Go duration). */
  xdsClientBackoffInitialIntervalMs: setting({
    env: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    codec: durationMs("non-negative"),
    default: 10 * 1000,
    meaning:
      "First wait before reconnecting to the xDS server; must be greater than 0.",
  }),
  /** Largest reconnect wait in milliseconds (Go duration). */
  xdsClientBackoffMaxIntervalMs: setting({
    env: "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    codec: durationMs("non-negative"),
    default: 60 * 1000,
    meaning: "Largest reconnect wait.",
  }),
  /**
   * Jitter spread of the xDS reconnect wait as a ratio, ≥ 0 (above 1 acts as 1); the wait itself
   * doubles from the initial interval up to the maximum. The reference used this value as the
   * growth factor, a constant wait with the default (docs/reference-parity.md#diff-xds-backoff).
   */
  xdsClientBackoffRandomFactor: setting({
    env: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    codec: float({ min: 0, max: Number.POSITIVE_INFINITY }),
    default: 0.5,
    unit: "ratio",
    meaning:
      "Jitter spread of the reconnect wait, 0 to 1; the wait itself doubles from the initial interval up to the maximum (see docs/xds.md).",
  }),
  /** Randomise each reconnect wait. */
  xdsClientBackoffJitter: setting({
    env: "XDS_CLIENT_BACKOFF_JITTER",
    codec: flag,
    default: true,
    meaning: "Randomise reconnect waits.",
  }),
  /**
   * Largest xDS message accepted, in bytes; 0 keeps the gRPC default of 4 MiB
   * .
   */
  xdsClientMaxMsgSizeBytes: setting({
    env: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    codec: integer(nonNegativeInteger),
    default: 0,
    unit: "bytes",
    meaning:
      "Largest xDS message accepted, in bytes; 0 keeps the gRPC default (4 MiB).",
  }),
});
