// Listeners: HTTP, debug and gRPC addresses, gRPC connection ageing, HTTP/2 abuse limits
// and TLS.

import { positiveInteger } from "../env-parsers.js";
import { quote } from "../env-reader.js";
import { EnvParseError, parseList } from "../env-parsers.js";
import {
  custom,
  durationMs,
  flag,
  integer,
  listenPort,
  lowerCase,
  oneOf,
  text,
} from "./codecs.js";
import {
  setting,
  settingsGroup,
  type SettingsCheck,
  type SettingsOf,
} from "./define.js";

/** Longest duration a timer takes (Node's limit is 2^31 - 1 ms, about 24.8 days): 576h. */
const maxTimerMs = 576 * 60 * 60 * 1000;

/** HTTP/2 implementation of the gRPC listener (`GRPC_HTTP2_ENGINE`). */
export type GrpcHttp2Engine = "builtin" | "node";

export const listeners = settingsGroup("listeners", {
  /** HTTP listener host for `/json` and `/healthcheck`. */
  host: setting({
    env: "HOST",
    codec: text,
    default: "0.0.0.0",
    meaning: "HTTP listener host (/json, /healthcheck).",
  }),
  /** HTTP listener TCP port, 0–65535. */
  port: setting({
    env: "PORT",
    codec: integer(listenPort),
    default: 8080,
    meaning: "HTTP listener port.",
  }),
  /**
   * Serve `ratelimit.explain.v1.ExplainService` on the gRPC port and the HTTP port (gRPC-web,
   * Connect, `POST /explain`). Off, they answer UNIMPLEMENTED / 404 naming this setting; the
   * debug port serves Explain whatever it says (docs/explain.md).
   */
  explainEnabled: setting({
    env: "EXPLAIN_ENABLED",
    codec: flag,
    default: false,
    meaning:
      "Serve the Explain API on the gRPC and HTTP ports (it discloses config and counters); the debug port always does.",
  }),
  /**
   * Origins (`scheme://host[:port]`, or `*` for any) whose browser pages may call the HTTP port
   * with gRPC-web or Connect (CORS with Connect's header lists); empty disables CORS.
   */
  corsAllowedOrigins: setting({
    env: "CORS_ALLOWED_ORIGINS",
    codec: custom(parseOrigins, (value) =>
      value.length === 0 ? "(empty)" : value.join(","),
    ),
    default: [],
    meaning:
      "Comma-separated origins allowed to call the HTTP port from a browser (CORS); * allows any; empty disables CORS.",
  }),
  /** Debug listener host. */
  debugHost: setting({
    env: "DEBUG_HOST",
    codec: text,
    default: "0.0.0.0",
    meaning: "Debug listener host (/rlconfig, /stats).",
  }),
  /** Debug listener TCP port, 0–65535. */
  debugPort: setting({
    env: "DEBUG_PORT",
    codec: integer(listenPort),
    default: 6070,
    meaning: "Debug listener port.",
  }),
  /** gRPC listener host. */
  grpcHost: setting({
    env: "GRPC_HOST",
    codec: text,
    default: "0.0.0.0",
    meaning: "gRPC listener host.",
  }),
  /** gRPC listener TCP port, 0–65535. */
  grpcPort: setting({
    env: "GRPC_PORT",
    codec: integer(listenPort),
    default: 8081,
    meaning: "gRPC listener port.",
  }),
  /** Unix socket path for gRPC; when non-empty it replaces `GRPC_HOST:GRPC_PORT`. */
  grpcUds: setting({
    env: "GRPC_UDS",
    codec: text,
    default: "",
    meaning: "Unix socket path for gRPC instead of host and port.",
  }),
  /**
   * Milliseconds after which a gRPC connection is sent GOAWAY, ±10 % jitter; 0 disables
   * (Go duration).
   */
  grpcMaxConnectionAgeMs: setting({
    env: "GRPC_MAX_CONNECTION_AGE",
    codec: durationMs("non-negative"),
    default: 24 * 60 * 60 * 1000,
    meaning:
      "Age after which a gRPC connection is sent GOAWAY (±10 % jitter); 0 disables.",
  }),
  /**
   * Milliseconds after the GOAWAY before the connection is closed by force
   * (Go duration).
   */
  grpcMaxConnectionAgeGraceMs: setting({
    env: "GRPC_MAX_CONNECTION_AGE_GRACE",
    codec: durationMs("non-negative"),
    default: 60 * 60 * 1000,
    meaning: "Extra time after GOAWAY before the connection is closed.",
  }),
  // The HTTP/2 abuse limits: defaults as `http2LimitDefaults` in src/http2/limits.ts,
  // which says where each comes from (settings/ may not import it; a unit test keeps them
  // equal).
  /** Most gRPC connections open at once in this process, ≥ 1; more are closed on accept. */
  grpcMaxConnections: setting({
    env: "GRPC_MAX_CONNECTIONS",
    codec: integer(positiveInteger),
    default: 10_000,
    unit: "connections",
    meaning:
      "Most gRPC connections open at once per process; more are closed on accept.",
  }),
  /**
   * Milliseconds a new gRPC connection has for the TLS handshake, the client preface and its
   * first SETTINGS before it is closed, > 0 (Go duration, at most 576h: a timer's limit).
   */
  grpcHandshakeTimeoutMs: setting({
    env: "GRPC_HANDSHAKE_TIMEOUT",
    codec: durationMs("positive", maxTimerMs),
    default: 10_000,
    meaning:
      "Time a new gRPC connection has for the TLS handshake, HTTP/2 preface and first SETTINGS before it is closed.",
  }),
  /**
   * Milliseconds a gRPC connection may stay with no open stream before GOAWAY; 0 disables
   * (Go duration, at most 576h).
   */
  grpcMaxConnectionIdleMs: setting({
    env: "GRPC_MAX_CONNECTION_IDLE",
    codec: durationMs("non-negative", maxTimerMs),
    default: 5 * 60 * 1000,
    meaning:
      "Time a gRPC connection may stay with no open stream before it is sent GOAWAY; 0 disables.",
  }),
  /**
   * grpc-go's keepalive enforcement `MinTime`, in ms: a PING sooner than this after the
   * previous one, with no response sent in between, is a strike; the third strike ends the
   * connection (GOAWAY ENHANCE_YOUR_CALM "too_many_pings"); 0 disables (Go duration).
   */
  grpcKeepaliveMinTimeMs: setting({
    env: "GRPC_KEEPALIVE_MIN_TIME",
    codec: durationMs("non-negative"),
    default: 5 * 60 * 1000,
    meaning:
      "Least time between a client's PINGs without a response in between; the third PING sooner ends the connection (GOAWAY ENHANCE_YOUR_CALM); 0 disables.",
  }),
  /** Stream resets (RST_STREAM) a gRPC connection's peer may send at once, ≥ 1. */
  grpcStreamResetBurst: setting({
    env: "GRPC_STREAM_RESET_BURST",
    codec: integer(positiveInteger),
    default: 1000,
    unit: "resets",
    meaning:
      "Stream resets a gRPC client may send at once (rapid-reset token bucket); beyond the bucket the connection is sent GOAWAY.",
  }),
  /** Stream resets per second refilled into that bucket, ≥ 1. */
  grpcStreamResetRate: setting({
    env: "GRPC_STREAM_RESET_RATE",
    codec: integer(positiveInteger),
    default: 1000,
    unit: "resets per second",
    meaning:
      "Stream resets per second refilled into the GRPC_STREAM_RESET_BURST bucket.",
  }),
  /**
   * Request header lists and bodies one gRPC connection's open streams may hold at once, in
   * bytes, ≥ 65536 (the node engine rounds it up to whole megabytes).
   */
  grpcMaxConnectionMemoryBytes: setting({
    env: "GRPC_MAX_CONNECTION_MEMORY",
    codec: integer({ min: 65_536, max: Number.MAX_SAFE_INTEGER }),
    default: 16 * 1024 * 1024,
    unit: "bytes",
    meaning:
      "Request headers and bodies one gRPC connection's open streams may hold (default 16 MiB); beyond it requests are refused or the connection is ended (ENHANCE_YOUR_CALM).",
  }),
  /**
   * HTTP/2 implementation of the gRPC listener: `builtin`, the service's own (lean per call:
   * docs/performance.md "Built-in HTTP/2 engine"), or `node`, node:http2 (the fallback).
   */
  grpcHttp2Engine: setting({
    env: "GRPC_HTTP2_ENGINE",
    codec: oneOf<GrpcHttp2Engine>(
      new Map<string, GrpcHttp2Engine>([
        ["", "builtin"],
        ["builtin", "builtin"],
        ["node", "node"],
      ]),
      "builtin or node",
      { fold: lowerCase },
    ),
    default: "builtin",
    meaning:
      "HTTP/2 implementation of the gRPC listener: builtin (the service's own) or node (node:http2).",
  }),
  /** Serve gRPC over TLS; needs cert and key. */
  grpcServerUseTls: setting({
    env: "GRPC_SERVER_USE_TLS",
    codec: flag,
    default: false,
    meaning: "Serve gRPC over TLS.",
  }),
  /** Server certificate chain file, watched for changes. */
  grpcServerTlsCert: setting({
    env: "GRPC_SERVER_TLS_CERT",
    codec: text,
    default: "",
    meaning: "Server certificate chain file (reloaded on change).",
  }),
  /** Server private key file. */
  grpcServerTlsKey: setting({
    env: "GRPC_SERVER_TLS_KEY",
    codec: text,
    default: "",
    meaning: "Server private key file.",
  }),
  /**
   * CA file for client certificates; non-empty turns on mutual TLS, which needs
   * `GRPC_SERVER_USE_TLS`.
   */
  grpcClientTlsCacert: setting({
    env: "GRPC_CLIENT_TLS_CACERT",
    codec: text,
    default: "",
    meaning:
      "CA file for client certificates; set to require mutual TLS (needs GRPC_SERVER_USE_TLS).",
  }),
  /** DNS name the client certificate must carry under mutual TLS. */
  grpcClientTlsSan: setting({
    env: "GRPC_CLIENT_TLS_SAN",
    codec: text,
    default: "",
    meaning: "DNS name the client certificate must carry.",
  }),
  /**
   * Largest gRPC, gRPC-web or Connect request message in bytes, 1–4294967295; larger ones get
   * RESOURCE_EXHAUSTED (docs/limits.md). Default: grpc-go's receive limit, the reference's.
   */
  requestMaxGrpcBytes: setting({
    env: "REQUEST_MAX_GRPC_BYTES",
    codec: integer({ min: 1, max: 4_294_967_295 }),
    default: 4 * 1024 * 1024,
    unit: "bytes",
    meaning:
      "Largest gRPC / gRPC-web / Connect request message; larger ones get RESOURCE_EXHAUSTED (docs/limits.md).",
  }),
  /** Largest `/json` request body in bytes, ≥ 1; larger ones get 413 (docs/limits.md). */
  requestMaxJsonBytes: setting({
    env: "REQUEST_MAX_JSON_BYTES",
    codec: integer(positiveInteger),
    default: 1024 * 1024,
    unit: "bytes",
    meaning:
      "Largest /json request body; larger ones get 413 (docs/limits.md).",
  }),
});

