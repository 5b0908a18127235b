// Abuse limits of the gRPC listener's HTTP/2 connections, shared by both engines (the built-in
// one in this folder and node:http2, both served by src/server/grpc/): their defaults, where
// each number comes from, and the events they report. docs/security.md has the table against
// nghttp2, Node and grpc-go.

/**
 * What an HTTP/2 connection reports when a limit acts or something fails; counted as
 * `ratelimit.server.http2.<event>` (not a reference name: the reference has none).
 *
 * - `internal_error`: an exception while handling a connection or stream; the connection was
 *   closed with GOAWAY INTERNAL_ERROR and the process kept serving;
 * - `enhance_your_calm`: a connection was ended with GOAWAY ENHANCE_YOUR_CALM (a flood, too
 *   many resets, PING strikes, CONTINUATION frames, memory budget);
 * - `malformed_request`: a request stream was reset with PROTOCOL_ERROR for invalid header
 *   fields (RFC 9113 §8.2.1, §8.3);
 * - `handshake_timeout`: a connection did not complete the preface and SETTINGS in time;
 * - `idle_timeout`: a connection with no open stream was closed after the idle time;
 * - `connection_limit`: a connection was refused because the process holds the maximum.
 */
export type Http2Event =
  | "internal_error"
  | "enhance_your_calm"
  | "malformed_request"
  | "handshake_timeout"
  | "idle_timeout"
  | "connection_limit";

/** Every {@link Http2Event}, for registering counters. */
export const http2Events: readonly Http2Event[] = [
  "internal_error",
  "enhance_your_calm",
  "malformed_request",
  "handshake_timeout",
  "idle_timeout",
  "connection_limit",
];

/**
 * Defaults of the gRPC listener's HTTP/2 abuse limits (settings in parentheses):
 *
 * - `maxConnections` 10,000 (`GRPC_MAX_CONNECTIONS`), per process: an Envoy opens one
 *   connection per worker thread, so 10,000 carries a fleet of hundreds of proxies while idle
 *   connections (~24 KiB each) stay within ~240 MiB. Node and grpc-go have no default cap.
 * - `handshakeTimeoutMs` 10 s (`GRPC_HANDSHAKE_TIMEOUT`): TLS handshake, client preface and
 *   first SETTINGS; then our SETTINGS must be acknowledged within the same time (RFC 9113
 *   §6.5.3). Node's `unknownProtocolTimeout` is 10 s; grpc-go's `ConnectionTimeout` 120 s.
 * - `maxConnectionIdleMs` 5 min (`GRPC_MAX_CONNECTION_IDLE`): a connection with no open stream
 *   for that long gets GOAWAY NO_ERROR (grpc-go's `MaxConnectionIdle`, default infinite; Envoy
 *   reconnects on its next call).
 * - `keepaliveMinTimeMs` 5 min (`GRPC_KEEPALIVE_MIN_TIME`): grpc-go's keepalive enforcement,
 *   same default: a PING less than this after the previous one, with no response HEADERS or
 *   DATA sent in between, is a strike; the third strike ends the connection (GOAWAY
 *   ENHANCE_YOUR_CALM, "too_many_pings").
 * - `streamResetLimit` 1,000 at once, 1,000/s after (`GRPC_STREAM_RESET_BURST`,
 *   `GRPC_STREAM_RESET_RATE`): Node's burst (its rate is 33/s, too low for an Envoy that
 *   resets every call past its 20 ms timeout during a store stall). A reset stream keeps its
 *   concurrency slot until its decision is done (grpc-go's defence), so resets cannot make
 *   more work run at once than `maxConcurrentStreams`.
 * - `maxConnectionMemoryBytes` 16 MiB (`GRPC_MAX_CONNECTION_MEMORY`): request header lists
 *   and bodies held by one connection's open streams (node:http2's `maxSessionMemory` is
 *   10 MB): four messages of gRPC's 4 MiB limit at once.
 * - `maxContinuationFrames` 8 per header block (nghttp2 ≥ 1.61, CVE-2024-28182).
 * - `headerBlockTimeoutMs` 5 s: a header block must end (END_HEADERS) within this time of its
 *   HEADERS frame; no other frame may interleave meanwhile, so a slow one stalls the
 *   connection.
 * - `floodLimit` 1,000: frames that make no progress (PING, SETTINGS, WINDOW_UPDATE, PRIORITY,
 *   empty DATA or header fragments, unknown types) add 1, refused and malformed streams add
 *   10, each response sent takes 10 off (never below 0), and the score decays by
 *   `floodDecayPerSecond` 100/s; above the limit the connection gets GOAWAY
 *   ENHANCE_YOUR_CALM. 1,000 as nghttp2's queued-ACK limit and Node's
 *   `maxSessionInvalidFrames`; 10 per refused stream as Node's `maxSessionRejectedStreams` 100.
 */
export const http2LimitDefaults = {
  maxConnections: 10_000,
  handshakeTimeoutMs: 10_000,
  maxConnectionIdleMs: 5 * 60_000,
  keepaliveMinTimeMs: 5 * 60_000,
  streamResetLimit: { burst: 1000, ratePerSecond: 1000 },
  maxConnectionMemoryBytes: 16 * 1024 * 1024,
  maxContinuationFrames: 8,
  headerBlockTimeoutMs: 5000,
  floodLimit: 1000,
  floodDecayPerSecond: 100,
} as const;

/**
 * Share of a connection's memory budget (`maxConnectionMemoryBytes`) that request header lists
 * may take, on both engines: decoded into strings and arrays they cost the heap two to three
 * times what RFC 9113 counts (measured: 4 connections holding 16 MiB of lists each grew the RSS
 * by 140–180 MiB), while bodies stay in socket buffers. A quarter (4 MiB by default) still
 * holds 1,000 streams of 4 KiB header lists.
 */
export const headerShareOfMemory = 0.25;
