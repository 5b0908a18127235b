import { connect, type Socket } from "node:net";
import { HpackDecoder, encodeHeaderBlock } from "../../src/http2/hpack.js";
import {
  clientPreface,
  FrameType,
  writeFrameHeader,
} from "../../src/http2/frames.js";

/** One frame as received. */
export interface RawFrame {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly payload: Buffer;
}

/** Builds one frame from its parts. */
export function frame(
  type: number,
  flags: number,
  streamId: number,
  payload: Uint8Array = Buffer.alloc(0),
): Buffer {
  const out = Buffer.alloc(9 + payload.length);
  writeFrameHeader(out, 0, payload.length, type, flags, streamId);
  out.set(payload, 9);
  return out;
}

/** A SETTINGS payload from `[id, value]` pairs. */
export function settingsPayload(pairs: [number, number][]): Buffer {
  const out = Buffer.alloc(6 * pairs.length);
  pairs.forEach(([id, value], i) => {
    out.writeUInt16BE(id, 6 * i);
    out.writeUInt32BE(value, 6 * i + 2);
  });
  return out;
}

/** A 4-byte big-endian payload (WINDOW_UPDATE, RST_STREAM). */
export function u32(value: number): Buffer {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(value);
  return out;
}

/** An HPACK block (static table / literals) for request header fields. */
export function headerBlock(fields: [string, string][]): Buffer {
  return encodeHeaderBlock(fields);
}

/** Request header fields of a unary gRPC ShouldRateLimit call. */
export function grpcRequestFields(
  extra: [string, string][] = [],
): [string, string][] {
  return [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ...extra,
  ];
}

/**
 * A client speaking raw HTTP/2 frames over a TCP socket: what it sends is exactly what the
 * test builds; what the server sends is parsed into frames (header blocks decoded).
 */
export class RawH2Client {
  readonly socket: Socket;
  readonly frames: RawFrame[] = [];
  readonly closed: Promise<void>;
  private buffered = Buffer.alloc(0);
  private readonly decoder = new HpackDecoder();
  private waiters: (() => void)[] = [];
  private sendingPieces = false;
  private ackOwed = false;

  private constructor(socket: Socket, ackSettings: boolean) {
    this.socket = socket;
    socket.on("data", (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      while (this.buffered.length >= 9) {
        const size = this.buffered.readUIntBE(0, 3);
        if (this.buffered.length < 9 + size) break;
        const received = {
          type: this.buffered.readUInt8(3),
          flags: this.buffered.readUInt8(4),
          streamId: this.buffered.readUInt32BE(5) & 0x7fffffff,
          payload: Buffer.from(this.buffered.subarray(9, 9 + size)),
        };
        this.frames.push(received);
        // As every real client does (RFC 9113 §6.5.3): the server may end a connection whose
        // peer never acknowledges its SETTINGS.
        if (
          ackSettings &&
          received.type === FrameType.settings &&
          (received.flags & 0x1) === 0 &&
          !socket.destroyed
        ) {
          // Never between the bytes of a frame sendInPieces is writing.
          if (this.sendingPieces) this.ackOwed = true;
          else socket.write(frame(FrameType.settings, 0x1, 0));
        }
        this.buffered = this.buffered.subarray(9 + size);
      }
      this.wake();
    });
    socket.on("error", () => undefined);
    this.closed = new Promise((resolve) => {
      socket.on("close", () => {
        this.wake();
        resolve();
      });
    });
  }

  /**
   * Connects; sends the preface and an empty (or given) SETTINGS unless `preface` is false;
   * acknowledges the server's SETTINGS unless `ackSettings` is false (default: when it sends
   * the preface).
   */
  static async open(
    port: number,
    options: {
      preface?: boolean;
      settings?: [number, number][];
      ackSettings?: boolean;
    } = {},
  ): Promise<RawH2Client> {
    const socket = connect({ host: "127.0.0.1", port });
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const client = new RawH2Client(
      socket,
      options.ackSettings ?? options.preface !== false,
    );
    if (options.preface !== false) {
      client.send(
        Buffer.concat([
          clientPreface,
          frame(
            FrameType.settings,
            0,
            0,
            settingsPayload(options.settings ?? []),
          ),
        ]),
      );
    }
    return client;
  }

  send(bytes: Buffer): void {
    this.socket.write(bytes);
  }

  /** Sends `bytes` in pieces of `size` bytes, one write per event-loop turn. */
  async sendInPieces(bytes: Buffer, size: number): Promise<void> {
    this.sendingPieces = true;
    for (let i = 0; i < bytes.length; i += size) {
      this.socket.write(bytes.subarray(i, i + size));
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    this.sendingPieces = false;
    if (this.ackOwed) {
      this.ackOwed = false;
      this.socket.write(frame(FrameType.settings, 0x1, 0));
    }
  }

  /** Waits for the first frame (after `from`) matching `match`; rejects after `timeoutMs`. */
  async waitFor(
    match: (f: RawFrame) => boolean,
    timeoutMs = 2000,
  ): Promise<RawFrame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined) return found;
      if (this.socket.destroyed || Date.now() > deadline)
        throw new Error(
          `no matching frame; got ${this.frames.map((f) => `${f.type}/${f.flags}/${f.streamId}`).join(" ")}`,
        );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Waits for a GOAWAY and returns its error code. */
  async goawayCode(timeoutMs = 2000): Promise<number> {
    const f = await this.waitFor((x) => x.type === FrameType.goaway, timeoutMs);
    return f.payload.readUInt32BE(4);
  }

  /** Decodes a HEADERS frame's block (no padding or priority: the server sends none). */
  decodeHeaders(f: RawFrame): Record<string, string> {
    const list = this.decoder.decode(f.payload, 0, f.payload.length, 1 << 20);
    const out: Record<string, string> = {};
    for (let i = 0; i < list.length; i += 2)
      out[list[i] ?? ""] = list[i + 1] ?? "";
    return out;
  }

  /** Frames received on `streamId`, in order. */
  on(streamId: number): RawFrame[] {
    return this.frames.filter((f) => f.streamId === streamId);
  }

  close(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}