/** gRPC TLS: mutual TLS needs TLS; TLS needs a certificate and key. */
export const listenerChecks: readonly SettingsCheck<
  SettingsOf<typeof listeners>
>[] = [
  (settings, reader) => {
    if (!reader.allValid("GRPC_SERVER_USE_TLS")) return;
    if (settings.grpcClientTlsCacert !== "" && !settings.grpcServerUseTls) {
      reader.problem(
        `GRPC_CLIENT_TLS_CACERT=${quote(settings.grpcClientTlsCacert)} needs GRPC_SERVER_USE_TLS=true: client certificates are only checked over TLS`,
      );
    }
    if (settings.grpcServerUseTls) {
      const missing = [
        ["GRPC_SERVER_TLS_CERT", settings.grpcServerTlsCert],
        ["GRPC_SERVER_TLS_KEY", settings.grpcServerTlsKey],
      ]
        .filter(([, path]) => path === "")
        .map(([name]) => name);
      if (missing.length > 0) {
        reader.problem(
          `GRPC_SERVER_USE_TLS=true needs ${missing.join(" and ")}: expected certificate and key file paths`,
        );
      }
    }
  },
];

/**
 * Parses `CORS_ALLOWED_ORIGINS`: comma-separated, items trimmed, empty items dropped; each `*`
 * or an origin `http(s)://host[:port]` without path.
 * @throws {@link EnvParseError} naming the first bad item
 */
function parseOrigins(text: string): readonly string[] {
  const origins = parseList(text)
    .map((item) => item.trim())
    .filter((item) => item !== "");
  for (const origin of origins) {
    if (origin !== "*" && !/^https?:\/\/[^/\s?#]+$/.test(origin)) {
      throw new EnvParseError(
        "* or comma-separated origins like https://app.example.com",
        `invalid origin "${origin}"`,
      );
    }
  }
  return origins;
}
