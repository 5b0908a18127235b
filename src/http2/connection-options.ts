import type { Logger } from "pino";
import type { Http2Connection } from "./connection.js";
import type { H2Stream } from "./h2-stream.js";
import type { Http2Event } from "./limits.js";

// What can be configured on an {@link Http2Connection}, and the defaults of the protocol
// settings it announces (the abuse limits' defaults are in limits.ts).

/** Limits and settings of {@link Http2Connection}. */
export interface Http2ConnectionOptions {
  /** Called once per request, when its header block is complete and valid. */
  readonly onStream: (stream: H2Stream) => void;
  /** Called once when the socket has closed. */
  readonly onClose?: (connection: Http2Connection) => void;
  readonly logger: Logger;
  /**
   * SETTINGS_MAX_CONCURRENT_STREAMS we announce; streams beyond it are refused
   * (RST_STREAM REFUSED_STREAM, RFC 9113 §5.1.2). @defaultValue {@link http2ConnectionDefaults}
   */
  readonly maxConcurrentStreams?: number;
  /**
   * SETTINGS_INITIAL_WINDOW_SIZE we announce: how many request body bytes a client may send
   * on one stream before we acknowledge them, in bytes. @defaultValue {@link http2ConnectionDefaults}
   */
  readonly initialWindowBytes?: number;
  /**
   * Receive window of the whole connection, in bytes (raised from 65,535 by a WINDOW_UPDATE
   * right after our SETTINGS). @defaultValue {@link http2ConnectionDefaults}
   */
  readonly connectionWindowBytes?: number;
  /**
   * SETTINGS_MAX_HEADER_LIST_SIZE we announce and enforce, in bytes as RFC 9113 §6.5.2
   * counts them (name + value + 32 per field); a larger request is answered 431.
   * @defaultValue {@link http2ConnectionDefaults}
   */
  readonly maxHeaderListBytes?: number;
  /**
   * Stream resets (RST_STREAM) accepted from the peer, a token bucket: `burst` at once,
   * refilled at `ratePerSecond`; beyond it the connection gets GOAWAY(ENHANCE_YOUR_CALM)
   * (rapid reset, CVE-2023-44487). @defaultValue {@link http2ConnectionDefaults}
   */
  readonly streamResetLimit?: {
    readonly burst: number;
    readonly ratePerSecond: number;
  };
  /** Socket bytes queued beyond which we stop reading from the peer. @defaultValue 1 MiB */
  readonly maxQueuedOutputBytes?: number;
  /** Monotonic clock in ms (token bucket). @defaultValue performance.now */
  readonly nowMs?: () => number;
  /**
   * Time for the client preface and first SETTINGS, then for the ACK of ours, in ms; beyond
   * it the connection is closed. @defaultValue {@link http2LimitDefaults}
   */
  readonly handshakeTimeoutMs?: number;
  /**
   * Time a connection may stay with no open stream, in ms, before GOAWAY NO_ERROR; 0
   * disables. @defaultValue {@link http2LimitDefaults} `maxConnectionIdleMs`
   */
  readonly idleTimeoutMs?: number;
  /**
   * PING enforcement (grpc-go's keepalive policy), in ms: a PING sooner than this after the
   * previous one with no response sent in between is a strike; the third ends the connection
   * with GOAWAY ENHANCE_YOUR_CALM. 0 disables. @defaultValue {@link http2LimitDefaults}
   */
  readonly keepaliveMinTimeMs?: number;
  /**
   * Request header lists (as RFC 9113 §6.5.2 counts them) and body bytes the connection's open
   * streams may hold at once, summed over the streams (a stream's bytes count until it
   * closes), as node:http2's `maxSessionMemory` bounds a session; header lists may take a
   * quarter of it at most (they cost more heap than they count). A new stream beyond it is
   * refused (RST_STREAM ENHANCE_YOUR_CALM), body bytes beyond it end the connection (GOAWAY
   * ENHANCE_YOUR_CALM). @defaultValue {@link http2LimitDefaults}
   */
  readonly maxConnectionMemoryBytes?: number;
  /** CONTINUATION frames allowed in one header block. @defaultValue {@link http2LimitDefaults} */
  readonly maxContinuationFrames?: number;
  /** Time a header block may take to end, in ms. @defaultValue {@link http2LimitDefaults} */
  readonly headerBlockTimeoutMs?: number;
  /** Flood score limit (see {@link http2LimitDefaults}). */
  readonly floodLimit?: number;
  /** Flood score decay per second. */
  readonly floodDecayPerSecond?: number;
  /** Told when a limit acts or handling fails (statistics). */
  readonly onEvent?: (event: Http2Event) => void;
}

/**
 * Defaults of {@link Http2ConnectionOptions}:
 * - 1,000 concurrent streams: far above what one proxy connection keeps in flight for a
 *   sub-millisecond call (2,000 calls/s through a 30 ms stall is 60), small enough to bound
 *   the memory one connection can hold;
 * - 1 MiB stream and connection windows: a request never waits for a WINDOW_UPDATE, while
 *   what one connection can make us buffer stays bounded;
 * - 64 KiB header lists, node:http2's default, so a caller that works with the node engine
 *   works with this one (Envoy's rate-limit calls carry a few hundred bytes);
 * - the abuse limits of {@link http2LimitDefaults} (handshake, idle, PING strikes, resets,
 *   memory, CONTINUATION frames, floods).
 */
export const http2ConnectionDefaults = {
  maxConcurrentStreams: 1000,
  initialWindowBytes: 1024 * 1024,
  connectionWindowBytes: 1024 * 1024,
  maxHeaderListBytes: 64 * 1024,
  maxQueuedOutputBytes: 1024 * 1024,
} as const;
