import { connect, type Socket } from "node:net";
import StatsDClient, { type StatsD } from "hot-shots";
import type { Logger } from "pino";
import {
  createMogrify,
  type Mogrify,
  type MogrifierRule,
} from "./mogrifiers.js";
import { roundDurationMs, type StatsSink } from "./stats-sink.js";

/** Transport of a statsd sink (`PUSHSTATS_PROTOCOL`). */
export type StatsdProtocol = "tcp" | "udp" | "udp4" | "udp6";

/** Options of {@link createStatsdSink}. */
export interface StatsdSinkOptions {
  /** statsd server host (`PUSHSTATS_HOST`). */
  readonly host: string;
  /** statsd server port, 1–65535 (`PUSHSTATS_PORT`). */
  readonly port: number;
  /**
   * `tcp` (newline-terminated lines on one connection, as the reference's statsd sink), or
   * `udp` / `udp4` / `udp6` datagrams (`PUSHSTATS_PROTOCOL`). @defaultValue "tcp"
   */
  readonly protocol?: StatsdProtocol;
  /**
   * Tagged (DogStatsD-style) variant (`USE_TAGGED_PUSHSTATS`): tags serialized in names are
   * sent as `|#key:value` tags and the mogrifier rules rename statistics. Like the reference's
   * DogStatsD sink it speaks UDP (a `tcp` protocol means `udp`), and timers are sent in whole
   * milliseconds. @defaultValue undefined (plain statsd; tags stay in the name)
   */
  readonly tagged?: { readonly mogrifiers: readonly MogrifierRule[] };
  /** Where delivery failures are reported, at most once per flush. */
  readonly logger: Logger;
  /**
   * TCP only: when more than this many bytes are still waiting to be written (a stalled
   * server), a flush is dropped instead of buffered. @defaultValue 4 MiB
   */
  readonly maxPendingBytes?: number;
}

// Largest payload of one UDP datagram that fits a 1500-byte Ethernet MTU.
const udpMaxPayloadBytes = 1432;
const tcpBufferBytes = 8192;
const defaultMaxPendingBytes = 4 * 1024 * 1024;
// Longest wait for buffered lines to be written when closing.
const closeTimeoutMs = 1000;

/** One client (and for TCP one connection); replaced when the connection breaks. */
interface Connection {
  readonly client: StatsD;
  readonly socket: Socket | undefined;
  broken: boolean;
}

/**
 * Creates the push sink: statsd lines (`name:value|c`, `|g`, `|ms`) sent with `hot-shots` to
 * `host:port`, buffered during a flush and written at its end.
 *
 * Delivery never blocks or fails a decision: values are only written by the flush loop; a
 * refused or lost TCP connection is re-opened at the next flush (so at most once per
 * `STATS_FLUSH_INTERVAL`), values of flushes that cannot be delivered are dropped, and failures
 * are logged at most once per flush.
 *
 * A timer flushed with a sample ratio below 1 (see `StatsFlusherOptions.maxTimerSamplesPerFlush`)
 * is sent as the sampled durations only; the statsd server then under-counts that timer's
 * `count`, while `ratelimit_server.<method>.total_requests` stays exact.
 */
