// The memcached-protocol backend (BACKEND_TYPE=mc).

import { nonNegativeInteger } from "../env-parsers.js";
import { quote } from "../env-reader.js";
import { durationMs, flag, integer, list, text } from "./codecs.js";
import {
  setting,
  settingsGroup,
  type SettingsCheck,
  type SettingsOf,
} from "./define.js";
import type { rateLimiting } from "./rate-limiting.js";

export const mc = settingsGroup("mc backend", {
  /** `host:port` nodes, in key-mapping order; exclusive with `MC_SRV`. */
  mcHostPort: setting({
    env: "MC_HOST_PORT",
    codec: list,
    default: [],
    meaning: "Comma-separated host:port nodes; exclusive with MC_SRV.",
  }),
  /** SRV record `_service._proto.name` listing the nodes; exclusive with `MC_HOST_PORT`. */
  mcSrv: setting({
    env: "MC_SRV",
    codec: text,
    default: "",
    meaning:
      "SRV record (_service._proto.name) listing the nodes; exclusive with MC_HOST_PORT.",
  }),
  /** Milliseconds between SRV re-resolutions; 0 never refreshes (Go duration). */
  mcSrvRefreshMs: setting({
    env: "MC_SRV_REFRESH",
    codec: durationMs("non-negative"),
    default: 0,
    meaning: "SRV refresh period; 0 never refreshes.",
  }),
  /** Idle connections kept per node, ≥ 0. */
  mcMaxIdleConns: setting({
    env: "MC_MAX_IDLE_CONNS",
    codec: integer(nonNegativeInteger),
    default: 2,
    unit: "connections per node",
    meaning: "Idle connections kept per node.",
  }),
  /** Use TLS. */
  mcTls: setting({
    env: "MC_TLS",
    codec: flag,
    default: false,
    meaning: "Use TLS.",
  }),
  /** Client certificate file. */
  mcTlsClientCert: setting({
    env: "MC_TLS_CLIENT_CERT",
    codec: text,
    default: "",
    meaning: "Client certificate file.",
  }),
  /** Client key file. */
  mcTlsClientKey: setting({
    env: "MC_TLS_CLIENT_KEY",
    codec: text,
    default: "",
    meaning: "Client key file.",
  }),
  /** CA file added to the system roots. */
  mcTlsCacert: setting({
    env: "MC_TLS_CACERT",
    codec: text,
    default: "",
    meaning: "CA file.",
  }),
  /** Verify the chain but not the host name. */
  mcTlsSkipHostnameVerification: setting({
    env: "MC_TLS_SKIP_HOSTNAME_VERIFICATION",
    codec: flag,
    default: false,
    meaning: "Verify the certificate chain but not the host name.",
  }),
});

const srvName = /^_(.+?)\._(.+?)\.(.+)$/;

/** Exactly one node source (docs/reference-parity.md#mc-nodes). */
export const mcChecks: readonly SettingsCheck<
  SettingsOf<typeof mc> & Pick<SettingsOf<typeof rateLimiting>, "backendType">
>[] = [
  (settings, reader) => {
    if (settings.backendType !== "mc" || !reader.allValid("BACKEND_TYPE"))
      return;
    const hasHosts = settings.mcHostPort.length > 0;
    const hasSrv = settings.mcSrv !== "";
    if (hasHosts && hasSrv) {
      reader.problem(
        `MC_HOST_PORT=${quote(settings.mcHostPort.join(","))} and MC_SRV=${quote(settings.mcSrv)} are both set: expected only one of them with BACKEND_TYPE=mc`,
      );
    } else if (!hasHosts && !hasSrv) {
      reader.problem(
        "MC_HOST_PORT and MC_SRV are both empty: expected one of them with BACKEND_TYPE=mc",
      );
    } else if (hasSrv && !srvName.test(settings.mcSrv)) {
      reader.problem(
        `MC_SRV=${quote(settings.mcSrv)}: expected an SRV record name _service._proto.name`,
      );
    }
  },
];