export function createStatsdSink(options: StatsdSinkOptions): StatsSink {
  const { host, port, logger } = options;
  const tagged = options.tagged;
  const protocol: StatsdProtocol =
    tagged !== undefined && (options.protocol ?? "tcp") === "tcp"
      ? "udp"
      : (options.protocol ?? "tcp");
  const maxPendingBytes = options.maxPendingBytes ?? defaultMaxPendingBytes;
  const mogrify: Mogrify | undefined =
    tagged === undefined ? undefined : createMogrify(tagged.mogrifiers);

  let failures = 0;
  let lastFailure: unknown;
  let droppedFlushes = 0;
  const fail = (err: unknown): void => {
    failures++;
    lastFailure = err;
  };

  function open(): Connection {
    const common = {
      errorHandler: fail,
      datadog: false,
      includeDataDogTags: false,
      originDetection: false,
      includeDatadogTelemetry: false,
      closingFlushInterval: 20,
    } as const;
    if (protocol === "tcp") {
      const socket = connect({ host, port });
      socket.unref();
      socket.setNoDelay(true);
      const connection: Connection = {
        socket,
        broken: false,
        client: new StatsDClient({
          ...common,
          protocol: "stream",
          stream: socket,
          maxBufferSize: tcpBufferBytes,
        }),
      };
      socket.on("error", fail);
      socket.on("close", () => {
        connection.broken = true;
      });
      return connection;
    }
    return {
      socket: undefined,
      broken: false,
      client: new StatsDClient({
        ...common,
        protocol: "udp",
        host,
        port,
        maxBufferSize: udpMaxPayloadBytes,
        ...(protocol === "udp" ? {} : { udpSocketOptions: { type: protocol } }),
      }),
    };
  }

  function retire(connection: Connection): Promise<void> {
    const socket = connection.socket;
    // A socket that never connected would hold its queued writes until the connect timeout,
    // and hot-shots never reports the close of an already-closed stream: drop it, don't wait.
    const wait = socket === undefined || isWritable(socket);
    if (socket !== undefined && !wait) socket.destroy();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, closeTimeoutMs);
      timer.unref();
      const done = (): void => {
        clearTimeout(timer);
        resolve();
      };
      try {
        // Flushes what is buffered, waits for the writes, then releases the socket.
        connection.client.close(done);
      } catch (err) {
        fail(err);
        done();
      }
      if (!wait) done();
    });
  }

  let current = open();
  let closed = false;
  // Whether this flush was found undeliverable (stalled TCP peer); decided at its first value.
  let flushState: "idle" | "sending" | "dropping" = "idle";

  /** Returns the client to write this flush's values to, or undefined to drop them. */
  function clientForFlush(): StatsD | undefined {
    if (flushState === "idle") {
      if (current.broken) {
        // Reconnect once per flush; the old client's pending writes already failed.
        void retire(current);
        current = open();
      }
      const socket = current.socket;
      flushState =
        socket !== undefined && socket.writableLength > maxPendingBytes
          ? "dropping"
          : "sending";
      if (flushState === "dropping") droppedFlushes++;
    }
    return flushState === "sending" ? current.client : undefined;
  }

  return {
    flushCounter(name, delta) {
      if (closed) return;
      const client = clientForFlush();
      if (client === undefined) return;
      if (mogrify === undefined) {
        client.increment(name, delta);
      } else {
        const out = mogrify(name);
        client.increment(out.name, delta, out.tags as string[]);
      }
    },
    flushGauge(name, value) {
      if (closed) return;
      const client = clientForFlush();
      if (client === undefined) return;
      if (mogrify === undefined) {
        client.gauge(name, value);
      } else {
        const out = mogrify(name);
        client.gauge(out.name, value, out.tags as string[]);
      }
    },
    flushTimer(name, durationMs) {
      if (closed) return;
      const client = clientForFlush();
      if (client === undefined) return;
      if (mogrify === undefined) {
        client.timing(name, roundDurationMs(durationMs));
      } else {
        // Same as the reference's DogStatsD sink: whole milliseconds.
        const out = mogrify(name);
        client.timing(out.name, Math.trunc(durationMs), out.tags as string[]);
      }
    },
    endFlush() {
      if (flushState === "sending") current.client.flush();
      flushState = "idle";
      if (failures > 0 || droppedFlushes > 0) {
        logger.warn(
          {
            err: lastFailure,
            failures,
            droppedFlushes,
            address: `${host}:${port}`,
            protocol,
          },
          "statistics not delivered to the push sink; retrying at the next flush",
        );
        failures = 0;
        droppedFlushes = 0;
        lastFailure = undefined;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await retire(current);
    },
  };
}

/** Whether a TCP socket is connected and accepting writes. */
function isWritable(socket: Socket): boolean {
  return !socket.connecting && !socket.destroyed && socket.writable;
}
